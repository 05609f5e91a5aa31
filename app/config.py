"""Typed settings read from the environment (Heroku style)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache

# Called before the settings are read while DATABASE_URL or REDIS_URL is unset: the `ledgerflow`
# command installs one that finds (or starts) the embedded development services under .data/.
_environment_hooks: list[Callable[[], object]] = []


def on_missing_environment(hook: Callable[[], object]) -> None:
    """Register ``hook`` to fill DATABASE_URL / REDIS_URL when they are unset (idempotent)."""
    if hook not in _environment_hooks:
        _environment_hooks.append(hook)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


def env_flag(name: str, default: bool) -> bool:
    raw = (os.environ.get(name) or "").strip().lower()
    if raw in ("1", "true", "on", "yes"):
        return True
    if raw in ("0", "false", "off", "no"):
        return False
    if raw:
        raise ValueError(f"{name}={raw!r}: expected on/off (1/0, true/false)")
    return default


@dataclass(frozen=True)
class Settings:
    database_url: str
    redis_url: str | None
    port: int = 5000
    # L-CLAIM-1: 4 slots per pool, 2 s short poll.
    slots_per_pool: int = 4
    poll_seconds: float = 2.0
    # L-CLAIM-4 table: lease 60 s renewed every 15 s; execution timeout default 10 min.
    lease_seconds: float = 60.0
    renew_seconds: float = 15.0
    execution_timeout_ms: int = 600_000
    # L-STATE-3: backoff from 30 s, a single delay capped at 15 min.
    backoff_base_seconds: float = 30.0
    backoff_cap_seconds: float = 900.0
    # L-PAUSE-5: drain every minute, bounded per pass.
    drain_interval_seconds: float = 60.0
    schedule_tick_seconds: float = 1.0
    # HMAC-SHA256 key of outbound TRIGGER / dispatch calls (X-Ledgerflow-Signature); unset = unsigned
    signing_secret: str | None = None  # X-SCHED: how often the scheduler looks for due schedules
    drain_batch: int = 1000
    # Each pool also reclaims its own queue's expired leases this often, so a job held by a killed
    # worker runs again within lease + this, not lease + the next drain + a backoff.
    reclaim_seconds: float = 5.0
    # The pool's own pass (settle + claim) commits without waiting for its WAL flush: a PostgreSQL
    # crash can lose the last passes, which recovers exactly like a worker killed before it settled
    # (docs/decisions.md, "Pool passes commit asynchronously"). Handlers' transactions always wait.
    pool_synchronous_commit: bool = False
    heartbeat_seconds: float = 10.0
    # Coalescing window of a wake hint flag (ms); the consumer clears it on receipt.
    hint_flag_ttl_ms: int = 5000
    # Longest an idle hint consumer blocks on its queue's doorbell (BLPOP) before fetching again (ms).
    # Hints wake it at once whatever this is; it bounds only shutdown time and the wait after a lost
    # doorbell token (actors/broker.py).
    hint_consumer_timeout_ms: int = 1000
    handler_modules: tuple[str, ...] = field(default_factory=tuple)
    redis_namespace: str = "ledgerflow"


def _normalize_db_url(url: str) -> str:
    # Heroku hands out postgres:// URLs; SQLAlchemy wants an explicit driver.
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def load_settings() -> Settings:
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        for hook in _environment_hooks:
            hook()
    database_url = os.environ.get("DATABASE_URL")
    if not database_url:
        raise RuntimeError(
            "DATABASE_URL is not set: export DATABASE_URL=postgresql://user@host:5432/db, or run the "
            "program as `ledgerflow env -- <command>` to use the embedded PostgreSQL of `make run`"
        )
    modules = tuple(m.strip() for m in os.environ.get("LEDGERFLOW_HANDLERS", "").split(",") if m.strip())
    return Settings(
        database_url=_normalize_db_url(database_url),
        redis_url=os.environ.get("REDIS_URL") or None,
        port=env_int("PORT", 5000),
        slots_per_pool=env_int("LEDGERFLOW_SLOTS", 4),
        poll_seconds=env_float("LEDGERFLOW_POLL_SECONDS", 2.0),
        lease_seconds=env_float("LEDGERFLOW_LEASE_SECONDS", 60.0),
        renew_seconds=env_float("LEDGERFLOW_RENEW_SECONDS", 15.0),
        execution_timeout_ms=env_int("LEDGERFLOW_EXECUTION_TIMEOUT_MS", 600_000),
        backoff_base_seconds=env_float("LEDGERFLOW_BACKOFF_BASE_SECONDS", 30.0),
        backoff_cap_seconds=env_float("LEDGERFLOW_BACKOFF_CAP_SECONDS", 900.0),
        drain_interval_seconds=env_float("LEDGERFLOW_DRAIN_INTERVAL_SECONDS", 60.0),
        schedule_tick_seconds=env_float("LEDGERFLOW_SCHEDULE_TICK_SECONDS", 1.0),
        signing_secret=os.environ.get("LEDGERFLOW_SIGNING_SECRET") or None,
        drain_batch=env_int("LEDGERFLOW_DRAIN_BATCH", 1000),
        reclaim_seconds=env_float("LEDGERFLOW_RECLAIM_SECONDS", 5.0),
        pool_synchronous_commit=env_flag("LEDGERFLOW_POOL_SYNCHRONOUS_COMMIT", False),
        heartbeat_seconds=env_float("LEDGERFLOW_HEARTBEAT_SECONDS", 10.0),
        hint_flag_ttl_ms=env_int("LEDGERFLOW_HINT_FLAG_TTL_MS", 5000),
        hint_consumer_timeout_ms=env_int("LEDGERFLOW_HINT_CONSUMER_TIMEOUT_MS", 1000),
        handler_modules=modules,
        redis_namespace=os.environ.get("LEDGERFLOW_REDIS_NAMESPACE", "ledgerflow"),
    )


MIN_SECRET_CHARS = 32
# The key that signs the operator console's session cookies and CSRF tokens (issue 28).
SECRET_KEY_ENV = "LEDGERFLOW_SECRET_KEY"


def production_problems() -> list[str]:
    """What makes this environment unfit to serve in production (``LEDGERFLOW_ENV=production``):
    the cursor signing key left at its built-in default (anyone could forge cursors), and no console
    session key (each web process would make its own: a session of one is refused by the others).
    Development (the default) needs no setting."""
    if not is_production():
        return []
    problems = []
    if len(os.environ.get("LEDGERFLOW_CURSOR_SECRET") or "") < MIN_SECRET_CHARS:
        problems.append(
            "LEDGERFLOW_CURSOR_SECRET is unset or shorter than 32 characters: in production the "
            "pagination cursors must be signed with your own random key (the built-in development "
            "key is public). Set one, e.g. "
            "LEDGERFLOW_CURSOR_SECRET=$(python -c 'import secrets; print(secrets.token_urlsafe(48))')"
        )
    if len(os.environ.get(SECRET_KEY_ENV) or "") < MIN_SECRET_CHARS:
        problems.append(
            f"{SECRET_KEY_ENV} is unset or shorter than 32 characters: every web process of a deployment "
            "must sign console sessions with the same key of your own. Set one, e.g. "
            f"{SECRET_KEY_ENV}=$(python -c 'import secrets; print(secrets.token_urlsafe(48))')"
        )
    return problems


def is_production() -> bool:
    return os.environ.get("LEDGERFLOW_ENV", "development").strip().lower() == "production"


def refuse_unsafe_production() -> None:
    """Raise ``RuntimeError`` with every ``production_problems()`` (the web process calls it at start)."""
    problems = production_problems()
    if problems:
        raise RuntimeError("refusing to start (LEDGERFLOW_ENV=production):\n- " + "\n- ".join(problems))


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
