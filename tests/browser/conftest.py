"""Browser tests of the console in headless Chromium (the Debian ``chromium`` package, driven by
Playwright with ``executable_path``; Playwright never downloads a browser here).

Without Chromium (or the playwright package) every test of this folder is skipped with the command
that installs it; ``.ci/run`` installs it when missing. One live server (werkzeug in a thread) and one
browser serve the whole module. ``LEDGERFLOW_SCREENSHOTS=docs/console`` saves the screenshots there
(the committed ones); otherwise they go to a temporary folder."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

INSTALL = "apt-get update && apt-get install -y chromium (as root; .ci/run does it)"
# CHROMIUM=/path/to/chromium picks the browser, and only it (CHROMIUM=/nonexistent shows the skip).
_CANDIDATES = (
    (os.environ["CHROMIUM"],)
    if os.environ.get("CHROMIUM")
    else (shutil.which("chromium"), "/usr/bin/chromium")
)
CHROMIUM = next((p for p in _CANDIDATES if p and Path(p).exists()), None)

try:
    from playwright.sync_api import Browser, Playwright, sync_playwright
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


@pytest.fixture(scope="module")
def live_url() -> Iterator[str]:
    from werkzeug.serving import make_server

    from web import create_app

    port = int(os.environ.get("LEDGERFLOW_BROWSER_TEST_PORT", "0"))
    server = make_server("127.0.0.1", port, create_app(), threaded=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert sync_playwright is not None and CHROMIUM is not None
    pw: Playwright = sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-dev-shm-usage"])
    yield b
    b.close()
    pw.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = os.environ.get("LEDGERFLOW_SCREENSHOTS")
    path = Path(target) if target else tmp_path_factory.mktemp("console-shots")
    path.mkdir(parents=True, exist_ok=True)
    return path
