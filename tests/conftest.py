"""Test session: a fresh PostgreSQL database (migrated with Alembic) and a private Redis namespace.

DATABASE_URL / REDIS_URL name the *servers* (the machine's, or the embedded ones that
`make test` starts); this session creates its own database on that server and drops it at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import settings
from sqlalchemy import create_engine, make_url, text

ROOT = Path(__file__).resolve().parent.parent
# Property tests assert what they check, never how long an example took: Hypothesis's default deadline
# (200 ms an example) failed a pure test on a busy machine (312 ms once, 1.2 ms when replayed).
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
# every statement the domain sends is named (tests/sql_names.py: fails the test that sent one that is not)
pytest_plugins = ["tests.sql_names"]
_SESSION = uuid.uuid4().hex[:10]
TEST_DB = f"lf_test_{_SESSION}"
LEDGER_TABLES = (
    "workflow_job_effects, workflow_job_executions, workflow_jobs, workflow_worker_nodes, "
    "workflow_attempt_minutes, ledger_run_leases"
)


def _server_url() -> str:
    from app.settings import normalize_database_url

    url = os.environ.get("DATABASE_URL")
    if not url:
        raise pytest.UsageError("DATABASE_URL is not set: run the tests with `make test`")
    return normalize_database_url(url)


UNIT_DIR = ROOT / "tests" / "unit"


def pytest_configure(config: pytest.Config) -> None:
    os.environ["LEDGERFLOW_REDIS_NAMESPACE"] = f"lf-test-{_SESSION}"
    os.environ.setdefault("PYTHONPATH", str(ROOT))
    # the built-in handlers, registered once for the session as a worker process does: a handler module
    # registers at its first import, so a test that saved and restored the registry around that import
    # would leave every later test without it (``tests.ledger_helpers.restore_handlers``)
    from actors.handler_modules import BUILTIN_HANDLER_MODULES
    from app.ledger import handlers

    handlers.load_modules(BUILTIN_HANDLER_MODULES)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Create the test database only when a collected test needs one: ``tests/unit`` (pure logic,
    no I/O) runs without PostgreSQL."""
    if any(not Path(str(item.fspath)).is_relative_to(UNIT_DIR) for item in items):
        _create_test_database()


def _create_test_database() -> None:
    server = make_url(_server_url())
    admin = create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{TEST_DB}"'))
    admin.dispose()
    test_url = server.set(database=TEST_DB).render_as_string(hide_password=False)
    os.environ["LEDGERFLOW_SERVER_DATABASE_URL"] = _server_url()
    os.environ["DATABASE_URL"] = test_url
    from app.migrate import upgrade
    from app.settings import get_settings

    get_settings.cache_clear()
    upgrade(test_url)


def pytest_unconfigure(config: pytest.Config) -> None:
    server = os.environ.get("LEDGERFLOW_SERVER_DATABASE_URL")
    if not server:
        return
    from app.db import get_engine

    get_engine().dispose()
    admin = create_engine(make_url(server).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{TEST_DB}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def engine():
    from app.db import get_engine

    return get_engine()


@pytest.fixture
def db(engine) -> Iterator:
    """A clean ledger for each test."""
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {LEDGER_TABLES} RESTART IDENTITY CASCADE"))
    yield engine


@pytest.fixture
def settings():
    """Settings with the spec's defaults; tests shorten times with dataclasses.replace."""
    from app.settings import get_settings

    return get_settings()


@pytest.fixture
def fast_settings(settings):
    return replace(settings, poll_seconds=0.2, renew_seconds=0.5, lease_seconds=2.0)


@pytest.fixture
def redis_client():
    import redis

    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("REDIS_URL is not set")
    client = redis.Redis.from_url(url)
    yield client
    for key in client.scan_iter(f"lf-test-{_SESSION}*"):
        client.delete(key)


class WorkerProcess:
    def __init__(self, proc: subprocess.Popen, log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 20) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def spawn_worker(tmp_path) -> Iterator:
    """Start real `ledgerflow worker` processes against the test database."""
    started: list[WorkerProcess] = []

    def _spawn(
        pool: str = "advance", env: dict[str, str] | None = None, wait_ready: bool = True
    ) -> WorkerProcess:
        full_env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LEDGERFLOW_HANDLERS": "tests.workers.handlers",
            "LOG_LEVEL": "INFO",
            **(env or {}),
        }
        log_path = tmp_path / f"worker-{len(started)}.log"
        out = open(log_path, "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", "ledgerflow.cli", "worker", "--pool", pool],
            env=full_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        wp = WorkerProcess(proc, log_path)
        started.append(wp)
        if wait_ready:
            deadline = time.monotonic() + 30
            while "ready" not in wp.log():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker did not start:\n{wp.log()}")
                time.sleep(0.05)
        return wp

    yield _spawn
    for wp in started:
        wp.stop()
