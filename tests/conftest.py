"""Shared fixtures for the package tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Under pytest-xdist several workers (and the kernels they start) share a few cores: torch's own
# thread pool on top of them makes each small op wait on threads the other processes hold.
# (Only the workers import torch here: the controlling process runs no test and needs no torch.)
if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo_root() -> Path:
    return ROOT


# Modules that start JupyterLab, nbgrader or other processes, or build environments: the full
# suite (`make test`) runs them, the fast tier (`make check`) leaves them out with -m "not slow",
# without importing them. A single test that starts a process is marked @pytest.mark.slow where it is.
SLOW_MODULES = {
    "test_browser",
    "test_first_open",
    "test_classroom",
    "test_nbgrader",
    "test_nbgrader_zh",
    "test_make_lab",
    "test_ddp_demo",
    "test_compat",
    "test_site",
    "test_run_notebooks",
}


def pytest_ignore_collect(collection_path, config):
    """The fast tier does not import the slow modules (Playwright, nbconvert, ...) only to deselect them."""
    if config.getoption("markexpr") == "not slow" and collection_path.stem in SLOW_MODULES:
        return True
    return None


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
