"""`make lab` starts JupyterLab with chapter 00 as the page it opens."""

import os
import re
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


def test_make_lab_serves_chapter_00(tmp_path):
    port = free_port()
    log_path = tmp_path / "lab.log"
    with open(log_path, "w") as log:
        lab = subprocess.Popen(
            [
                "make",
                "--no-print-directory",
                "lab",
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
        assert f"127.0.0.1:{port}/lab/tree/chapters/00_welcome.ipynb?token=" in url
        assert urllib.request.urlopen(url, timeout=10).status == 200
    finally:
        os.killpg(lab.pid, signal.SIGTERM)
        lab.wait(timeout=30)
