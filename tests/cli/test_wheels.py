"""Install from wheels (issue 45): `python -m build` makes both distributions; the server's wheel in a
clean venv (no checkout on the path, the working folder elsewhere) runs `ledgerflow dev` — which creates
the database DATABASE_URL names — and the first workflow; the SDK's wheel in another venv runs a task
worker. One build per session; the venvs take a minute or two on a busy machine (no timed assertion)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[2]
# what the server's distribution is built from (a copy: a build leaves nothing in the repository)
SOURCES = ("pyproject.toml", "Procfile", "gunicorn.conf.py", "alembic.ini", "migrations", "app", "actors")
SOURCES += ("web", "schemas", "ledgerflow", "sdk")
EXAMPLES = ROOT / "docs" / "examples" / "own_project"


def _env(**extra: str) -> dict[str, str]:
    """No PYTHONPATH and no checkout on the path; pip's own cache (wheels already fetched are reused)."""
    drop = ("PYTHONPATH", "VIRTUAL_ENV", "DATABASE_URL", "REDIS_URL", "LEDGERFLOW_TOKEN", "LEDGERFLOW_URL")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def _run(args: list[str], cwd: Path, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(args, cwd=cwd, env=_env(**env), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{args}:\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="session")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """Both distributions, built once per session with `python -m build` from a copy of the sources."""
    tmp = tmp_path_factory.mktemp("wheels")
    src, dist = tmp / "src", tmp / "dist"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    for project in (src, src / "sdk"):
        _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(project)], cwd=tmp)
    [server] = dist.glob("ledgerflow-*.whl")
    [sdk] = dist.glob("ledgerflow_sdk-*.whl")
    return {"server": server, "sdk": sdk}


def _venv(where: Path, wheel: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    # --no-compile: no bytecode for ~40 libraries up front (a third of the install's CPU)
    _run(
        [str(where / "bin" / "python"), "-m", "pip", "install", "-q", "--no-compile", str(wheel)],
        cwd=where.parent,
    )
    return where / "bin"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_both_wheels_install_alone_run_dev_the_first_workflow_and_a_worker(wheels, engine, tmp_path):
    work = tmp_path / "elsewhere"  # the working folder: no checkout here
    work.mkdir()
    with ThreadPoolExecutor(2) as pool:  # the two installs overlap (pip waits on files and processes)
        server = pool.submit(_venv, tmp_path / "server-venv", wheels["server"])
        sdk = pool.submit(_venv, tmp_path / "sdk-venv", wheels["sdk"])
        server_bin, sdk_bin = server.result(), sdk.result()
    listed = _run([str(sdk_bin / "python"), "-m", "pip", "list", "--format=freeze"], cwd=work).stdout.lower()
    assert "ledgerflow-sdk==" in listed and "sqlalchemy" not in listed and "flask" not in listed

    name = (
        "lf_wheel_" + uuid.uuid4().hex[:8]
    )  # a database that does not exist yet: `ledgerflow dev` creates it
    base = engine.url.set(drivername="postgresql", database=name).render_as_string(hide_password=False)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    services = {
        "DATABASE_URL": base,
        "REDIS_URL": os.environ["REDIS_URL"],
        "LEDGERFLOW_REDIS_NAMESPACE": f"wheel-{uuid.uuid4().hex[:8]}",
        "LOG_FORMAT": "json",
    }
    log = open(tmp_path / "dev.log", "w")  # closed below
    dev = subprocess.Popen(
        [str(server_bin / "ledgerflow"), "dev", "--port", str(port)],
        cwd=work,
        env=_env(**services),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert dev.poll() is None and time.monotonic() < deadline, (tmp_path / "dev.log").read_text()
            time.sleep(0.5)
        dev_log = (tmp_path / "dev.log").read_text()
        assert "did not exist: created it" in dev_log and "database migrated" in dev_log

        token = _run(
            [str(server_bin / "ledgerflow"), "credentials", "create", "--namespace", "demo", "--name", "me",
             "--workflow-access", "--workflow-run-access", "--task-worker", "--token-only"],
            cwd=work,
            **services,
        ).stdout.strip()  # fmt: skip
        api = {"LEDGERFLOW_URL": url, "LEDGERFLOW_TOKEN": token}
        # the README's first workflow, run by the server's venv from a folder without a checkout
        shutil.copy2(ROOT / "examples" / "first_workflow.py", work / "first_workflow.py")
        first = _run([str(server_bin / "python"), "-I", "first_workflow.py"], cwd=work, timeout=300, **api)
        assert "SUCCEEDED: {" in first.stdout and "Hello, Ada!" in first.stdout

        # the SDK's venv: the documented worker and starter (docs/sdk.md) against that server
        worker_log = open(tmp_path / "worker.log", "w")  # closed below
        worker = subprocess.Popen(
            # -E -s, not -I: the example's modules import their sibling (invoice.py), from the script's folder
            [str(sdk_bin / "python"), "-E", "-s", str(EXAMPLES / "worker.py")],
            cwd=work,
            env=_env(**api),
            stdout=worker_log,
            stderr=subprocess.STDOUT,
        )
        try:
            started = _run(
                [str(sdk_bin / "python"), "-E", "-s", str(EXAMPLES / "start.py"), "invoice"],
                cwd=work,
                timeout=300,
                **api,
            )
            assert started.stdout.startswith("SUCCEEDED: ")
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(60) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait(10)
            worker_log.close()
        assert "invoices.send: task" in (tmp_path / "worker.log").read_text()
    finally:
        if dev.poll() is None:
            os.killpg(dev.pid, signal.SIGTERM)
            try:
                dev.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(dev.pid, signal.SIGKILL)
                dev.wait(10)
        log.close()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    # an installed server keeps its .data/ in the working folder, never inside site-packages
    assert (work / ".data" / "prometheus-multiproc").is_dir()
    assert not list((tmp_path / "server-venv").glob("lib/*/site-packages/.data"))
