"""The Colab/Kaggle setup's last step: install only what the runtime lacks, never torch, and say so."""

import tomllib

import pytest

from autogradlab import runtime

NEEDS = {"torch": (2, 11), "numpy": (1, 26), "ipywidgets": (7, 7, 1), "tqdm": (4, 66)}
COLAB = {"torch": "2.11.0+cu130", "numpy": "2.0.2", "ipywidgets": "7.7.1", "tqdm": "4.67.1"}


def run_complete(monkeypatch, have, *, gpu=True, pip_status=0):
    calls = []
    monkeypatch.setattr(runtime, "requirements", lambda: dict(NEEDS))
    monkeypatch.setattr(runtime, "installed", lambda name: have.get(name))
    lines = runtime.complete(pip=lambda args: calls.append(args) or pip_status, gpu=lambda: gpu)
    return calls, lines


def test_a_runtime_with_everything_installs_nothing_and_says_ready(monkeypatch):
    calls, lines = run_complete(monkeypatch, COLAB)
    assert calls == [] and len(lines) == 1
    assert lines[0].startswith("✓") and "2.11.0+cu130" in lines[0] and "GPU" in lines[0]


def test_no_gpu_is_said_in_the_same_line(monkeypatch):
    calls, lines = run_complete(monkeypatch, COLAB, gpu=False)
    assert calls == [] and len(lines) == 1 and "no GPU" in lines[0]


def test_what_lacks_is_installed_with_the_platform_torch_pinned(monkeypatch):
    have = dict(COLAB, tqdm=None, numpy="1.24.0")
    calls, lines = run_complete(monkeypatch, have)
    assert calls == [["numpy>=1.26", "tqdm>=4.66", "torch==2.11.0+cu130"]]
    assert "numpy>=1.26, tqdm>=4.66" in lines[0] and lines[-1].startswith("✓")


@pytest.mark.parametrize("torch_version", ["2.9.1+cu126", None])
def test_an_old_or_missing_torch_is_never_installed_only_reported(monkeypatch, torch_version):
    have = dict(COLAB, torch=torch_version, tqdm=None)
    calls, lines = run_complete(monkeypatch, have)
    # torch is never asked for, only pinned at the version present (pip then leaves it alone)
    assert calls == [["tqdm>=4.66", f"torch=={torch_version}"] if torch_version else ["tqdm>=4.66"]]
    assert lines[-1].startswith("⚠") and "torch>=2.11" in lines[-1]
    assert (torch_version or "no torch") in lines[-1]


def test_a_failed_install_is_said(monkeypatch):
    calls, lines = run_complete(monkeypatch, dict(COLAB, tqdm=None), pip_status=1)
    assert lines[0].startswith("⚠ Could not install tqdm>=4.66")


def test_every_declared_dependency_is_a_floor_the_runtime_reads(repo_root, monkeypatch):
    """pyproject's dependencies are plain `name>=X` floors, so complete() checks every one of them."""
    declared = tomllib.loads((repo_root / "widgets" / "pyproject.toml").read_text())["project"]["dependencies"]
    monkeypatch.setattr(runtime.importlib.metadata, "requires", lambda package: declared)
    floors = runtime.requirements()
    assert len(floors) == len(declared) and floors["torch"] == (2, 11)
