"""`make lab` copies the chapters into the learner's own folder and starts JupyterLab on chapter 00 there."""

import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_make_lab_serves_chapter_00_from_the_learners_copy(tmp_path):
    port = free_port()
    learner = "build/test-make-lab/my-chapters"  # under the checkout, where JupyterLab serves from
    shutil.rmtree(ROOT / learner, ignore_errors=True)
    log_path = tmp_path / "lab.log"
    with open(log_path, "w") as log:
        lab = subprocess.Popen(
            [
                "make",
                "--no-print-directory",
                "lab",
                f"LEARNER={learner}",
                f"LAB_ARGS=--no-browser --allow-root --ServerApp.ip=127.0.0.1 --port {port} --ServerApp.port_retries=0",
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        url = None
        deadline = time.monotonic() + 90
        while url is None and time.monotonic() < deadline and lab.poll() is None:
            match = re.search(rf"http://127\.0\.0\.1:{port}/\S+", log_path.read_text())
            url = match.group(0) if match else None
            time.sleep(0.5)
        assert url, f"make lab printed no URL:\n{log_path.read_text()[-2000:]}"
        assert f"127.0.0.1:{port}/lab/tree/{learner}/00_welcome.ipynb?token=" in url
        assert urllib.request.urlopen(url, timeout=10).status == 200
        copied = sorted(p.name for p in (ROOT / learner).glob("*.ipynb"))
        assert copied == sorted(p.name for p in (ROOT / "chapters").glob("[0-9][0-9]_*.ipynb"))
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)
        shutil.rmtree(ROOT / "build" / "test-make-lab", ignore_errors=True)
