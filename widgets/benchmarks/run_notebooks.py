"""Run notebooks top to bottom with nbclient, several at once, and print a table: seconds, error, device.

    PYTHONPATH=widgets python widgets/benchmarks/run_notebooks.py solutions/*.ipynb [--jobs 4] [--out DIR]

Made for the GPU machine (issue 16): every chapter must run on CUDA, where the
tests (CPU-only CI) never run them. Each notebook runs in its own kernel in a
temporary copy of its folder, so several run at once without writing into the
checkout. With ``--out DIR`` the executed notebooks go to ``DIR/executed.tar.gz``
and the table to ``DIR/notebooks.json``. The exit status is the number of
notebooks that failed.
"""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
from nbclient import NotebookClient


def _first_stream(nb, marker: str) -> str:
    """The first output line that contains ``marker`` (e.g. the device banner), or ''."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text = out.get("text", "") if out.get("output_type") == "stream" else ""
            for line in text.splitlines():
                if marker in line:
                    return line.strip()
    return ""


def run_one(path: Path, timeout: int) -> tuple[dict, bytes]:
    """Execute ``path`` in a temporary copy of its folder; return its row and the executed notebook's bytes."""
    nb = nbformat.read(path, as_version=4)
    row = {"notebook": path.name, "seconds": None, "error": None, "cell": None, "device": ""}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / path.parent.name
        shutil.copytree(path.parent, work, ignore=shutil.ignore_patterns("*.ipynb_checkpoints"))
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(work)}})
        start = time.perf_counter()
        try:
            client.execute()
        except Exception as exc:  # a failing cell, a timeout, or a kernel that died (e.g. a CUDA crash)
            failed = next(
                (
                    i
                    for i, c in enumerate(nb.cells)
                    if any(o.get("output_type") == "error" for o in c.get("outputs", []))
                ),
                None,
            )
            row["cell"] = failed
            lines = str(exc).strip().splitlines()
            row["error"] = (lines[-1] if lines else type(exc).__name__)[:300]
        row["seconds"] = round(time.perf_counter() - start, 1)
    row["device"] = _first_stream(nb, "device:") or _first_stream(nb, "Running on")
    return row, nbformat.writes(nb).encode()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="+", type=Path)
    parser.add_argument("--jobs", type=int, default=2, help="notebooks run at once (default 2)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell (default 300)")
    parser.add_argument("--out", type=Path, help="folder for notebooks.json and executed.tar.gz")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.notebooks if not p.is_file()]
    if missing:
        print("error: no such notebook: " + ", ".join(missing), file=sys.stderr)
        return 2
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        done = list(pool.map(lambda p: run_one(p, args.timeout), args.notebooks))
    rows = [row for row, _ in done]
    print("| notebook | seconds | result | device |\n|---|---|---|---|")
    for r in rows:
        result = "ok" if r["error"] is None else f"cell {r['cell']}: {r['error']}"
        print(f"| {r['notebook']} | {r['seconds']} | {result} | {r['device']} |")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "notebooks.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
        with tarfile.open(args.out / "executed.tar.gz", "w:gz") as tar:
            for (_row, data), path in zip(done, args.notebooks):
                info = tarfile.TarInfo(path.name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return sum(r["error"] is not None for r in rows)


if __name__ == "__main__":
    sys.exit(main())
