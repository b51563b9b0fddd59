"""Install the torch build that fits this machine, before `pip install -r requirements.txt` (make lab runs it).

    python tools/install_torch.py [auto|cpu|cuda] [--dry-run]

- auto (the default): on Linux x86-64 without a working NVIDIA GPU, the CPU build from PyTorch's CPU
  index (about 183 MiB); with one (``nvidia-smi -L`` lists a GPU), PyPI's build, which is the CUDA build
  (about 2.55 GiB with NVIDIA's libraries); on macOS, Windows and other machines, PyPI's build (small there).
- cpu / cuda: force one of the two.

Where the CPU index cannot be reached, it says so and falls back to the default index within seconds:
the index is probed first with a hard deadline (also on DNS, which socket time-outs do not cover), and
pip gets short time-outs. torch already installed at the pinned version is kept, whatever its build.
Only the standard library: it runs in the fresh venv before anything else is installed.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

CPU_INDEX = os.environ.get("AUTOGRADLAB_TORCH_CPU_INDEX", "https://download.pytorch.org/whl/cpu")
PROBE_SECONDS = 5.0
REQUIREMENTS = Path(__file__).resolve().parent.parent / "requirements.txt"
SIZES = {"cpu": "about 183 MiB", "cuda": "about 2.55 GiB: the torch wheel and NVIDIA's CUDA libraries"}


def pinned_version(requirements: Path = REQUIREMENTS) -> str:
    """The torch version requirements.txt pins (its one home)."""
    match = re.search(r"^torch==(\S+)", requirements.read_text(), re.MULTILINE)
    if not match:
        raise SystemExit(f"{requirements}: no torch==VERSION pin")
    return match.group(1)


def installed_version() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def nvidia_gpu() -> tuple[bool, str]:
    """Whether ``nvidia-smi -L`` lists a GPU, and what it said (a driver without a GPU lists none)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False, "nvidia-smi not found"
    try:
        run = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"nvidia-smi failed ({type(exc).__name__})"
    gpus = [line for line in run.stdout.splitlines() if line.startswith("GPU ")]
    if run.returncode != 0 or not gpus:
        return False, f"nvidia-smi lists no GPU (exit {run.returncode})"
    return True, gpus[0].split(" (UUID")[0]


def reachable(url: str, seconds: float = PROBE_SECONDS) -> tuple[bool, str]:
    """Whether ``url`` answers within ``seconds``, all included (name lookup, connect, TLS, reply)."""
    result: list[str] = []

    def probe() -> None:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=seconds) as reply:
                result.append(f"HTTP {reply.status}")
        except urllib.error.HTTPError as exc:  # it answered: pip will say more if it cannot use the answer
            result.append(f"HTTP {exc.code}")
        except Exception as exc:  # no answer: say why
            result.append(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}")

    worker = threading.Thread(target=probe, daemon=True)
    worker.start()
    worker.join(seconds)
    if not result:
        return False, f"no answer within {seconds:.0f} s"
    return result[0].startswith("HTTP "), result[0]


def choose(want: str, system: str, machine: str, gpu: bool) -> str:
    """'cpu' (PyTorch's CPU index) or 'default' (the configured index, PyPI) for this machine.

    >>> choose("auto", "Linux", "x86_64", gpu=False), choose("auto", "Linux", "x86_64", gpu=True)
    ('cpu', 'default')
    >>> choose("auto", "Darwin", "arm64", gpu=False), choose("cpu", "Windows", "AMD64", gpu=True)
    ('default', 'cpu')
    """
    if want in ("cpu", "cuda"):
        return "cpu" if want == "cpu" else "default"
    return "cpu" if system == "Linux" and machine in ("x86_64", "AMD64") and not gpu else "default"


def pip(*args: str, dry_run: bool) -> int:
    command = [sys.executable, "-m", "pip", "install", "--quiet", *args]
    print("  " + " ".join(command[2:]), flush=True)
    return 0 if dry_run else subprocess.call(command)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("want", nargs="?", default=os.environ.get("TORCH") or "auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--dry-run", action="store_true", help="print the decision and the pip command only")
    args = parser.parse_args(argv)
    version, have = pinned_version(), installed_version()
    if have is not None and have.split("+")[0] == version and not args.dry_run:
        print(f"torch {have} is installed: kept.")
        return 0
    system, machine = platform.system(), platform.machine()
    gpu, gpu_note = nvidia_gpu() if system == "Linux" else (False, "not Linux")
    where = choose(args.want, system, machine, gpu)
    spec = f"torch=={version}"
    if where == "cpu":
        start = time.monotonic()
        ok, answer = reachable(CPU_INDEX + "/torch/")
        if ok:
            print(
                f"torch: {system} {machine}, {gpu_note}: installing {spec}'s CPU build ({SIZES['cpu']}) from {CPU_INDEX}"
            )
            # --no-deps: torch's own dependencies are pinned in requirements.txt, installed next from PyPI.
            if (
                pip(
                    spec,
                    "--no-deps",
                    "--index-url",
                    CPU_INDEX,
                    "--timeout",
                    "20",
                    "--retries",
                    "1",
                    dry_run=args.dry_run,
                )
                == 0
            ):
                return 0
            answer = "pip could not finish the download"
        print(
            f"torch: PyTorch's CPU index ({CPU_INDEX}) cannot be reached ({answer}; "
            f"{time.monotonic() - start:.1f} s): installing {spec} from the default index instead "
            f"(on Linux x86-64 that is the CUDA build, {SIZES['cuda']}). For the CPU build later: "
            f"`.venv/bin/pip uninstall torch` then `make lab TORCH=cpu`."
        )
    else:
        build = "the CUDA build" if system == "Linux" else "PyPI's build"
        size = SIZES["cuda"] if system == "Linux" and machine in ("x86_64", "AMD64") else "a few hundred MiB"
        print(f"torch: {system} {machine}, {gpu_note}: installing {spec}, {build} ({size}) from the default index")
    return pip(spec, dry_run=args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
