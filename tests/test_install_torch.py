"""make lab's torch choice (tools/install_torch.py): the CPU build on Linux without an NVIDIA GPU, PyPI's
with one, and a fallback within seconds when PyTorch's CPU index cannot be reached."""

import http.server
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "install_torch.py"
spec = importlib.util.spec_from_file_location("install_torch", SCRIPT)
install_torch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(install_torch)


@pytest.mark.parametrize(
    "want, system, machine, gpu, expected",
    [
        ("auto", "Linux", "x86_64", False, "cpu"),
        ("auto", "Linux", "x86_64", True, "default"),  # PyPI's CUDA build
        ("auto", "Linux", "aarch64", False, "default"),
        ("auto", "Darwin", "arm64", False, "default"),
        ("auto", "Windows", "AMD64", False, "default"),  # PyPI's Windows build pulls no CUDA libraries
        ("cpu", "Linux", "x86_64", True, "cpu"),
        ("cuda", "Linux", "x86_64", False, "default"),
    ],
)
def test_choice(want, system, machine, gpu, expected):
    assert install_torch.choose(want, system, machine, gpu) == expected


def fake_smi(folder, script):
    folder.mkdir(exist_ok=True)
    smi = folder / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + script)
    smi.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


@pytest.mark.parametrize(
    "script, found",
    [
        ('echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)"\n', True),
        ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver." >&2\nexit 9\n', False),
        ("exit 0\n", False),  # a driver and no GPU: lists nothing
    ],
)
def test_a_gpu_is_what_nvidia_smi_lists(tmp_path, monkeypatch, script, found):
    monkeypatch.setenv("PATH", fake_smi(tmp_path / "bin", script)["PATH"])
    gpu, note = install_torch.nvidia_gpu()
    assert gpu is found
    assert ("H100" in note) if found else note


def test_no_nvidia_smi_means_no_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert install_torch.nvidia_gpu() == (False, "nvidia-smi not found")


@pytest.fixture
def index_server():
    class Index(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/whl/cpu"
    server.shutdown()


@pytest.fixture
def silent_server():
    """Accepts connections and never answers (a firewall that drops, a hung proxy)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}/whl/cpu"
    sock.close()


def closed_port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/whl/cpu"


def test_reachable_answers_within_its_deadline(index_server, silent_server):
    assert install_torch.reachable(index_server + "/torch/", 2)[0]
    assert not install_torch.reachable(closed_port() + "/torch/", 2)[0]
    start = time.monotonic()
    ok, why = install_torch.reachable(silent_server + "/torch/", 1)
    assert not ok and time.monotonic() - start < 3, why


def plan(tmp_path, index, *args, smi="exit 0\n"):
    env = dict(os.environ, AUTOGRADLAB_TORCH_CPU_INDEX=index, **fake_smi(tmp_path / "bin", smi))
    env.pop("TORCH", None)
    start = time.monotonic()
    run = subprocess.run([sys.executable, str(SCRIPT), *args, "--dry-run"], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    return run.stdout, time.monotonic() - start


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU index is chosen on Linux x86-64 only")
def test_linux_without_a_gpu_installs_the_cpu_build_from_the_cpu_index(tmp_path, index_server):
    out, _ = plan(tmp_path, index_server)
    assert "CPU build" in out and f"--index-url {index_server}" in out and "--no-deps" in out


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU index is chosen on Linux x86-64 only")
def test_an_unreachable_cpu_index_falls_back_to_the_default_index_in_seconds_and_says_so(tmp_path):
    out, seconds = plan(tmp_path, closed_port())
    assert "cannot be reached" in out and "default index" in out and "--index-url" not in out
    assert seconds < 10


def test_with_a_gpu_the_default_index_and_cuda_build(tmp_path, index_server):
    out, _ = plan(tmp_path, index_server, smi='echo "GPU 0: NVIDIA H100 (UUID: GPU-1)"\n')
    assert "--index-url" not in out and "torch==" in out and ("CUDA build" in out or sys.platform != "linux")


@pytest.mark.skipif(
    (install_torch.installed_version() or "").split("+")[0] != install_torch.pinned_version(),
    reason="the running python's torch is not the pinned version",
)
def test_the_pinned_torch_already_installed_is_kept_without_calling_pip(tmp_path):
    """What make lab does on this machine's .venv: torch 2.13.0(+cpu) is there, so nothing is downloaded."""
    run = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, env=dict(os.environ, PATH="/usr/bin:/bin")
    )
    assert run.returncode == 0 and run.stdout.strip().endswith("is installed: kept."), run.stdout + run.stderr
