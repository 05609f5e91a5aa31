"""Every setting of Ledgerflow, declared once: its environment variable, default, what values are
allowed and one line of help. No other module of the product reads the environment
(tests/unit/test_settings.py scans the source for it), and docs/reference.md's settings tables are
printed from these declarations by ``python -m app.settings --markdown`` (a test keeps them equal).

Reading a setting:

- ``SLOTS.get()``: its value now. Each call looks the variable up again (a dictionary look-up; the
  text is parsed again only when it changed), so a test that changes a variable sees it at once.
  Unset and empty are the same: the default.
- ``get_settings()``: the snapshot a worker or scheduler process takes once at start
  (``get_settings.cache_clear()`` takes it again).
- ``validate()``: every process checks every variable that is set when it starts (the ``ledgerflow``
  command before any subcommand, gunicorn before it binds: ``exit_on_bad_settings()``) and refuses a
  bad value with one line naming the variable and what is allowed, e.g.
  ``Error: LEDGERFLOW_SLOTS: must be an integer from 1 to 64``.

Adding a setting: one ``declare`` line in its section below, ``.get()`` where it is used, then
``python -m app.settings --markdown`` pasted into docs/reference.md.

A core module: it imports nothing of the product (every layer may import it) and only the standard
library (cheap at every process's start). The SDK (``ledgerflow.client``, packed alone without any
server module) reads its own two variables, ``LEDGERFLOW_URL`` and ``LEDGERFLOW_TOKEN``."""

from __future__ import annotations

import ipaddress
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
_environ = os.environ


class SettingError(ValueError):
    """A setting's value is not allowed. ``str()`` is one line: ``NAME: must be <what is allowed>``."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


# ---------------------------------------------------------------------------------------------- values
class Parser(Protocol[T_co]):
    """Turns a variable's text into its value; raises ``ValueError`` when the text is not ``allowed``."""

    @property
    def allowed(self) -> str: ...

    def __call__(self, raw: str, /) -> T_co: ...


class Parse(Generic[T]):
    """A ``Parser`` from a function and the words for what it allows."""

    __slots__ = ("func", "allowed")

    def __init__(self, func: Callable[[str], T], allowed: str) -> None:
        self.func = func
        self.allowed = allowed  # what "must be" says: "an integer from 1 to 64"

    def __call__(self, raw: str, /) -> T:
        return self.func(raw)


def integer(lo: int, hi: int) -> Parse[int]:
    def parse(raw: str) -> int:
        value = int(raw.strip())
        if not lo <= value <= hi:
            raise ValueError
        return value

    return Parse(parse, f"an integer from {lo} to {hi}")


def number(lo: float, hi: float) -> Parse[float]:
    def parse(raw: str) -> float:
        value = float(raw.strip())
        if not (math.isfinite(value) and lo <= value <= hi):
            raise ValueError
        return value

    return Parse(parse, f"a number from {lo:g} to {hi:g}")


_TRUE, _FALSE = frozenset({"1", "true", "on", "yes"}), frozenset({"0", "false", "off", "no"})


def _flag(raw: str) -> bool:
    word = raw.strip().lower()
    if word not in _TRUE | _FALSE:
        raise ValueError
    return word in _TRUE


FLAG = Parse(_flag, "on or off (also 1/0, true/false, yes/no)")
TEXT = Parse(str, "any text")


def one_of(*choices: str) -> Parse[str]:
    """A word out of ``choices``, in any case (given back in the case of ``choices``)."""
    by_case = {c.lower(): c for c in choices}

    def parse(raw: str) -> str:
        return by_case[raw.strip().lower()]  # KeyError is a LookupError: caught as "not allowed"

    return Parse(parse, "one of " + ", ".join(choices))


# Patterns are compiled at their first use (``re`` keeps them), not at every process's import.
def matching(pattern: str, allowed: str) -> Parse[str]:
    def parse(raw: str) -> str:
        if not re.fullmatch(pattern, raw):
            raise ValueError
        return raw

    return Parse(parse, allowed)


def url(*schemes: str) -> Parse[str]:
    prefixes = tuple(f"{s}://" for s in schemes)

    def parse(raw: str) -> str:
        if not raw.strip().startswith(prefixes):
            raise ValueError
        return raw.strip()

    names = [f"{s}://" for s in schemes]
    listed = ", ".join(names[:-1]) + " or " + names[-1] if names[1:] else names[0]
    return Parse(parse, f"{'an' if schemes[0].startswith('http') else 'a'} {listed} URL")


def normalize_database_url(url: str) -> str:
    """Heroku hands out ``postgres://`` URLs; SQLAlchemy wants an explicit driver (psycopg 3).

    libpq's multi-host form, which names a primary and its standbys (docs/operations.md, "High
    availability"), ``postgresql://user@h1:5432,h2:5433/db?target_session_attrs=read-write``, becomes
    SQLAlchemy's ``postgresql+psycopg://user@/db?host=h1:5432&host=h2:5433&target_session_attrs=...``
    (a host without a port gets 5432, as in libpq); psycopg then tries the hosts in order."""
    for prefix in ("postgres://", "postgresql://", "postgresql+psycopg://"):
        if url.startswith(prefix):
            return _multi_host_as_query("postgresql+psycopg://" + url[len(prefix) :])
    return url


def _multi_host_as_query(url: str) -> str:
    scheme, _, rest = url.partition("://")
    split = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, tail = rest[:split], rest[split:]
    user, at, hosts = netloc.rpartition("@")
    if "," not in hosts:
        return url
    path, question, query = tail.partition("?")
    named = [h if re.search(r"(:\d+)$", h) else f"{h}:5432" for h in hosts.split(",") if h]
    params = "&".join([*(f"host={h}" for h in named), *([query] if query else [])])
    return f"{scheme}://{user}{at}{path or '/'}?{params}"


_POSTGRES_URL = url("postgres", "postgresql", "postgresql+psycopg")
_MODULE = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*"
_HOST_NAME = (
    r"(?=.{1,253}$)[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?"
)


def _host_name(text: str) -> bool:
    """A DNS name (not something that only looks like an IPv4 address gone wrong, e.g. 999.1.1.1)."""
    return bool(re.fullmatch(_HOST_NAME, text.lower())) and not text.replace(".", "").isdigit()


def _host(raw: str) -> str:
    try:
        ipaddress.ip_address(raw.strip())
    except ValueError:
        if not _host_name(raw.strip()):
            raise
    return raw.strip()


def _modules(raw: str) -> tuple[str, ...]:
    names = tuple(m.strip() for m in raw.split(",") if m.strip())
    if not all(re.fullmatch(_MODULE, m) for m in names):
        raise ValueError
    return names


def _networks_and_hosts(raw: str) -> str:
    """Checked here; ``app.ledger.destinations.parse_policy`` builds the policy from the same text."""
    for item in filter(None, (p.strip() for p in raw.split(","))):
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            if not _host_name(item):
                raise
    return raw


MAX_RETENTION_DAYS = 36500.0


def _days_by_namespace(raw: str, least: float = 0.0) -> tuple[tuple[str, float], ...]:
    out: dict[str, float] = {}
    for item in filter(None, (p.strip() for p in raw.split(","))):
        name, sep, days = item.partition("=")
        value = float(days)
        at_least = value >= least if least > 0 else value > 0  # ``least`` 0: any positive number of days
        if not sep or not name.strip() or not (at_least and value <= MAX_RETENTION_DAYS):
            raise ValueError
        out[name.strip()] = value
    return tuple(out.items())


# A finished workflow is kept at least a day: longer than a start's Idempotency-Key (24 h), so a resent
# start always finds the workflow its key created (docs/reference.md, "Retention of finished workflows").
MIN_WORKFLOW_RETENTION_DAYS = 1.0


def _workflow_days_by_namespace(raw: str) -> tuple[tuple[str, float], ...]:
    return _days_by_namespace(raw, MIN_WORKFLOW_RETENTION_DAYS)


# The grammar of the ``limits`` library's parse_many (importing it costs ~0.1 s at every start), with
# whole words and a count of at least 1; tests/unit/test_settings.py checks it against the library.
_RATE = r"(?i)\s*[1-9][0-9]*\s*(/|\s*per\s+)\s*([0-9]+\s*)?(second|minute|hour|day|month|year)s?\s*"


def _rate_limits(raw: str) -> str | None:
    if raw.strip().lower() == "off":
        return None
    if not all(re.fullmatch(_RATE, part) for part in re.split(r"[,;|]", raw)):
        raise ValueError
    return raw.strip()


def _exporters(raw: str) -> frozenset[str]:
    names = frozenset(e.strip().lower() for e in raw.split(",") if e.strip())
    if not names <= {"otlp", "console", "none"}:
        raise ValueError
    return names


# -------------------------------------------------------------------------------------------- settings
class Setting(Generic[T]):
    """One environment variable: ``get()`` answers its value now (the default when unset or empty)."""

    __slots__ = ("name", "default", "parser", "help", "section", "shown_default", "_last")

    def __init__(
        self,
        name: str,
        default: T,
        parser: Parser[T],
        help: str,
        section: str,
        shown_default: str | None = None,
    ) -> None:
        self.name = name
        self.default = default
        self.parser = parser
        self.help = help
        self.section = section
        self.shown_default = shown_default  # how docs/reference.md shows the default, when not str()
        self._last: tuple[str, T] | None = None  # the last text read and its value

    def get(self) -> T:
        raw = _environ.get(self.name)
        if not raw:
            return self.default
        last = self._last
        if last is not None and last[0] == raw:
            return last[1]
        value = self.parse(raw)
        self._last = (raw, value)
        return value

    def parse(self, raw: str) -> T:
        """The value of ``raw``, or ``SettingError``: one line naming the variable and what is allowed."""
        try:
            return self.parser(raw)
        except (ValueError, LookupError, ArithmeticError):
            raise SettingError(self.name, f"must be {self.parser.allowed}") from None

    def raw(self) -> str | None:
        """The variable's text (None when unset or empty), not parsed: for messages."""
        return _environ.get(self.name) or None

    def is_set(self) -> bool:
        return bool(_environ.get(self.name))

    def provide(self, make: Callable[[], str]) -> None:
        """When unset, set it to ``make()`` for this process and the processes it starts (a key that every
        worker of a server must share)."""
        if not self.is_set():
            _environ[self.name] = make()

    def __repr__(self) -> str:
        return f"<Setting {self.name}>"


SETTINGS: dict[str, Setting[Any]] = {}  # every declaration by variable name, in the order of this file
SECTIONS: dict[str, str] = {}  # section title -> what its settings are about


class Section:
    """The settings of one part of the product (one table in docs/reference.md)."""

    def __init__(self, title: str, about: str) -> None:
        self.title = title
        SECTIONS[title] = about

    def declare(
        self, name: str, default: T, parser: Parser[T], help: str, *, shown: str | None = None
    ) -> Setting[T]:
        if name in SETTINGS:
            raise ValueError(f"{name} is declared twice")
        setting = Setting(name, default, parser, help, self.title, shown)
        SETTINGS[name] = setting
        return setting


# One line per setting: name, default, allowed values, help (and how the docs show the default).
# fmt: off
_services = Section("Services", "where the processes find PostgreSQL and Redis, and where the web server listens")
DATABASE_URL = _services.declare("DATABASE_URL", None, _POSTGRES_URL, "PostgreSQL of the ledger and the engine", shown="embedded PostgreSQL under `.data/` (`ledgerflow` commands)")
REDIS_URL = _services.declare("REDIS_URL", None, url("redis", "rediss", "unix"), "Redis for wake hints and rate limits; without it processes poll", shown="embedded Redis (with the embedded PostgreSQL)")
PORT = _services.declare("PORT", 5000, integer(1, 65535), "the web server's port")
BIND_HOST = _services.declare("LEDGERFLOW_BIND_HOST", "0.0.0.0", Parse(_host, "an IP address or host name"), "the web server's interface", shown="0.0.0.0 (Procfile), 127.0.0.1 (`make run`)")
DATA_DIR = _services.declare("LEDGERFLOW_DATA_DIR", None, TEXT, "where the embedded PostgreSQL and Redis keep their data", shown="`.data`")
REDIS_NAMESPACE = _services.declare("LEDGERFLOW_REDIS_NAMESPACE", "ledgerflow", matching(r"[\w.:-]{1,64}", "1 to 64 letters, digits or _ . : -"), "prefix of the Redis keys")
ENV = _services.declare("LEDGERFLOW_ENV", "development", one_of("development", "production"), "`production`: the web process refuses to start without its own LEDGERFLOW_CURSOR_SECRET and LEDGERFLOW_SECRET_KEY")
DB_TRANSACTION_POOLING = _services.declare("LEDGERFLOW_DB_TRANSACTION_POOLING", False, FLAG, "on: DATABASE_URL goes through a pooler in transaction mode (PgBouncer): session settings per transaction, prepared statements off, LISTEN only through LEDGERFLOW_LISTEN_DATABASE_URL (docs/operations.md, \"PgBouncer\")")
PREPARED_STATEMENTS = _services.declare("LEDGERFLOW_PREPARED_STATEMENTS", None, FLAG, "off: psycopg never prepares a statement (`prepare_threshold=None`), the pool's pass included; PgBouncer before 1.21 needs it off", shown="on (off with transaction pooling)")
LISTEN_DATABASE_URL = _services.declare("LEDGERFLOW_LISTEN_DATABASE_URL", None, _POSTGRES_URL, "a direct PostgreSQL URL for the web process's LISTEN connection (long-poll wake-ups and credential changes; behind a transaction pooler)", shown="DATABASE_URL (none with transaction pooling)")
DB_CONNECT_TIMEOUT_SECONDS = _services.declare("LEDGERFLOW_DB_CONNECT_TIMEOUT_SECONDS", 5, integer(2, 300), "how long a new database connection waits for each host of DATABASE_URL before it tries the next (libpq `connect_timeout`; one set in DATABASE_URL wins): bounds how long a request or a pool waits on a primary that vanished (docs/operations.md, \"High availability\")")
DB_RETRY_AFTER_SECONDS = _services.declare("LEDGERFLOW_DB_RETRY_AFTER_SECONDS", 5, integer(1, 300), "`Retry-After` of the API's 503 `UNAVAILABLE` while no writable PostgreSQL is reachable (a restart, a failover); the SDKs wait it out, at most 5 s, and resend with the same Idempotency-Key")

_ledger = Section("Ledger workers", "the `worker-advance` and `worker-outbound` pools and the `scheduler`")
HANDLERS = _ledger.declare("LEDGERFLOW_HANDLERS", (), Parse(_modules, "comma-separated Python module names"), "extra ledger handler modules a worker loads")
SLOTS = _ledger.declare("LEDGERFLOW_SLOTS", 4, integer(1, 64), "jobs one ledger worker process runs at once")
POLL_SECONDS = _ledger.declare("LEDGERFLOW_POLL_SECONDS", 2.0, number(0.01, 3600), "how often an idle pool looks for jobs without a wake hint")
LEASE_SECONDS = _ledger.declare("LEDGERFLOW_LEASE_SECONDS", 60.0, number(1, 3600), "a running job's lease (more than LEDGERFLOW_RENEW_SECONDS)")
RENEW_SECONDS = _ledger.declare("LEDGERFLOW_RENEW_SECONDS", 15.0, number(0.1, 3600), "how often a running job's lease is renewed")
EXECUTION_TIMEOUT_MS = _ledger.declare("LEDGERFLOW_EXECUTION_TIMEOUT_MS", 600_000, integer(1000, 86_400_000), "default time limit of one job attempt")
BACKOFF_BASE_SECONDS = _ledger.declare("LEDGERFLOW_BACKOFF_BASE_SECONDS", 30.0, number(0.01, 86400), "first retry delay of a failed job (then doubling)")
BACKOFF_CAP_SECONDS = _ledger.declare("LEDGERFLOW_BACKOFF_CAP_SECONDS", 900.0, number(0.01, 86400), "longest single retry delay")
DRAIN_INTERVAL_SECONDS = _ledger.declare("LEDGERFLOW_DRAIN_INTERVAL_SECONDS", 60.0, number(0.1, 86400), "how often the scheduler runs the drain (expired leases, rollups, retention)")
DRAIN_BATCH = _ledger.declare("LEDGERFLOW_DRAIN_BATCH", 1000, integer(1, 100_000), "jobs the drain handles per pass")
RECLAIM_SECONDS = _ledger.declare("LEDGERFLOW_RECLAIM_SECONDS", 5.0, number(0.1, 86400), "how often each pool reclaims its own queue's expired leases")
POOL_SYNCHRONOUS_COMMIT = _ledger.declare("LEDGERFLOW_POOL_SYNCHRONOUS_COMMIT", False, FLAG, "on: a pool's pass (settle + claim) waits for its WAL flush like every other transaction (docs/decisions/ledger-hot-path.md, \"Pool passes commit asynchronously\")")
HEARTBEAT_SECONDS = _ledger.declare("LEDGERFLOW_HEARTBEAT_SECONDS", 10.0, number(0.1, 3600), "worker registry heartbeat")
HINT_FLAG_TTL_MS = _ledger.declare("LEDGERFLOW_HINT_FLAG_TTL_MS", 5000, integer(1, 3_600_000), "coalescing window of a queue's wake hint")
HINT_CONSUMER_TIMEOUT_MS = _ledger.declare("LEDGERFLOW_HINT_CONSUMER_TIMEOUT_MS", 1000, integer(10, 60_000), "longest idle wait of a hint consumer (hints wake it at once; this bounds shutdown)")
SCHEDULE_TICK_SECONDS = _ledger.declare("LEDGERFLOW_SCHEDULE_TICK_SECONDS", 1.0, number(0.05, 3600), "how often the scheduler hands due schedules their `schedule_launch` jobs (docs/schedules.md)")
SHUTDOWN_GRACE_SECONDS = _ledger.declare("LEDGERFLOW_SHUTDOWN_GRACE_SECONDS", 20.0, number(0, 20), "after SIGTERM: how long running jobs (and web requests) may take to finish; then a worker hands back what still runs (due again at once, the attempt `canceled` with `WORKER_SHUTDOWN`, not counted against `max_attempts`); every process is out within 25 s")

_limits = Section("Workflow limits", "what one namespace may hold, and how task claims wait")
INSTANCE_LIMIT = _limits.declare("LEDGERFLOW_INSTANCE_LIMIT", 10_000, integer(0, 1_000_000_000), "unfinished workflows per namespace (409 `WORKFLOW_INSTANCE_LIMIT`)")
QUEUE_PENDING_LIMIT = _limits.declare("LEDGERFLOW_QUEUE_PENDING_LIMIT", 100_000, integer(0, 1_000_000_000), "pending tasks per queue before a start answers 429 `QUEUE_FULL`")
APPLICATION_WORK_LIMIT = _limits.declare("LEDGERFLOW_APPLICATION_WORK_LIMIT", 250_000, integer(0, 1_000_000_000), "unfinished workflows + open tasks per namespace before 429 `APPLICATION_FULL`")
QUOTA_RETRY_AFTER_SECONDS = _limits.declare("LEDGERFLOW_QUOTA_RETRY_AFTER_SECONDS", 30, integer(1, 3600), "`Retry-After` of both 429s")
TASK_LEASE_SECONDS = _limits.declare("LEDGERFLOW_TASK_LEASE_SECONDS", 60.0, number(1, 86400), "a task claim's lease (heartbeats extend it)")
CLAIM_POLL_SECONDS = _limits.declare("LEDGERFLOW_CLAIM_POLL_SECONDS", 5.0, number(0.1, 60), "how often a waiting task claim looks again without a wake-up (a new PENDING task wakes it at once)")
SIGNAL_LIMIT = _limits.declare("LEDGERFLOW_SIGNAL_LIMIT", 1024, integer(1, 1_000_000), "signals one workflow may receive over its life")
WORKFLOW_BATCH_MAX = _limits.declare("LEDGERFLOW_WORKFLOW_BATCH_MAX", 500, integer(1, 5000), "workflows one batch action (cancel, pause, resume, rerun) acts on per request; a filter matching more acts on the newest this many")

_retention = Section("Retention", "what the drain deletes, and after how long")
RETENTION_DAYS = _retention.declare("LEDGERFLOW_RETENTION_DAYS", 7.0, number(0.01, MAX_RETENTION_DAYS), "days finished jobs (with their receipts and settled signals) are kept")
DEAD_LETTER_RETENTION_DAYS = _retention.declare("LEDGERFLOW_DEAD_LETTER_RETENTION_DAYS", 30.0, number(0.01, MAX_RETENTION_DAYS), "days dead letters are kept")
AUDIT_RETENTION_DAYS = _retention.declare("LEDGERFLOW_AUDIT_RETENTION_DAYS", 400.0, number(0.01, MAX_RETENTION_DAYS), "days the operation audit is kept")
RETENTION_BY_NAMESPACE = _retention.declare("LEDGERFLOW_RETENTION_BY_NAMESPACE", (), Parse(_days_by_namespace, f"namespace_id=days,... with 0 < days <= {MAX_RETENTION_DAYS:g}"), "job retention of these namespaces instead of LEDGERFLOW_RETENTION_DAYS")
WORKFLOW_RETENTION_DAYS = _retention.declare("LEDGERFLOW_WORKFLOW_RETENTION_DAYS", 30.0, number(MIN_WORKFLOW_RETENTION_DAYS, MAX_RETENTION_DAYS), "days a finished workflow (its instance, steps, tasks, waits, signals and events) is kept after it ended, unless held")
WORKFLOW_RETENTION_BY_NAMESPACE = _retention.declare("LEDGERFLOW_WORKFLOW_RETENTION_BY_NAMESPACE", (), Parse(_workflow_days_by_namespace, f"namespace_id=days,... with {MIN_WORKFLOW_RETENTION_DAYS:g} <= days <= {MAX_RETENTION_DAYS:g}"), "workflow retention of these namespaces instead of LEDGERFLOW_WORKFLOW_RETENTION_DAYS")
RETENTION_BATCH = _retention.declare("LEDGERFLOW_RETENTION_BATCH", 5000, integer(1, 100_000), "rows per retention DELETE")
RETENTION_PAUSE = _retention.declare("LEDGERFLOW_RETENTION_PAUSE", 3.0, number(0, 100), "after each retention DELETE the drain waits this many times as long as that DELETE took before the next: a large removal then takes at most 1 / (1 + this) of a PostgreSQL core's time (3: a quarter), leaving the rest to claims and settles; 0 = no pause")

_outbound = Section("Outbound calls", "triggers, external dispatches and webhook deliveries")
SIGNING_SECRET = _outbound.declare("LEDGERFLOW_SIGNING_SECRET", None, TEXT, "HMAC key of TRIGGER / external dispatch calls (`X-Ledgerflow-Signature`)", shown="— (unsigned)")
OUTBOUND_ALLOW = _outbound.declare("LEDGERFLOW_OUTBOUND_ALLOW", "", Parse(_networks_and_hosts, "comma-separated CIDRs and host names"), "private destinations outbound HTTP may reach (on-premise receivers); nothing else opens loopback / private / metadata addresses")
WEBHOOK_DISABLE_AFTER = _outbound.declare("LEDGERFLOW_WEBHOOK_DISABLE_AFTER", 20, integer(1, 10_000), "consecutive failed delivery attempts that disable a subscription (with the reason)")
RULE_RATE_PER_MINUTE = _outbound.declare("LEDGERFLOW_RULE_RATE_PER_MINUTE", 300, integer(1, 1_000_000), "executions one automation rule may have per minute; past them the rule disables itself (with the reason)")

_web = Section("API and console", "the `web` process")
DEFAULT_RATE_LIMIT = "1000/second"
RATE_LIMIT = _web.declare("LEDGERFLOW_RATE_LIMIT", DEFAULT_RATE_LIMIT, Parse(_rate_limits, "off, or limits like 1000/second;30000/minute"), "per-credential request limits (`limits` notation); `off` disables them", shown=f"`{DEFAULT_RATE_LIMIT}`")
LONG_POLLS_PER_CREDENTIAL = _web.declare("LEDGERFLOW_LONG_POLLS_PER_CREDENTIAL", 8, integer(1, 1000), "task claims of one credential that may wait at once")
STATEMENT_TIMEOUT_MS = _web.declare("LEDGERFLOW_STATEMENT_TIMEOUT_MS", 30_000, integer(0, 86_400_000), "PostgreSQL `statement_timeout` of every session of the product (0 = none)")
HTTP_HEADER_TIMEOUT = _web.declare("LEDGERFLOW_HTTP_HEADER_TIMEOUT", 5, integer(1, 300), "seconds a client has to send a request's line and headers (gunicorn's `keepalive`: also the wait for the next request on a kept-alive connection)")
HTTP_IDLE_TIMEOUT = _web.declare("LEDGERFLOW_HTTP_IDLE_TIMEOUT", 15.0, number(0.5, 3600), "seconds a connection may make no progress while its body is read or its answer written, then it is closed (a body cut short answers 400); keep it above LEDGERFLOW_HTTP_HEADER_TIMEOUT")
DEVELOPMENT_CURSOR_SECRET = "ledgerflow-cursor-v1"  # public: refused in production (production_problems)
CURSOR_SECRET = _web.declare("LEDGERFLOW_CURSOR_SECRET", DEVELOPMENT_CURSOR_SECRET, TEXT, "key that signs list cursors; set one per deployment (32 characters or more)", shown="a public development key")
SECRET_KEY = _web.declare("LEDGERFLOW_SECRET_KEY", None, TEXT, "signs the console's session cookie and CSRF tokens; the same value for every `web` process of a deployment; production refuses to start without one of 32 characters or more", shown="— (`make run`: one kept in `.data/console-secret-key`; the Procfile's gunicorn master: one for its workers)")
TEST_TIME_SKIPPING = _web.declare("LEDGERFLOW_TEST_TIME_SKIPPING", None, TEXT, "set by the test kit (`ledgerflow.testing`) on the server it starts: `POST /v1/testing/time-skip` exists only there (docs/testing.md); a server started any other way refuses it and says so at start", shown="— (off)")

_observability = Section("Logs, metrics and traces", "every process")
LOG_LEVEL = _observability.declare("LOG_LEVEL", "INFO", one_of("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), "log level of the server processes")
LOG_FORMAT = _observability.declare("LOG_FORMAT", None, one_of("json", "console"), "one JSON object per line, or readable lines", shown="`json` when stderr is not a terminal, else `console`")
PROMETHEUS_MULTIPROC_DIR = _observability.declare("PROMETHEUS_MULTIPROC_DIR", None, TEXT, "shared directory of the processes' metrics on one host; empty it before starting them", shown="— (`ledgerflow dev` sets one under its data folder, `LEDGERFLOW_DATA_DIR`)")
METRICS = _observability.declare("LEDGERFLOW_METRICS", True, FLAG, "off turns the process-level instruments off")
METRICS_LEDGER_TTL = _observability.declare("LEDGERFLOW_METRICS_LEDGER_TTL", 5.0, number(0, 3600), "seconds the ledger part of `/metrics` is cached per process")
METRICS_PORT = _observability.declare("LEDGERFLOW_METRICS_PORT", None, integer(1, 65535), "workers and scheduler: serve this host's process metrics on this port (no auth)")
METRICS_ADDR = _observability.declare("LEDGERFLOW_METRICS_ADDR", "127.0.0.1", Parse(_host, "an IP address or host name"), "the interface of LEDGERFLOW_METRICS_PORT")
OTEL_EXPORTER_OTLP_ENDPOINT = _observability.declare("OTEL_EXPORTER_OTLP_ENDPOINT", None, url("http", "https"), "turns tracing on: the OTLP/HTTP collector", shown="— (tracing off)")
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT = _observability.declare("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None, url("http", "https"), "turns tracing on: the collector's URL for traces", shown="— (tracing off)")
OTEL_TRACES_EXPORTER = _observability.declare("OTEL_TRACES_EXPORTER", frozenset(), Parse(_exporters, "comma-separated otlp, console, none"), "`console` or `otlp` turns tracing on; `none` keeps it off", shown="otlp when an endpoint is set")
OTEL_SERVICE_NAME = _observability.declare("OTEL_SERVICE_NAME", None, TEXT, "the service name of the traces", shown="`ledgerflow-<process>`")
OTEL_SDK_DISABLED = _observability.declare("OTEL_SDK_DISABLED", False, FLAG, "on keeps tracing off whatever else is set")
OTEL_DB_SPANS = _observability.declare("LEDGERFLOW_OTEL_DB_SPANS", True, FLAG, "off drops the SQL statement spans (`app.sql` makes one per named statement it runs, `db <name>`; the statements sent are the same either way)")

# Relations between settings, checked with them: (setting, does it hold, what it must be).
RELATIONS: tuple[tuple[Setting[Any], Callable[[], bool], Callable[[], str]], ...] = (
    (RENEW_SECONDS, lambda: RENEW_SECONDS.get() < LEASE_SECONDS.get(), lambda: f"must be less than LEDGERFLOW_LEASE_SECONDS ({LEASE_SECONDS.get():g})"),
    (BACKOFF_BASE_SECONDS, lambda: BACKOFF_BASE_SECONDS.get() <= BACKOFF_CAP_SECONDS.get(), lambda: f"must be at most LEDGERFLOW_BACKOFF_CAP_SECONDS ({BACKOFF_CAP_SECONDS.get():g})"),
)
# fmt: on


# ------------------------------------------------------------------------------------- start-up checks
def problems() -> list[SettingError]:
    """Every set variable whose value is not allowed, in declaration order (unset ones are fine)."""
    found: list[SettingError] = []
    for setting in SETTINGS.values():
        try:
            setting.get()
        except SettingError as exc:
            found.append(exc)
    bad = {e.name for e in found}
    for setting, holds, must in RELATIONS:
        if setting.name not in bad and not holds():
            found.append(SettingError(setting.name, must()))
    return found


def validate() -> None:
    """Raise the first bad setting as ``SettingError``: one line, which names the others after it."""
    found = problems()
    if found:
        others = f" (also not allowed: {', '.join(e.name for e in found[1:])})" if found[1:] else ""
        raise SettingError(found[0].name, found[0].problem + others)


def exit_on_bad_settings() -> None:
    """For a start outside the ``ledgerflow`` command (gunicorn's master): the one line on stderr and
    exit status 2, no traceback."""
    try:
        validate()
    except SettingError as exc:
        print(f"Error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


# ------------------------------------------------------------------------------------- process snapshot
# Called before the settings are read while DATABASE_URL or REDIS_URL is unset: the `ledgerflow`
# command installs one that finds (or starts) the embedded development services under .data/.
_environment_hooks: list[Callable[[], object]] = []


def on_missing_environment(hook: Callable[[], object]) -> None:
    """Register ``hook`` to fill DATABASE_URL / REDIS_URL when they are unset (idempotent)."""
    if hook not in _environment_hooks:
        _environment_hooks.append(hook)


def _taken_from(setting: Setting[T]) -> T:
    """A field of ``Settings`` that ``load_settings()`` takes from ``setting`` (default: the same)."""
    return field(default=setting.default, metadata={"setting": setting})


@dataclass(frozen=True)
class Settings:
    """What a worker or scheduler process reads once at start (``get_settings()``); the defaults are
    the declarations' (a test builds one with the URLs only)."""

    database_url: str
    redis_url: str | None
    # L-CLAIM-1: 4 slots per pool, 2 s short poll.
    slots_per_pool: int = _taken_from(SLOTS)
    poll_seconds: float = _taken_from(POLL_SECONDS)
    # L-CLAIM-4 table: lease 60 s renewed every 15 s; execution timeout default 10 min.
    lease_seconds: float = _taken_from(LEASE_SECONDS)
    renew_seconds: float = _taken_from(RENEW_SECONDS)
    execution_timeout_ms: int = _taken_from(EXECUTION_TIMEOUT_MS)
    # L-STATE-3: backoff from 30 s, a single delay capped at 15 min.
    backoff_base_seconds: float = _taken_from(BACKOFF_BASE_SECONDS)
    backoff_cap_seconds: float = _taken_from(BACKOFF_CAP_SECONDS)
    # L-PAUSE-5: drain every minute, bounded per pass.
    drain_interval_seconds: float = _taken_from(DRAIN_INTERVAL_SECONDS)
    # X-SCHED: how often the scheduler looks for due schedules
    schedule_tick_seconds: float = _taken_from(SCHEDULE_TICK_SECONDS)
    # HMAC-SHA256 key of outbound TRIGGER / dispatch calls (X-Ledgerflow-Signature); unset = unsigned
    signing_secret: str | None = _taken_from(SIGNING_SECRET)
    drain_batch: int = _taken_from(DRAIN_BATCH)
    # Each pool also reclaims its own queue's expired leases this often, so a job held by a killed
    # worker runs again within lease + this, not lease + the next drain + a backoff.
    reclaim_seconds: float = _taken_from(RECLAIM_SECONDS)
    # The pool's own pass (settle + claim) commits without waiting for its WAL flush: a PostgreSQL
    # crash can lose the last passes, which recovers exactly like a worker killed before it settled
    # (docs/decisions/ledger-hot-path.md, "Pool passes commit asynchronously"). Handlers' transactions always wait.
    pool_synchronous_commit: bool = _taken_from(POOL_SYNCHRONOUS_COMMIT)
    heartbeat_seconds: float = _taken_from(HEARTBEAT_SECONDS)
    # Coalescing window of a wake hint flag (ms); the consumer clears it on receipt.
    hint_flag_ttl_ms: int = _taken_from(HINT_FLAG_TTL_MS)
    # Longest an idle hint consumer blocks on its queue's doorbell (BLPOP) before fetching again (ms).
    # Hints wake it at once whatever this is; it bounds only shutdown time and the wait after a lost
    # doorbell token (actors/broker.py).
    hint_consumer_timeout_ms: int = _taken_from(HINT_CONSUMER_TIMEOUT_MS)
    handler_modules: tuple[str, ...] = _taken_from(HANDLERS)
    redis_namespace: str = _taken_from(REDIS_NAMESPACE)
    # after SIGTERM: how long running handlers may finish before what still runs is handed back
    shutdown_grace_seconds: float = _taken_from(SHUTDOWN_GRACE_SECONDS)


def load_settings() -> Settings:
    if not (DATABASE_URL.is_set() and REDIS_URL.is_set()):
        for hook in _environment_hooks:
            hook()
    validate()
    database_url = DATABASE_URL.get()
    if database_url is None:
        raise SettingError(
            "DATABASE_URL",
            "is not set: export DATABASE_URL=postgresql://user@host:5432/db, or run the program as "
            "`ledgerflow env -- <command>` to use the embedded PostgreSQL of `make run`",
        )
    taken = {f.name: f.metadata["setting"].get() for f in fields(Settings) if "setting" in f.metadata}
    return Settings(database_url=normalize_database_url(database_url), redis_url=REDIS_URL.get(), **taken)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()


# ----------------------------------------------------------------------------------- production refusal
MIN_SECRET_CHARS = 32


def is_production() -> bool:
    return ENV.get() == "production"


def production_problems() -> list[str]:
    """What makes this environment unfit to serve in production (``LEDGERFLOW_ENV=production``): the
    cursor signing key left at its built-in default (anyone could forge cursors), and no console session
    key (each web process would make its own: a session of one is refused by the others). Development
    (the default) needs no setting."""
    if not is_production():
        return []
    problems = []
    if len(CURSOR_SECRET.raw() or "") < MIN_SECRET_CHARS:
        problems.append(
            "LEDGERFLOW_CURSOR_SECRET is unset or shorter than 32 characters: in production the "
            "pagination cursors must be signed with your own random key (the built-in development "
            "key is public). Set one, e.g. "
            "LEDGERFLOW_CURSOR_SECRET=$(python -c 'import secrets; print(secrets.token_urlsafe(48))')"
        )
    if len(SECRET_KEY.raw() or "") < MIN_SECRET_CHARS:
        problems.append(
            "LEDGERFLOW_SECRET_KEY is unset or shorter than 32 characters: every web process of a deployment "
            "must sign console sessions with the same key of your own. Set one, e.g. "
            "LEDGERFLOW_SECRET_KEY=$(python -c 'import secrets; print(secrets.token_urlsafe(48))')"
        )
    return problems


def refuse_unsafe_production() -> None:
    """Raise ``RuntimeError`` with every ``production_problems()`` (the web process calls it at start)."""
    problems = production_problems()
    if problems:
        raise RuntimeError("refusing to start (LEDGERFLOW_ENV=production):\n- " + "\n- ".join(problems))


# ---------------------------------------------------------------------------------------- the doc table
def shown_default(s: Setting[Any]) -> str:
    if s.shown_default is not None:
        return s.shown_default
    d = s.default
    if d is None or d == "" or d == () or d == frozenset():
        return "—"
    if isinstance(d, bool):
        return "on" if d else "off"
    if isinstance(d, float):
        return f"{d:g}"
    return str(d)


def markdown() -> Iterator[str]:
    """docs/reference.md's settings tables, one per section."""
    for title, about in SECTIONS.items():
        yield f"### {title}"
        yield f"{about[0].upper()}{about[1:]}."
        yield ""
        yield "| variable | default | allowed | meaning |"
        yield "|---|---|---|---|"
        for s in SETTINGS.values():
            if s.section == title:
                yield f"| `{s.name}` | {shown_default(s)} | {s.parser.allowed} | {s.help} |"
        yield ""


def main(argv: list[str]) -> int:
    if argv == ["--markdown"]:
        print("\n".join(markdown()).rstrip("\n"))
        return 0
    if argv == ["--check"]:
        exit_on_bad_settings()
        return 0
    print("usage: python -m app.settings --markdown | --check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
