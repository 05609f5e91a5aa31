"""Browser tests of the console in headless Chromium (the Debian ``chromium`` package, driven by
Playwright with ``executable_path``; Playwright never downloads a browser here) against the real thing:
the Procfile's ``web`` command (gunicorn, 2 gevent workers) started from the test, over the session's
database, without ``LEDGERFLOW_SECRET_KEY`` (the gunicorn master makes the one key of its workers).

One server, one browser and one scenario (tests/console_scenario.py) serve the whole suite.
Without Chromium (or the playwright package) every test of this folder is skipped with the command that
installs it; ``.ci/run`` installs it when missing. ``LEDGERFLOW_SCREENSHOTS=docs/console`` saves the
screenshots there (the committed ones, ``make screenshots``); otherwise they go to a temporary folder."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.console_scenario import Scenario, build

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "apt-get update && apt-get install -y chromium (as root; .ci/run does it)"
# CHROMIUM=/path/to/chromium picks the browser, and only it (CHROMIUM=/nonexistent shows the skip).
_CANDIDATES = (
    (os.environ["CHROMIUM"],)
    if os.environ.get("CHROMIUM")
    else (shutil.which("chromium"), "/usr/bin/chromium")
)
CHROMIUM = next((p for p in _CANDIDATES if p and Path(p).exists()), None)
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
AXE = ROOT / "tests" / "browser" / "vendor" / "axe-4.14.1.min.js"
WIDE, PHONE = {"width": 1280, "height": 900}, {"width": 390, "height": 844}

try:
    from playwright.sync_api import Browser, BrowserContext, Page, Playwright, expect, sync_playwright
except ImportError:  # pragma: no cover - the test extra installs it
    sync_playwright = None  # type: ignore[assignment]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    if sync_playwright is None:
        reason = "the playwright package is missing: make install (it is in the test extra)"
    elif CHROMIUM is None:
        reason = f"no Chromium found for the browser tests: {INSTALL}"
    if reason:
        for item in items:
            if "tests/browser" in str(item.fspath):
                item.add_marker(pytest.mark.skip(reason=reason))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def procfile_line(name: str) -> str:
    line = next(ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith(f"{name}:"))
    return line.split(":", 1)[1].strip()


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.fixture(scope="session")
def procfile_web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The Procfile's ``web`` line, run as it is (through a shell, as honcho does) on a free local port;
    yields ``{"url", "pid", "log"}`` once ``/healthz`` answers and both workers are up."""
    port = _free_port()
    multiproc = tmp_path_factory.mktemp("prom")
    env = {k: v for k, v in os.environ.items() if k != "LEDGERFLOW_SECRET_KEY"}
    env.update(
        PORT=str(port),
        LEDGERFLOW_BIND_HOST="127.0.0.1",
        PROMETHEUS_MULTIPROC_DIR=str(multiproc),
        PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
        PYTHONPATH=str(ROOT),
    )
    log = tmp_path_factory.mktemp("web") / "gunicorn.log"
    out = open(log, "w")
    proc = subprocess.Popen(
        ["bash", "-c", "exec " + procfile_line("web")],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        assert proc.poll() is None, f"the web process exited:\n{log.read_text()[-3000:]}"
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200 and len(_children(proc.pid)) == 2:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"the web process did not start:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)
    yield {"url": url, "pid": proc.pid, "log": log}
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    out.close()


@pytest.fixture(scope="session")
def live_url(procfile_web: dict[str, Any]) -> str:
    return procfile_web["url"]


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    assert sync_playwright is not None and CHROMIUM is not None
    pw: Playwright = sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
    yield b
    b.close()
    pw.stop()


@pytest.fixture(scope="session")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("LEDGERFLOW_SCREENSHOTS")
    path = Path(target) if target else tmp_path_factory.mktemp("console-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="module")
def scenario() -> Scenario:
    """Built for each browser test module: another test file that runs between two of them in the same
    process may TRUNCATE the namespaces and credentials (tests/web/conftest.py ``clean``), and a session's
    scenario then has a token nobody knows."""
    return build()


def login(
    browser: Browser,
    url: str,
    token: str,
    viewport: dict[str, int] = WIDE,
    *,
    then: str = "",
    keep: bool = False,
    **kw: Any,
) -> BrowserContext:
    """A browser context logged in with ``token`` through the login form (landing on ``then``, a console
    path, when given); ``keep`` leaves the page open as ``ctx.pages[0]``."""
    ctx = browser.new_context(viewport=viewport, **kw)
    ctx.set_default_timeout(30_000)
    page = ctx.new_page()
    page.goto(url + "/console/login" + (f"?next={then}" if then else ""))
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    if not keep:
        page.close()
    return ctx


AXE_RUN = """async () => {
  const r = await axe.run(document, {resultTypes: ['violations']});
  return r.violations.filter(v => v.impact === 'serious' || v.impact === 'critical')
    .map(v => v.id + ' (' + v.impact + '): ' + v.nodes.slice(0, 3).map(n => n.target.join(' ')).join(' | '));
}"""


def axe_violations(page: Page) -> list[str]:
    """axe-core's serious and critical violations of the page as it is now (axe is evaluated through
    the DevTools protocol, so the page's CSP stays as it is)."""
    if not page.evaluate("() => typeof axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    return page.evaluate(AXE_RUN)


def overflow(page: Page) -> int:
    """How many CSS pixels the page is wider than its viewport (0: nothing sticks out)."""
    return page.evaluate("() => Math.max(0, document.documentElement.scrollWidth - window.innerWidth)")
