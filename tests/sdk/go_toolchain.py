"""Go for the Go SDK's tests (sdk/go): find Debian's ``go`` and run it with every cache and download
inside a temporary directory, no module proxy (the SDK uses the standard library only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SDK = ROOT / "sdk" / "go"
CANDIDATES = ("/usr/lib/go/bin/go", "/usr/lib/go-1.19/bin/go")
NOT_INSTALLED = (
    "Go is not installed (no `go` on PATH, nor /usr/lib/go/bin/go): the Go SDK's tests need it; "
    "install Debian's golang-go (`apt-get install golang-go`, as .ci/run does)"
)


def find_go() -> str | None:
    """The ``go`` command: on PATH, else Debian's install directories; None when there is none."""
    found = shutil.which("go")
    if found:
        return found
    return next((c for c in CANDIDATES if os.access(c, os.X_OK)), None)


def require_go() -> str:
    """The ``go`` command, or the test fails with one line saying Go is missing (never a skip)."""
    found = find_go()
    if found is None:
        pytest.fail(NOT_INSTALLED, pytrace=False)
    return found


def gofmt_of(go: str) -> str:
    """The ``gofmt`` installed beside ``go``."""
    return shutil.which("gofmt") or str(Path(os.path.realpath(go)).parent / "gofmt")


# the build cache outlives a test session (go's cache is safe for concurrent processes), in the temp
# directory: a second run compiles nothing again
CACHE = Path(tempfile.gettempdir()) / f"ledgerflow-go-cache-{os.getuid()}"


def go_env(scratch: Path) -> dict[str, str]:
    """The environment of a ``go`` command: the build cache in the temp directory, GOPATH under
    ``scratch``, no downloads."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GO")}
    return {
        **env,
        "GOCACHE": str(CACHE),
        "GOPATH": str(scratch / "gopath"),
        "GOMODCACHE": str(scratch / "gopath" / "mod"),
        "GOPROXY": "off",
        "GOFLAGS": "-mod=readonly",
        "GOTOOLCHAIN": "local",
        "GOTELEMETRY": "off",
        "CGO_ENABLED": "0",
        "HOME": env.get("HOME") or str(scratch),
    }


def run_go(go: str, scratch: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [go, *args], cwd=SDK, env=go_env(scratch), capture_output=True, text=True, timeout=timeout
    )
