"""History dropped, not deleted: the append-only history tables are range-partitioned by time (migration
0031_history_partitions) and the drain keeps their partitions (``docs/decisions/ledger.md``, "History
partitions the project manages itself").

- ``ensure``: partitions are created ahead, up to ``AHEAD`` past now, each with the indexes of its table
  (the partitioned parent has none: a unique index on it would have to include the partition key);
  a legacy DEFAULT partition left by the migration (an installation that had rows) is first validated
  (a scan under SHARE UPDATE EXCLUSIVE: writers go on) and turned into the range ``(MINVALUE, cutoff)``.
- ``drop_expired``: a partition whose whole range is older than its table's horizon is dropped, unless a
  row in it must stay (``History.keeps``: an attempt of a job that still exists; an event batch of a
  workflow that is unfinished or held). Such a partition stays and the row sweeps that already existed
  (``app.engine.retention.prune_events``) go on deleting what may go in it, row by row.

Every DDL runs under ``LOCK_TIMEOUT`` in a savepoint: when a long transaction holds the table, the step is
skipped and tried again at the next drain, instead of queueing every writer of the table behind it.
All partition bounds are UTC period boundaries; partitions are named ``<table>_pYYYYMMDD`` (their lower
bound) and ``<table>_legacy`` (the rows from before the migration)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from app.sql import Query, query, run, template

log = logging.getLogger(__name__)

# partitions are created until this far past now (the drain runs every minute: a week of margin)
AHEAD = timedelta(days=7)
# how long a partition DDL waits for its table's lock before it gives up until the next drain
LOCK_TIMEOUT = "200ms"
# at most this many partitions dropped per table and drain run
DROPS_PER_RUN = 4
PERIODS = ("day", "week", "month")


@dataclass(frozen=True)
class History:
    """One partitioned history table."""

    table: str
    column: str  # the partition key
    period: str  # one of PERIODS
    # the indexes of every partition: DDL with ``{p}`` for the partition's name (an index is named
    # ``<partition>_<what>``; the legacy partition keeps the table's indexes of before)
    indexes: tuple[str, ...]
    # SQL: true when partition ``{p}`` (whose range ends at ``:hi``) holds a row that must stay
    keeps: str | None = None

    def __post_init__(self) -> None:  # each text a named template (``app.sql.Template``), given once
        for i, ix in enumerate(self.indexes):
            template(f"{self.table}_partition_index_{i}", ix)
        if self.keeps is not None:
            template(f"{self.table}_partition_keeps", self.keeps)

    def index_statements(self, partition: str) -> list[Query]:
        return [
            template(f"{self.table}_partition_index_{i}", ix).fill(p=partition)
            for i, ix in enumerate(self.indexes)
        ]

    def keeps_statement(self, partition: str) -> Query:
        assert self.keeps is not None
        return template(f"{self.table}_partition_keeps", self.keeps).fill(p=partition)


@dataclass(frozen=True)
class Partition:
    name: str
    lo: datetime | None  # None: MINVALUE
    hi: datetime | None  # None: the DEFAULT partition
    default: bool = False


def floor(ts: datetime, period: str) -> datetime:
    """The start (UTC) of the period ``ts`` is in."""
    t = ts.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return t
    if period == "week":  # ISO weeks, as PostgreSQL's date_trunc('week')
        return t - timedelta(days=t.weekday())
    if period == "month":
        return t.replace(day=1)
    raise ValueError(f"unknown period {period!r}")


def step(lo: datetime, period: str) -> datetime:
    """The end of the period that starts at ``lo``."""
    if period == "day":
        return lo + timedelta(days=1)
    if period == "week":
        return lo + timedelta(days=7)
    if period == "month":
        return (lo.replace(day=28) + timedelta(days=4)).replace(day=1)
    raise ValueError(f"unknown period {period!r}")


def partition_name(table: str, lo: datetime) -> str:
    return f"{table}_p{lo.astimezone(UTC):%Y%m%d}"


_PARTITION_NAME = re.compile(r".+_(p\d{8}|legacy)")


def is_history_partition(table: str) -> bool:
    """Whether ``table`` names a partition of a history table (``<table>_pYYYYMMDD``, ``<table>_legacy``)."""
    return _PARTITION_NAME.fullmatch(table) is not None


_UTC = query("history_partitions_utc", "SET LOCAL TimeZone = 'UTC'")
_LIST = query(
    "history_partitions_list",
    """
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = CAST(:table AS regclass)
""",
)
_LEGACY_CHECK = query(
    "history_partitions_legacy_check",
    """
SELECT convalidated AS valid, pg_get_constraintdef(oid) AS definition FROM pg_constraint
WHERE conrelid = CAST(:table AS regclass) AND conname = :name
""",
)
_LOCK_WAIT = query("history_partitions_lock_wait", f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
_LOCK_WAIT_DEFAULT = query("history_partitions_lock_wait_default", "SET LOCAL lock_timeout TO DEFAULT")
_NO_STATEMENT_TIMEOUT = query("history_partitions_no_statement_timeout", "SET LOCAL statement_timeout = 0")
_STATEMENT_TIMEOUT_DEFAULT = query(
    "history_partitions_statement_timeout_default", "SET LOCAL statement_timeout TO DEFAULT"
)
_VALIDATE = template("history_partition_validate", "ALTER TABLE {p} VALIDATE CONSTRAINT {check}")
_DETACH = template("history_partition_detach", "ALTER TABLE {t} DETACH PARTITION {p}")
_ATTACH_LEGACY = template(
    "history_partition_attach_legacy",
    "ALTER TABLE {t} ATTACH PARTITION {p} FOR VALUES FROM (MINVALUE) TO ('{hi}')",
)
_CREATE = template(
    "history_partition_create", "CREATE TABLE {p} PARTITION OF {t} FOR VALUES FROM ('{lo}') TO ('{hi}')"
)
_DROP = template("history_partition_drop", "DROP TABLE {p}")
_QUOTED = re.compile(r"'([^']*)'")


def _ts(literal: str) -> datetime:
    """A timestamptz as PostgreSQL prints it under TimeZone UTC (``2026-12-07 00:00:00+00``)."""
    s = literal.replace(" ", "T")
    if re.search(r"[+-]\d\d$", s):
        s += ":00"
    return datetime.fromisoformat(s).astimezone(UTC)


def _parse(name: str, bound: str) -> Partition:
    if bound.strip().upper() == "DEFAULT":
        return Partition(name, None, None, default=True)
    m = re.fullmatch(r"FOR VALUES FROM \((.*)\) TO \((.*)\)", bound.strip())
    if m is None:
        raise ValueError(f"not a range partition: {name} {bound}")
    lo, hi = m.groups()
    return Partition(
        name, None if lo.upper() == "MINVALUE" else _ts(_QUOTED.findall(lo)[0]), _ts(_QUOTED.findall(hi)[0])
    )


def partitions(conn: Connection, table: str) -> list[Partition]:
    """The partitions of ``table``, the DEFAULT one first, then by range."""
    run(conn, _UTC)
    parts = [_parse(r.name, r.bound) for r in run(conn, _LIST, {"table": table}).all()]
    return sorted(parts, key=lambda p: (not p.default, p.hi or datetime.min.replace(tzinfo=UTC)))


def _ddl(conn: Connection, statements: Sequence[Query]) -> bool:
    """``statements`` in a savepoint under ``LOCK_TIMEOUT``; False (rolled back) when a lock was not had."""
    try:
        with conn.begin_nested():
            run(conn, _LOCK_WAIT)
            for statement in statements:
                run(conn, statement)
            run(conn, _LOCK_WAIT_DEFAULT)
        return True
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != "55P03":  # lock_not_available
            raise
        log.info("history partitions: a lock on %s was not had; next drain", statements[0].sql[:80])
        return False


def _settle_legacy(conn: Connection, spec: History, legacy: Partition) -> bool:
    """The legacy DEFAULT partition into the range ``(MINVALUE, cutoff)``: its CHECK validated (a scan that
    lets writers go on), then detached and attached again as a range that the CHECK proves (no scan)."""
    check = f"{legacy.name}_before"
    row = run(conn, _LEGACY_CHECK, {"table": legacy.name, "name": check}).first()
    if row is None:
        log.error(
            "history partitions: %s is the DEFAULT partition without %s; left as it is", legacy.name, check
        )
        return False
    if not row.valid:
        # a scan of the whole legacy table, once; it lets writers go on, so it may take longer than the
        # sessions' statement timeout
        run(conn, _NO_STATEMENT_TIMEOUT)
        run(conn, _VALIDATE.fill(p=legacy.name, check=check))
        run(conn, _STATEMENT_TIMEOUT_DEFAULT)
    cutoff = _ts(_QUOTED.findall(row.definition)[0])
    return _ddl(
        conn,
        [
            _DETACH.fill(t=spec.table, p=legacy.name),
            _ATTACH_LEGACY.fill(t=spec.table, p=legacy.name, hi=cutoff),
        ],
    )


def create_partition(conn: Connection, spec: History, lo: datetime) -> bool:
    """The partition of ``spec`` for the period starting at ``lo``, with its indexes."""
    name = partition_name(spec.table, lo)
    hi = step(lo, spec.period)
    return _ddl(
        conn,
        [
            _CREATE.fill(p=name, t=spec.table, lo=lo, hi=hi),
            *spec.index_statements(name),
        ],
    )


def ensure(conn: Connection, spec: History, now: datetime | None = None) -> int:
    """Partitions of ``spec`` created up to ``AHEAD`` past ``now``; how many were created."""
    now = now or datetime.now(UTC)
    parts = partitions(conn, spec.table)
    if parts and parts[0].default:
        if not _settle_legacy(conn, spec, parts[0]):
            return 0
        parts = partitions(conn, spec.table)
    ends = [p.hi for p in parts if p.hi is not None]
    lo = max(ends) if ends else floor(now, spec.period)
    created = 0
    while lo < now + AHEAD:
        if not create_partition(conn, spec, lo):
            break
        created += 1
        lo = step(lo, spec.period)
    return created


def _keeps(conn: Connection, spec: History, part: Partition) -> bool:
    """Whether ``part`` holds a row that must stay; True also when the check ran out of time (the
    sessions' statement timeout): a partition is dropped only when that is known."""
    assert spec.keeps is not None
    try:
        with conn.begin_nested():
            return bool(run(conn, spec.keeps_statement(part.name), {"hi": part.hi}).scalar())
    except DBAPIError as exc:
        if getattr(exc.orig, "sqlstate", None) != "57014":  # query_canceled (statement timeout)
            raise
        log.warning("history partitions: the check of %s ran out of time; it stays", part.name)
        return True


def drop_expired(conn: Connection, spec: History, horizon: datetime, limit: int = DROPS_PER_RUN) -> list[str]:
    """Drop the partitions of ``spec`` whose whole range ends at or before ``horizon`` and that hold no row
    that must stay (oldest first, at most ``limit``); the names of those dropped. The newest partition
    is never dropped."""
    parts = [p for p in partitions(conn, spec.table) if not p.default]
    dropped: list[str] = []
    for part in parts[:-1]:
        if part.hi is None or part.hi > horizon or len(dropped) >= limit:
            break
        if spec.keeps and _keeps(conn, spec, part):
            log.info("history partitions: %s stays (it holds rows that must stay)", part.name)
            continue
        if _ddl(conn, [_DROP.fill(p=part.name)]):
            dropped.append(part.name)
    return dropped


# The ledger's partitioned history. The engine's event batches are declared by app.engine.retention.
EXECUTIONS = History(
    "workflow_job_executions",
    "started_at",
    "day",
    (
        # the thresholds of migration 0012 (a partitioned table has no storage parameters: each partition)
        "ALTER TABLE {p} SET (autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_scale_factor = 0.01, "
        "autovacuum_analyze_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, "
        "autovacuum_vacuum_insert_threshold = 1000, autovacuum_vacuum_insert_scale_factor = 0.05)",
        "ALTER TABLE {p} ADD CONSTRAINT {p}_pkey PRIMARY KEY (job_id, generation, attempt) "
        "WITH (fillfactor = 100)",
        "CREATE INDEX {p}_started ON {p} (started_at) WITH (fillfactor = 100)",
    ),
    # an attempt of a job that still exists (jobs are removed by the job retention; a job id is never
    # reused): the jobs older than the partition's newest attempt, each looked up in the partition's key
    keeps="""SELECT EXISTS (SELECT 1 FROM workflow_jobs j
        WHERE j.id <= (SELECT max(e.job_id) FROM {p} e)
          AND EXISTS (SELECT 1 FROM {p} e WHERE e.job_id = j.id))""",
)
AUDIT = History(
    "operation_audit",
    "created_at",
    "month",
    (
        "ALTER TABLE {p} ADD CONSTRAINT {p}_pkey PRIMARY KEY (id)",
        "CREATE INDEX {p}_ns_created ON {p} (namespace_id, created_at, id)",
        "CREATE INDEX {p}_workflow ON {p} (namespace_id, workflow_id, created_at, id) "
        "WHERE workflow_id IS NOT NULL",
        "CREATE INDEX {p}_target ON {p} (target_type, target_id)",
        # the row sweep of a partition that a namespace's longer audit retention keeps
        "CREATE INDEX {p}_created ON {p} (created_at)",
    ),
)


def sweep(conn: Connection, limit: int, *, tables: Sequence[tuple[History, Callable[[], datetime]]]) -> int:
    """The drain's ``history_partitions`` sweep: for each table, partitions created ahead, then those past
    its horizon (``horizon()``: the newest time a dropped partition's range may end at) dropped; the
    number of partitions dropped (a drain runs it again while that reaches ``limit``)."""
    dropped = 0
    for spec, horizon in tables:
        ensure(conn, spec)
        dropped += len(drop_expired(conn, spec, horizon()))
    if dropped:
        log.info("history partitions: %d partition(s) dropped", dropped)
    return dropped


Sweeper = Callable[[Connection, int], int]


def sweeper(tables: Sequence[tuple[History, Callable[[], datetime]]]) -> Sweeper:
    return partial(sweep, tables=tables)
