"""Peak memory of one notebook run top to bottom: the kernel and every process it starts (DDP workers too).

    .venv/bin/python tools/peak_memory.py solutions/07_gradient_accumulation.ipynb

Runs ``jupyter nbconvert --execute`` on a copy and samples its process tree every 50 ms with psutil.
It prints two peaks: summed RSS, which counts memory shared between processes (torch's libraries)
once per process, so an upper bound; and summed PSS, which splits shared pages between the processes
that map them, so what the machine really holds (Linux only). The Jupyter server a learner has on top
adds about 85 MiB. docs/instructors.md quotes the result for its memory limit per learner.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

from autogradlab.units import format_bytes


def tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def measure(notebook: Path, every: float = 0.05) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / notebook.name
        shutil.copy(notebook, copy)
        jupyter = Path(sys.executable).parent / "jupyter"
        command = [str(jupyter), "nbconvert", "--to", "notebook", "--execute", "--inplace", str(copy)]
        start = time.monotonic()
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=folder)
        root, peak_rss, peak_pss, most = psutil.Process(process.pid), 0, 0, 0
        while process.poll() is None:
            rss = pss = 0
            members = tree(root)
            for member in members:
                try:
                    info = member.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                rss, pss = rss + info.rss, pss + getattr(info, "pss", 0)
            peak_rss, peak_pss, most = max(peak_rss, rss), max(peak_pss, pss), max(most, len(members))
            time.sleep(every)
        if process.returncode:
            raise SystemExit(f"nbconvert failed:\n{process.stderr.read().decode()[-2000:]}")
    return {"rss": peak_rss, "pss": peak_pss, "processes": most, "seconds": time.monotonic() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebook", type=Path)
    args = parser.parse_args()
    found = measure(args.notebook)
    print(
        f"{args.notebook.name}: peak summed RSS {format_bytes(found['rss'])}, peak summed PSS {format_bytes(found['pss'])}, "
        f"up to {found['processes']} processes, {found['seconds']:.0f} s"
    )


if __name__ == "__main__":
    main()
