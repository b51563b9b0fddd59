"""Headless Chromium and a JupyterLab server for the browser tests: Debian's binary, never a downloaded one.

See shared notes on browser testing: the flags keep Chromium off the network and quiet; the server
listens on a free loopback port with no token, serves one folder, and is stopped by its PID.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def missing() -> str | None:
    """Why a browser test cannot run here, or None."""
    if not Path(CHROMIUM).exists():
        return f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (requirements-test.txt)"
    return None


@contextlib.contextmanager
def chromium_context(profile: Path, width: int, height: int) -> Iterator:
    """A persistent Playwright browser context on a fresh profile folder, closed on exit."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": width, "height": height},
        )
        try:
            yield context
        finally:
            context.close()


def write_settings(folder: Path, extra: dict | None = None) -> None:
    """JupyterLab user settings: what learners get (binder/overrides.json, default windowing), autosave off."""
    settings = {"@jupyterlab/docmanager-extension/plugin.jupyterlab-settings": {"autosave": False}}
    overrides = json.loads((ROOT / "binder" / "overrides.json").read_text())
    for plugin, value in overrides.items():
        package, name = plugin.split(":")
        settings[f"{package}/{name}.jupyterlab-settings"] = value
    settings.update(extra or {})
    for name, value in settings.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def jupyterlab(root: Path, settings: Path, env: dict | None = None) -> Iterator[str]:
    """A JupyterLab server serving ``root`` on a free loopback port; yields its base URL, stops it on exit."""
    port = _free_port()
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(settings), **(env or {}))
    log_path = root / "jupyterlab.log"
    with open(log_path, "w") as log:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jupyter",
                "lab",
                "--no-browser",
                "--allow-root",
                "--ServerApp.token=",
                "--ServerApp.password=",
                "--ServerApp.ip=127.0.0.1",
                f"--ServerApp.port={port}",
                "--ServerApp.port_retries=0",
                f"--ServerApp.root_dir={root}",
                # window.jupyterapp: a test opens the next notebook in the page it has, without booting JupyterLab again
                "--LabApp.expose_app_in_browser=True",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if urllib.request.urlopen(f"{base}/api/status", timeout=2).status == 200:
                        break
                except OSError:
                    pass
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start:\n{log_path.read_text()[-3000:]}")
                time.sleep(0.5)
            yield base
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()


# Close every open tab without asking (a run leaves its notebook changed), then open ``path``.
_OPEN = """async (path) => {
  const app = window.jupyterapp;
  await app.restored;
  for (const widget of Array.from(app.shell.widgets('main'))) {
    if (widget.context) widget.context.model.dirty = false;
    widget.dispose();
  }
  await app.commands.execute('docmanager:open', {path});
}"""


def open_notebook(page, base: str, path: str) -> None:
    """Open the notebook ``path`` (relative to the server's root) in JupyterLab at ``base``, its cells drawn.

    The first call on a page loads JupyterLab with a reset workspace; later ones open the notebook in the
    JupyterLab already loaded, as a learner does from the file browser, after closing the tab before: a
    page load boots JupyterLab again (4 to 5 s on a 2-core machine, against 1 to 1.5 s for an open).
    """
    if not page.url.startswith(f"{base}/lab"):
        page.goto(f"{base}/lab?reset", wait_until="domcontentloaded")
        page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    page.evaluate(_OPEN, path)
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)


def wait_kernel_idle(page, timeout_s: float) -> None:
    """Wait until the notebook's kernel is really there (a name in the toolbar) and idle."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        name = page.locator(".jp-NotebookPanel-toolbar .jp-KernelName").first
        status = page.locator(".jp-Notebook-ExecutionIndicator").first
        kernel = name.text_content() if name.count() else ""
        if (
            kernel
            and kernel.strip() not in ("", "No Kernel")
            and status.count()
            and status.get_attribute("data-status") == "idle"
        ):
            return
        time.sleep(0.25)
    raise AssertionError("the kernel did not become idle")


def shut_down_kernels(page) -> None:
    """End every session through the server's REST API, from the page (it holds the XSRF cookie)."""
    page.evaluate("""async () => {
      const xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || '';
      const sessions = await (await fetch('/api/sessions')).json();
      for (const s of sessions) {
        await fetch('/api/sessions/' + s.id, {method: 'DELETE', headers: {'X-XSRFToken': decodeURIComponent(xsrf)}});
      }
    }""")
