"""What the workflow benchmark's engines share (``bench/workflows.py``): the shapes, one run's result,
and the counting of an engine's database work from PostgreSQL's statistics.

**Counting.** Row writes are the ``n_tup_ins`` / ``n_tup_upd`` / ``n_tup_del`` of ``pg_stat_user_tables``
(and, of the updates, the HOT ones: ``n_tup_hot_upd``) and transactions the ``xact_commit + xact_rollback`` of ``pg_stat_database``, both read in the engine's
own scratch database before and after the measured workflows. PostgreSQL (15+) keeps a backend's
counts in its own memory and flushes them to shared statistics lazily: at the end of a transaction at
most once a second, and a backend that went idle with counts pending flushes them 10 s later
(``PGSTAT_IDLE_INTERVAL``); a backend that exits flushes at exit. Hence the protocol of a run:

1. the engine is up, warmed up (``--warmup`` workflows of the same shape, 100 by default, not measured),
   its database ``ANALYZE``d (what autovacuum does on a server that runs for a while; the machine's
   server runs without it, and plans a connection prepared on tables a few rows long, sequential scans,
   would otherwise be kept for the whole run, for every engine), then left idle for ``SETTLE_SECONDS``
   (> 10 s): every count of the warm-up and of start-up has reached shared memory;
2. the *before* snapshot; the measured workflows; the engine's processes and connections are stopped
   (each backend flushes at exit), and once no backend of that database is left the *after* snapshot
   is read (again until two reads agree).

The monitor's own transactions (the snapshots and the "are they done yet" polls) run on one connection
that calls ``pg_stat_force_next_flush()`` in each of them, so each is counted as soon as it ends; their
number is subtracted. What stays in the counts besides the workflows: what the engine does while
idle during the run (polls, heartbeats), and at shutdown. Both are small next to 20+ workflows and are
visible per table."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

from bench.run import cpu_seconds, loadavg, log, percentile, with_database

SETTLE_SECONDS = 10.5  # > PGSTAT_IDLE_INTERVAL (10 s): an idle backend has flushed its counts by then
TIMER_SECONDS = 1.0
CLIENT_THREADS = 4  # the threads that start workflows, each with its own client
# ``--rate``: workflows offered per second, all client threads together (start i is made no earlier than
# i / rate seconds after the first); None: as fast as the threads go (each thread starts its next
# workflow as soon as its last start call answered). Set by bench.workflows in each engine's child.
OFFERED_RATE: float | None = None
# ``--payload-bytes``: each workflow's input and each TASK step's output carry a ``pad`` of this many random
# hex characters (0: the payloads of a few bytes of every earlier run). Set in each engine's child, as above.
PAYLOAD_BYTES = 0
MAX_PAYLOAD_BYTES = 1_000_000
QUEUE = "bench_wf"  # the task queue (Ledgerflow) / queue (DBOS, Absurd) of every shape
ELEMENT_QUEUE = "bench_wf_elements"  # the fan-out shape's elements: their own queue in every engine
# Ledgerflow's max_parallel in the fan-out shape: by default every element open at once, as the peers'
# workflows enqueue (DBOS) or spawn (Absurd) all of them before awaiting any (4 run at once in each)
FANOUT_PARALLEL = int(os.environ.get("BENCH_FANOUT_PARALLEL", "100"))


# ------------------------------------------------------------------------------------------- shapes
@dataclass(frozen=True)
class Shape:
    """A workflow of ``tasks`` TASK steps in a chain, with a TIMER of ``TIMER_SECONDS`` after the first
    one when ``timer``, or a fan-out of ``fanout`` elements (one task each, over the array the first
    task outputs) after the first one when ``fanout``. ``mapping``: each task returns ``{"ok": true,
    "value": x + 1}`` and each TASK step after the first gets the previous task's ``value`` as its input
    ``x`` (Ledgerflow: the step's input mapping ``{"x": "$.steps.PREV.output.value"}``; DBOS and Absurd:
    the previous step's return value passed on in the workflow's code)."""

    name: str
    tasks: int
    timer: bool = False
    fanout: int = 0
    mapping: bool = False

    def plan(self) -> list[tuple[str, str]]:
        """The steps in order: ``("task", key)``, ``("timer", key)`` or ``("fanout", key)``."""
        out: list[tuple[str, str]] = []
        for i in range(1, self.tasks + 1):
            out.append(("task", f"s{i}"))
            if i == 1 and self.timer:
                out.append(("timer", "wait"))
            if i == 1 and self.fanout:
                out.append(("fanout", "each"))
        return out

    @property
    def units(self) -> int:
        """Tasks run per workflow (each element one): what a run's timeout scales with."""
        return len(self.plan()) - (1 if self.fanout else 0) + self.fanout


SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("task-task", 2),
        Shape("task-timer-task", 2, timer=True),
        Shape("chain10", 10),
        Shape("fanout", 2, fanout=100),
        Shape("mapping", 2, mapping=True),
    )
}


def padded(value: dict) -> dict:
    """``value`` with ``PAYLOAD_BYTES`` random hex characters under ``pad`` (as is when 0): the same payload
    size in every engine's workflow input and task outputs, random so that no engine's storage compresses it
    away (real payloads compress, by two to five times: the difference between engines is what counts)."""
    if not PAYLOAD_BYTES:
        return value
    return {**value, "pad": secrets.token_hex((PAYLOAD_BYTES + 1) // 2)[:PAYLOAD_BYTES]}


def mapped_value(x: object) -> dict:
    """A task's output in a ``mapping`` shape: its input ``x`` (0 for the first task) plus one."""
    return {"ok": True, "value": (x if isinstance(x, int) else 0) + 1}


def parse_shapes(arg: str) -> list[Shape]:
    """``all`` or a comma-separated list of shape names."""
    names = list(SHAPES) if arg.strip() == "all" else [x.strip() for x in arg.split(",") if x.strip()]
    if unknown := [n for n in names if n not in SHAPES]:
        raise ValueError(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)} or all")
    return [SHAPES[n] for n in names]


# ------------------------------------------------------------------------------------------- counts
@dataclass
class Snapshot:
    """Cumulative counters of one database: per table ``(inserts, updates, deletes)``, and transactions;
    ``hot``: per table, how many of the updates were HOT (``n_tup_hot_upd``: no index entry written)."""

    tables: dict[str, tuple[int, int, int]]
    xacts: int
    hot: dict[str, int] = field(default_factory=dict)
    # the server's WAL position (bytes): the whole cluster's, so a window's is its own only alone; not
    # compared (``final_snapshot`` waits for the counts to settle, and other databases' WAL never does)
    wal: int = field(default=0, compare=False)


@dataclass
class Counts:
    """The database work of a window: per table ``(inserts, updates, deletes)`` and transactions; ``hot``:
    per table, the updates among them that were HOT (every other update wrote an entry into each index
    whose predicate its new version meets); ``wal``: the WAL the server wrote in the window (every
    database's, autovacuum's and checkpoints' full-page images included: a count with noise)."""

    tables: dict[str, tuple[int, int, int]]
    xacts: int
    hot: dict[str, int] = field(default_factory=dict)
    wal: int = 0

    @property
    def inserts(self) -> int:
        return sum(t[0] for t in self.tables.values())

    @property
    def updates(self) -> int:
        return sum(t[1] for t in self.tables.values())

    @property
    def deletes(self) -> int:
        return sum(t[2] for t in self.tables.values())

    @property
    def writes(self) -> int:
        """Row writes as the issue counts them: inserts + updates (deletes are shown apart)."""
        return self.inserts + self.updates

    def minus(self, other: Counts) -> Counts:
        """These counts less ``other`` (e.g. an empty window's), per table and in transactions."""
        names = set(self.tables) | set(other.tables)
        zero = (0, 0, 0)
        tables = {
            t: (a[0] - b[0], a[1] - b[1], a[2] - b[2])
            for t in names
            if (a := self.tables.get(t, zero)) != (b := other.tables.get(t, zero))
        }
        hot = {t: self.hot.get(t, 0) - other.hot.get(t, 0) for t in tables}
        return Counts(
            tables, self.xacts - other.xacts, {t: h for t, h in hot.items() if h}, self.wal - other.wal
        )


def delta(before: Snapshot, after: Snapshot, own_xacts: int = 0) -> Counts:
    """``after - before`` per table (tables that appeared count from 0; tables with no change are left
    out), and the transactions less ``own_xacts`` (the monitor's own)."""
    tables: dict[str, tuple[int, int, int]] = {}
    hot: dict[str, int] = {}
    for name, now in after.tables.items():
        was = before.tables.get(name, (0, 0, 0))
        d = (now[0] - was[0], now[1] - was[1], now[2] - was[2])
        if any(d):
            tables[name] = d
            if h := after.hot.get(name, 0) - before.hot.get(name, 0):
                hot[name] = h
    return Counts(tables, after.xacts - before.xacts - own_xacts, hot, after.wal - before.wal)


@dataclass
class PerWorkflow:
    """Counts divided by the number of workflows."""

    inserts: float
    updates: float
    deletes: float
    xacts: float
    tables: dict[str, tuple[float, float, float]]
    hot: dict[str, float] = field(default_factory=dict)
    wal: float = 0.0

    @property
    def writes(self) -> float:
        return self.inserts + self.updates


def per_workflow(c: Counts, n: int) -> PerWorkflow:
    n = max(n, 1)
    return PerWorkflow(
        c.inserts / n,
        c.updates / n,
        c.deletes / n,
        c.xacts / n,
        {k: (v[0] / n, v[1] / n, v[2] / n) for k, v in c.tables.items()},
        {k: v / n for k, v in c.hot.items()},
        c.wal / n,
    )


def further_step(long: PerWorkflow, short: PerWorkflow, extra_steps: int) -> PerWorkflow:
    """What each further TASK step costs: ``(long - short) / extra_steps`` (e.g. ten-task chain against
    TASK -> TASK: 8 more steps)."""
    k = max(extra_steps, 1)
    names = sorted(set(long.tables) | set(short.tables))
    zero = (0.0, 0.0, 0.0)
    return PerWorkflow(
        (long.inserts - short.inserts) / k,
        (long.updates - short.updates) / k,
        (long.deletes - short.deletes) / k,
        (long.xacts - short.xacts) / k,
        {
            t: tuple(
                (a - b) / k for a, b in zip(long.tables.get(t, zero), short.tables.get(t, zero), strict=True)
            )  # type: ignore[misc]
            for t in names
        },
        {t: (long.hot.get(t, 0.0) - short.hot.get(t, 0.0)) / k for t in names},
        (long.wal - short.wal) / k,
    )


def counts_table(columns: Mapping[str, PerWorkflow], title: str = "per workflow") -> list[str]:
    """Rows: each table's inserts + updates (deletes when any), then the totals and transactions; one
    column per entry of ``columns`` (e.g. a shape, or "each further TASK step")."""
    names = sorted({t for pw in columns.values() for t in pw.tables})
    width = max([len(n) for n in names] + [28])
    head = f"  {title:<{width}}" + "".join(f" {c:>18}" for c in columns)
    lines = [head, "  " + "-" * (len(head) - 2)]

    def num(x: float) -> str:
        return f"{x:.1f}".replace("-0.0", "0.0")

    def cell(ins: float, upd: float, dele: float) -> str:
        s = f"{num(ins)} + {num(upd)}"
        return s + (f" - {num(dele)}" if abs(dele) >= 0.05 else "")

    for t in names:
        row = [pw.tables.get(t, (0.0, 0.0, 0.0)) for pw in columns.values()]
        if all(abs(x) < 0.05 for r in row for x in r):
            continue
        lines.append(f"  {t:<{width}}" + "".join(f" {cell(*r):>18}" for r in row))
    lines.append("  " + "-" * (len(head) - 2))
    lines.append(
        f"  {'row writes (inserts + updates)':<{width}}"
        + "".join(f" {f'{pw.writes:.1f} ({pw.inserts:.1f}+{pw.updates:.1f})':>18}" for pw in columns.values())
    )
    if any(abs(pw.deletes) >= 0.05 for pw in columns.values()):
        lines.append(
            f"  {'row deletes':<{width}}" + "".join(f" {pw.deletes:>18.1f}" for pw in columns.values())
        )
    lines.append(f"  {'transactions':<{width}}" + "".join(f" {pw.xacts:>18.1f}" for pw in columns.values()))
    if any(pw.wal for pw in columns.values()):
        lines.append(
            f"  {'WAL bytes (whole server)':<{width}}"
            + "".join(f" {pw.wal:>18,.0f}" for pw in columns.values())
        )
    # of each table's updates, those that were HOT: the others wrote an entry into each index they meet
    updated = [
        t for t in names if any(abs(pw.tables.get(t, (0.0, 0.0, 0.0))[1]) >= 0.05 for pw in columns.values())
    ]
    if updated:
        lines.append(
            f"  {'updates that were HOT':<{width}}" + "".join(f" {'(HOT / updates)':>18}" for _ in columns)
        )
        for t in updated:
            cells = []
            for pw in columns.values():
                upd = pw.tables.get(t, (0.0, 0.0, 0.0))[1]
                cells.append(f"{num(pw.hot.get(t, 0.0))} / {num(upd)}")
            lines.append(f"    {t:<{width - 2}}" + "".join(f" {c:>18}" for c in cells))
    return lines


# ------------------------------------------------------------------------------------------ monitor
# a partition (the history tables are partitioned by time, migration 0031) counts as its table
PARENT = "COALESCE((SELECT p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent WHERE h.inhrelid = {oid}), {name})"
TABLES_SQL = f"""SELECT CASE WHEN schemaname = 'public' THEN t ELSE schemaname || '.' || t END,
                       sum(n_tup_ins), sum(n_tup_upd), sum(n_tup_del), sum(n_tup_hot_upd)
                FROM (SELECT schemaname, {PARENT.format(oid="relid", name="relname")} AS t, n_tup_ins, n_tup_upd,
                             n_tup_del, n_tup_hot_upd FROM pg_stat_user_tables) s
                GROUP BY 1"""
XACTS_SQL = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
WAL_SQL = "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')"


class Monitor:
    """One connection to the engine's database for snapshots and polls; every transaction it runs
    forces its own statistics flush, and is counted (``own``) so that it can be subtracted."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute("SELECT pg_stat_force_next_flush()")  # flushes the connection's start-up too
        self.pid = self.conn.info.backend_pid
        self.own = 0
        self.admin = psycopg.connect(with_database(dsn, "postgres"), autocommit=True)

    def close(self) -> None:
        self.conn.close()
        self.admin.close()

    def scalar(self, sql: str, params: Sequence | None = None) -> object:
        return self.rows(sql, params)[0][0]

    def rows(self, sql: str, params: Sequence | None = None) -> list[tuple]:
        """One read in its own transaction, counted and flushed at its end."""
        with self.conn.transaction():
            out = self.conn.execute(sql, params).fetchall()
            self.conn.execute("SELECT pg_stat_force_next_flush()")
        self.own += 1
        return out

    def analyze(self) -> None:
        """``ANALYZE`` of the engine's database (every schema), outside the counting window: statistics
        as autovacuum keeps them on a live server; the plans cached before are made again."""
        self.conn.execute("ANALYZE")

    def snapshot(self) -> Snapshot:
        with self.conn.transaction():
            rows = self.conn.execute(TABLES_SQL).fetchall()
            xacts = int(self.conn.execute(XACTS_SQL).fetchone()[0])  # type: ignore[index]
            wal = int(self.conn.execute(WAL_SQL).fetchone()[0])  # type: ignore[index]
            self.conn.execute("SELECT pg_stat_force_next_flush()")
        self.own += 1
        tables = {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in rows}
        return Snapshot(tables, xacts, {r[0]: int(r[4]) for r in rows}, wal)

    def sizes(self) -> dict[str, int]:
        """Bytes on disk of each table of the database (heap, TOAST and indexes), every schema but the
        system's; read outside the counting window."""
        rows = self.conn.execute(
            f"SELECT n.nspname || '.' || {PARENT.format(oid='c.oid', name='c.relname')}, "
            "sum(pg_total_relation_size(c.oid)) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p', 'm') "
            "AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%' "
            "GROUP BY 1"
        ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def relations(self) -> dict[str, tuple[int, int]]:
        """Bytes on disk and index scans of each part of each table, every schema but the system's:
        ``table`` (heap: main, free space and visibility map forks), ``table (toast)`` (its TOAST
        table and the TOAST index) and ``table:index`` (scans: ``pg_stat_user_indexes.idx_scan``;
        0 for the heap and TOAST parts); read outside the counting window."""
        rows = self.conn.execute(
            """
SELECT CASE WHEN n.nspname = 'public' THEN c.relname ELSE n.nspname || '.' || c.relname END AS t,
       pg_relation_size(c.oid, 'main') + pg_relation_size(c.oid, 'fsm') + pg_relation_size(c.oid, 'vm'),
       CASE WHEN c.reltoastrelid <> 0 THEN pg_total_relation_size(c.reltoastrelid) ELSE 0 END,
       COALESCE((SELECT json_agg(json_build_array(ic.relname, pg_relation_size(ic.oid), COALESCE(s.idx_scan, 0)))
                 FROM pg_index x JOIN pg_class ic ON ic.oid = x.indexrelid
                 LEFT JOIN pg_stat_user_indexes s ON s.indexrelid = x.indexrelid
                 WHERE x.indrelid = c.oid), '[]')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg_toast%'"""
        ).fetchall()
        out: dict[str, tuple[int, int]] = {}
        for t, heap, toast, indexes in rows:
            out[str(t)] = (int(heap), 0)
            out[f"{t} (toast)"] = (int(toast), 0)
            for name, size, scans in indexes:
                out[f"{t}:{name}"] = (int(size), int(scans))
        return out

    def tuples(self, tables: Sequence[str]) -> dict[str, dict[str, int]]:
        """``pgstattuple`` of ``tables`` (live / dead tuple bytes and free space of the heap), when the
        server has the extension (it is created in the scratch database); empty otherwise."""
        try:
            self.conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        except psycopg.Error:
            return {}
        out: dict[str, dict[str, int]] = {}
        for t in tables:
            # a partitioned table has no tuples of its own: its partitions' summed (a plain table is
            # its own one leaf)
            row = self.conn.execute(
                "SELECT sum(s.tuple_count), sum(s.tuple_len), sum(s.dead_tuple_count), sum(s.dead_tuple_len), "
                "sum(s.free_space), sum(s.table_len) "
                "FROM pg_partition_tree(%s::regclass) p, LATERAL pgstattuple(p.relid) s WHERE p.isleaf",
                (t,),
            ).fetchone()
            if row is not None and row[0] is not None:
                keys = ("live", "live_bytes", "dead", "dead_bytes", "free_bytes", "bytes")
                out[t] = dict(zip(keys, (int(v) for v in row), strict=True))
        return out

    def in_use(self) -> dict[str, int]:
        """Bytes in use of each table after a ``VACUUM`` of the database (what a steady load leaves: dead
        row versions become free space that later rows reuse, as autovacuum and page pruning make them):
        the heap less its free space (``pgstattuple``), with its TOAST and indexes as they are. Empty
        when the server lacks ``pgstattuple``."""
        try:
            self.conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        except psycopg.Error:
            return {}
        self.conn.execute("VACUUM")
        rows = self.conn.execute(
            """
SELECT n.nspname || '.' || r.relname,
       sum(s.table_len - s.free_space - s.dead_tuple_len + pg_indexes_size(c.oid)
           + CASE WHEN c.reltoastrelid <> 0 THEN pg_total_relation_size(c.reltoastrelid) ELSE 0 END)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     -- a partition is counted as its partitioned table's (history tables: by week, day, month)
     JOIN pg_class r ON r.oid = COALESCE(pg_partition_root(c.oid), c.oid),
     LATERAL pgstattuple(c.oid) s
WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema')
  AND n.nspname NOT LIKE 'pg_toast%'
GROUP BY 1"""
        ).fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def others(self) -> int:
        """Backends of the engine's database other than this monitor (read from ``postgres``: not counted)."""
        db = self.conn.info.dbname
        return int(
            self.admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> %s", (db, self.pid)
            ).fetchone()[0]  # type: ignore[index]
        )

    def backends(self) -> list[int]:
        """The pids of the engine's backends (every backend of its database but this monitor's)."""
        db = self.conn.info.dbname
        rows = self.admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> %s", (db, self.pid)
        ).fetchall()
        return [int(r[0]) for r in rows]

    def final_snapshot(self, timeout: float = 60.0) -> Snapshot:
        """Once every other backend of the database has exited (each flushed its counts at exit), read
        until two snapshots 0.3 s apart agree (the exit flush runs just after a backend leaves
        ``pg_stat_activity``). The snapshots are not counted: they end the window."""
        deadline = time.monotonic() + timeout
        while self.others() and time.monotonic() < deadline:
            time.sleep(0.1)
        if left := self.others():
            raise RuntimeError(f"{left} backend(s) still connected to {self.conn.info.dbname}")
        own, reads = self.own, 1
        prev = self.snapshot()
        while True:
            time.sleep(0.3)
            cur = self.snapshot()
            cur.xacts -= reads  # this loop's earlier reads, each counted once it ended
            reads += 1
            if cur == prev or time.monotonic() > deadline:
                self.own = own
                return cur
            prev = cur


@contextmanager
def counting_window(mon: Monitor) -> Iterator[dict[str, Counts]]:
    """``with counting_window(mon) as out: <run, then stop every engine process>`` -> ``out["counts"]``.
    The caller must have settled the engine (see the module docstring) before entering."""
    before = mon.snapshot()
    mark = mon.own  # the before-snapshot's own transaction is counted in the window: mark after it
    out: dict[str, Counts] = {}
    yield out
    polls = mon.own - mark + 1  # + the before snapshot itself
    after = mon.final_snapshot()
    out["counts"] = delta(before, after, own_xacts=polls)
    # the window's WAL, for `pg_waldump --stats=record -p <pg_wal> -s <from> -e <to>` (what kind of record)
    log(f"WAL of the window: {_lsn(before.wal)} .. {_lsn(after.wal)} ({after.wal - before.wal:,} bytes)")


def _lsn(position: int) -> str:
    """A WAL position in PostgreSQL's notation (``pg_lsn``)."""
    return f"{position >> 32:X}/{position & 0xFFFFFFFF:X}"


class CpuMeter:
    """CPU seconds (``/proc/<pid>/stat``) used between ``start()`` and ``stop()`` by the engine's
    PostgreSQL backends (those of its database, as listed at both ends: a backend that came and went in
    between is missed), by its own processes (``engine_pids()``, e.g. gunicorn and its workers) and by
    this process (the client threads, and whatever of the engine runs in it: task workers, DBOS)."""

    def __init__(self, mon: Monitor, engine_pids: Callable[[], list[int]] = list) -> None:
        self.mon, self.engine_pids = mon, engine_pids

    def _now(self) -> tuple[dict[int, float], float, float]:
        pg = {pid: cpu_seconds(pid) for pid in self.mon.backends()}
        t = os.times()
        return pg, sum(cpu_seconds(pid) for pid in self.engine_pids()), t.user + t.system

    def start(self) -> None:
        self.before = self._now()

    def stop(self, n: int) -> dict[str, float]:
        """CPU ms per workflow: ``postgres``, ``engine``, ``client`` (this process)."""
        pg0, eng0, me0 = self.before
        pg1, eng1, me1 = self._now()
        pg = sum(v - pg0.get(pid, 0.0) for pid, v in pg1.items())
        k = 1000 / max(n, 1)
        return {"postgres": pg * k, "engine": (eng1 - eng0) * k, "client": (me1 - me0) * k}


# ------------------------------------------------------------------------------------------- driving
Started = list[tuple[str, float, float]]  # (workflow id, wall time before the start call, its duration ms)


def start_all(
    n: int, make: Callable[[], Any], start: Callable[[Any, int], str], close: Callable[[Any], None]
) -> Started:
    """``n`` workflows started from CLIENT_THREADS threads, each thread with its own client (``make()``,
    ``close(client)``); ``start(client, i)`` returns the workflow's id. As fast as they go, or, with
    ``OFFERED_RATE``, start i no earlier than ``i / OFFERED_RATE`` s after the first (a start the threads
    cannot make on time is made as soon as one is free: the offered rate is then not reached)."""
    out: Started = []
    lock = threading.Lock()
    counter = iter(range(n))
    errors: list[BaseException] = []
    rate = OFFERED_RATE
    begun = time.monotonic()

    def run() -> None:
        client = make()
        try:
            while True:
                with lock:
                    i = next(counter, None)
                if i is None:
                    return
                if rate:
                    early = begun + i / rate - time.monotonic()
                    if early > 0:
                        time.sleep(early)
                t0, p0 = time.time(), time.perf_counter()
                wid = start(client, i)
                ms = (time.perf_counter() - p0) * 1000
                with lock:
                    out.append((wid, t0, ms))
        except BaseException as exc:  # raised below, in the caller's thread
            errors.append(exc)
        finally:
            close(client)

    threads = [threading.Thread(target=run, name="bench-client") for _ in range(CLIENT_THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"a start failed: {errors[0]!r}")
    return out


def wait_count(mon: Monitor, sql: str, ids: list[str], timeout: float, every: float = 0.2) -> None:
    """Until ``sql`` (one parameter: the ids) counts every workflow of ``ids`` finished."""
    deadline = time.monotonic() + timeout
    while True:
        done = int(mon.scalar(sql, (ids,)))  # type: ignore[call-overload]
        if done >= len(ids):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out: {done}/{len(ids)} workflows finished")
        time.sleep(every)


def measure(
    res: RunResult,
    mon: Monitor,
    *,
    start: Callable[[int], Started],
    done_sql: str,
    timeout: float,
    stop: Callable[[], None],
    engine_pids: Callable[[], list[int]] = list,
    warmup: int = 0,
    before_settle: Callable[[], None] | None = None,
    what: str = "",
    idle: float = 0.0,
) -> Started:
    """The protocol of every run (module docstring): ``warmup`` workflows, ``before_settle()`` (e.g. an
    idle probe), the idle wait, then ``res.n`` workflows in the counting window (``start(n)`` starts
    them, ``done_sql`` counts those of a list of ids finished, ``stop()`` stops every process and
    connection of the engine); fills ``res.load``, ``res.cpu_ms``, ``res.active_s`` and ``res.counts``.
    ``idle`` seconds of nothing are added before the stop (``n = 0`` and ``idle``: an empty window)."""
    label = f"{res.engine} {res.shape}"
    if warmup:
        log(f"{label}: warm-up, {warmup} workflows")
        wait_count(mon, done_sql, [s[0] for s in start(warmup)], timeout)
    if before_settle is not None:
        before_settle()
    mon.analyze()
    log(f"{label}: settling {SETTLE_SECONDS:g} s (statistics flush)")
    time.sleep(SETTLE_SECONDS)
    log(f"{label}: {res.n} workflows from {CLIENT_THREADS} client threads{what}")
    used_before = mon.in_use()
    sizes_before = mon.sizes()
    parts_before = mon.relations()
    with counting_window(mon) as window:
        res.load = loadavg()
        meter = CpuMeter(mon, engine_pids)
        meter.start()
        t0 = time.monotonic()
        started = start(res.n)
        wait_count(mon, done_sql, [s[0] for s in started], timeout)
        time.sleep(idle)
        res.active_s = time.monotonic() - t0
        res.cpu_ms = meter.stop(res.n)
        stop()
    res.counts = window["counts"]
    grown = {t: b - sizes_before.get(t, 0) for t, b in mon.sizes().items()}
    res.bytes_by_table = {t: g / res.n for t, g in grown.items() if g and res.n}
    res.bytes_per_workflow = sum(grown.values()) / res.n if res.n else None
    parts = mon.relations()
    res.bytes_by_part = {
        k: (size - parts_before.get(k, (0, 0))[0]) / res.n
        for k, (size, _) in parts.items()
        if res.n and size != parts_before.get(k, (0, 0))[0]
    }
    res.index_scans = {
        k: scans - parts_before.get(k, (0, 0))[1]
        for k, (_, scans) in parts.items()
        if ":" in k and (k in res.bytes_by_part or scans != parts_before.get(k, (0, 0))[1])
    }
    if res.engine.startswith("ledgerflow") and res.n:
        tables = sorted((t for t, g in grown.items() if g > 0), key=lambda t: -grown[t])[:8]
        res.tuples = mon.tuples(tables)
    if used_before and res.n:
        used = {t: b - used_before.get(t, 0) for t, b in mon.in_use().items()}
        res.used_by_table = {t: g / res.n for t, g in used.items() if g}
        res.used_per_workflow = sum(used.values()) / res.n
    return started


# -------------------------------------------------------------------------------------------- result
@dataclass
class RunResult:
    """One engine on one shape. Times in ms; ``wall`` in s (first start call -> last workflow done)."""

    engine: str
    shape: str
    n: int
    wall: float = 0.0
    start_ms: list[float] = field(default_factory=list)
    latency_ms: list[float] = field(default_factory=list)
    timer_late_ms: list[float] = field(default_factory=list)
    counts: Counts | None = None
    cpu_ms: dict[str, float] = field(default_factory=dict)  # per workflow: postgres, engine, client
    active_s: float = 0.0  # the counting window from the first start to the last workflow done (s)
    # Ledgerflow only: 429 answers seen by the SDK (it retries them), and the idle probe
    http_429: int | None = None
    http_requests: int | None = None  # every answer the SDK got, the task workers' and the starts'
    probe_n: int = 0
    probe_hop_ms: list[float] = field(default_factory=list)
    probe_timer_late_ms: list[float] = field(default_factory=list)
    probe_latency_ms: list[float] = field(default_factory=list)
    failed: int = 0
    # what the run's workflows left on disk: the database's tables (heap, TOAST, indexes) after the run
    # minus before it (after the warm-up), per workflow; and by table
    bytes_per_workflow: float | None = None
    bytes_by_table: dict[str, float] = field(default_factory=dict)
    # the same by part (heap, TOAST, each index: ``Monitor.relations``), the scans of each index of a
    # table that grew during the run, and Ledgerflow's largest tables by ``pgstattuple`` after the run
    bytes_by_part: dict[str, float] = field(default_factory=dict)
    # the bytes in use after a VACUUM (``Monitor.in_use``), per workflow, in all and by table
    used_per_workflow: float | None = None
    used_by_table: dict[str, float] = field(default_factory=dict)
    index_scans: dict[str, int] = field(default_factory=dict)
    tuples: dict[str, dict[str, int]] = field(default_factory=dict)
    load: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.n / self.wall if self.wall > 0 else float("nan")

    def record(self, started: Started, done: Mapping[str, tuple[float, str]], ok: str) -> None:
        """The times of the run from the start calls and each workflow's ``(done time, state)``."""
        self.failed = sum(1 for _, state in done.values() if state != ok)
        self.wall = max(t for t, _ in done.values()) - min(s[1] for s in started)
        self.start_ms = [s[2] for s in started]
        self.latency_ms = [(done[i][0] - t0) * 1000 for i, t0, _ in started]

    def per_workflow(self) -> PerWorkflow | None:
        return per_workflow(self.counts, self.n) if self.counts is not None else None

    def to_json(self) -> dict:
        d = asdict(self)
        if self.counts is not None:
            d["counts"] = {
                "tables": self.counts.tables,
                "xacts": self.counts.xacts,
                "hot": self.counts.hot,
                "wal": self.counts.wal,
            }
        return d

    @classmethod
    def from_json(cls, d: dict) -> RunResult:
        d = dict(d)
        c = d.pop("counts", None)
        r = cls(**d)
        if c is not None:
            r.counts = Counts(
                {k: tuple(v) for k, v in c["tables"].items()},  # type: ignore[misc]
                int(c["xacts"]),
                {k: int(v) for k, v in c.get("hot", {}).items()},  # absent from results of before 2026-12-06
                int(c.get("wal", 0)),  # likewise
            )
        return r


def p(values: Sequence[float], q: float) -> float:
    return percentile(values, q)
