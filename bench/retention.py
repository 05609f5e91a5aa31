"""Retention at scale: a day of finished workflows, old enough that every retention applies, removed by the
drain's sweeps while a claimer claims.

    PYTHONPATH=. .venv/bin/ledgerflow env -- .venv/bin/python -m bench.retention [--workflows 5000000]

Own database (dropped at the end), migrated, with the history tables' partitions as a year of running
leaves them: the day of the fill (``--days-old`` ago, 440 by default: its month is past the audit's 400 days) in its
own partitions (a day of attempts, the week of event batches, the month of audit) and the current ones.
``--templates`` TASK -> TIMER -> TASK workflows are run to their end through the engine; their rows
(instance, steps, activations, tasks, waits, jobs, attempts, event batches) are then copied
``--workflows / --templates`` times by ``INSERT ... SELECT ... generate_series`` (ids remapped, times
moved into that day), plus one operation audit row for every tenth workflow. The filled tables' indexes that
back no constraint are dropped before the copies and built again after them (``--keep-indexes``: not).

Then ``--claim-seconds`` of claims alone (as ``bench.claim.time_claims``: 4 jobs out of a 2,000-job backlog,
each claim rolled back), then the drain with every retention sweep of ``actors.maintenance.run_drain``,
run again and again until a run removes nothing, with the same claimer beside it, then ``--claim-seconds`` of
claims alone again (the baseline is both windows alone). Printed: the time,
the rows removed by table and by sweep (a partition dropped counts its rows), the WAL written
(``pg_current_wal_lsn`` before and after; the claimer's rolled-back claims write next to none), and the
claim p50/p99 without and during retention, and what ``pg_stat_activity`` (sampled every 10 ms) showed the
claimer's backend, the drain's and autovacuum doing in each phase, with the machine's CPU use and how long
the claimer's backend and thread waited for a core (``/proc/<pid>/schedstat``; the embedded PostgreSQL runs
on this machine). Numbers, not assertions. ``LEDGERFLOW_RETENTION_PAUSE`` (and every other setting) is read
from the environment as the drain reads it.

``retention_workflows`` (the instances, steps, tasks and waits of finished workflows, row deletes) runs
too, unless ``--without-workflow-removal`` (the partitioned history and the jobs alone). Before migration
0032_fk_indexes it was left out: the foreign keys it checks (``workflow_tasks.step_id``,
``workflow_waits.instance_id``) had no index, so each deleted row read the whole referencing table (one
batch of 5,000 workflows ran over 4 minutes at 100,000 workflows)."""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, create_engine, text

from app.db import transaction
from app.engine import retention as engine_retention
from app.engine import task_protocol
from app.engine.handlers import task_timeouts, timers
from app.engine.retention import EVENT_BATCHES
from app.integrations import retention as integrations_retention
from app.ledger import handlers, partitions, retention, rollup, transitions
from app.ledger.drain import Paced, drain
from app.settings import get_settings
from bench.claim import QUEUE, WARMUP
from bench.run import scratch_database
from tests.engine.helpers import make_due, publish, run_jobs, start

HISTORY = (EVENT_BATCHES, partitions.EXECUTIONS, partitions.AUDIT)
DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 3600,
    "steps": [
        {"key": "t1", "kind": "TASK", "queue": "bench-q"},
        {"key": "w", "kind": "TIMER", "delay_seconds": 1, "after": ["t1"]},
        {"key": "t2", "kind": "TASK", "queue": "bench-q", "after": ["w"]},
    ],
}
# the tables a finished workflow has rows in, copied from the templates
TABLES = (
    "workflow_instances",
    "workflow_steps",
    "workflow_activations",
    "workflow_tasks",
    "workflow_waits",
    "workflow_signals",
    "workflow_jobs",
    "workflow_job_executions",
    "workflow_event_batches",
)
COUNTED = (*TABLES, "operation_audit")
# text ids remapped per copy (the same function everywhere, so references between tables hold)
TEXT_IDS = {
    "id",
    "instance_id",
    "step_id",
    "activation_id",
    "task_id",
    "parent_instance_id",
    "child_instance_id",
    "poll_last_task_id",
    "poll_current_task_id",
    "winner_signal_id",
    "consumed_wait_id",
}
BIGINT_IDS = {  # (table, column): bigint ids moved by copy * stride
    ("workflow_jobs", "id"),
    ("workflow_jobs", "attempt_id"),
    ("workflow_job_executions", "id"),
    ("workflow_job_executions", "job_id"),
    ("workflow_event_batches", "dispatch_job_id"),
}
NULLED = {("workflow_jobs", "idempotency_key"), ("workflow_instances", "start_key")}


def _partitions_of_a_year(engine: Engine, day: datetime) -> None:
    """The fresh database's (empty) legacy partitions dropped, the current partitions created, and the
    partitions of ``day``'s period: a year of running leaves that, the days between long dropped."""
    with engine.begin() as conn:
        for spec in HISTORY:
            conn.execute(text(f"DROP TABLE {spec.table}_legacy"))
            partitions.ensure(conn, spec)
            lo = partitions.floor(day, spec.period)
            while lo < day + timedelta(days=1):
                assert partitions.create_partition(conn, spec, lo)
                lo = partitions.step(lo, spec.period)


def _templates(engine: Engine, n: int) -> list[str]:
    """``n`` TASK -> TIMER -> TASK workflows run to their end through the engine."""
    for mod in (timers, task_timeouts):  # the engine's job handlers, as a worker registers them
        for name in ("delay_wake", "task_timeout"):
            if hasattr(mod, name):
                handlers.register(name, getattr(mod, name), replace=True)
    ns = "ns-bench-retention"
    with engine.begin() as conn:  # retention walks the namespaces
        conn.execute(text("INSERT INTO namespaces (id, name) VALUES (:ns, :ns)"), {"ns": ns})
    def_id = publish(engine, ns, DOC)
    ids = [start(engine, ns, def_id, {"n": i})["id"] for i in range(n)]
    for _ in range(30):
        run_jobs(engine, 500)
        with transaction(engine) as conn:
            tasks = task_protocol.claim(conn, ns, ["bench-q"], 100, 60)
        for t in tasks:
            with transaction(engine) as conn:
                task_protocol.complete(conn, ns, t["id"], t["epoch"], {"ok": True})
        make_due(engine)
        run_jobs(engine, 500)
        with engine.connect() as conn:
            left = conn.execute(
                text("SELECT count(*) FROM workflow_instances WHERE state <> 'SUCCEEDED'")
            ).scalar_one()
            open_jobs = conn.execute(
                text("SELECT count(*) FROM workflow_jobs WHERE status NOT IN ('succeeded', 'canceled')")
            ).scalar_one()
        if left == 0 and open_jobs == 0:
            return ids
        time.sleep(0.5)
    with engine.connect() as conn:
        kinds = conn.execute(
            text("SELECT type, status, count(*) FROM workflow_jobs GROUP BY 1, 2 ORDER BY 1, 2")
        ).all()
    raise RuntimeError(f"templates did not finish: {left} workflows, {open_jobs} jobs open: {kinds}")


def _columns(conn: Connection, table: str) -> list[tuple[str, str]]:
    return [
        (r.column_name, r.data_type)
        for r in conn.execute(
            text(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = :t "
                "AND table_schema = 'public' AND is_generated = 'NEVER' ORDER BY ordinal_position"
            ),
            {"t": table},
        )
    ]


def _copy_sql(conn: Connection, table: str) -> str:
    """INSERT of the templates' rows of ``table``, copies ``:g0`` .. ``:g1``: ids remapped, times moved
    to ``:base`` + the copy's second of the day."""
    cols, exprs = [], []
    for name, kind in _columns(conn, table):
        cols.append(name)
        if (table, name) in NULLED:
            exprs.append("NULL")
        elif table == "workflow_event_batches" and name == "id":
            exprs.append("left(md5(t.id || '-' || g), 29) || '000'")
        elif kind == "text" and name in TEXT_IDS:
            exprs.append(f"CASE WHEN t.{name} IS NULL THEN NULL ELSE left(md5(t.{name} || '-' || g), 32) END")
        elif (table, name) in BIGINT_IDS:
            exprs.append(f"t.{name} + g * CAST(:stride AS bigint)")
        elif kind == "timestamp with time zone":
            exprs.append(
                f"t.{name} + (CAST(:base AS timestamptz) - CAST(:t0 AS timestamptz)) + (g % 79200) * interval '1 s'"
            )
        else:
            exprs.append(f"t.{name}")
    return (
        f"INSERT INTO {table} ({', '.join(cols)}) SELECT {', '.join(exprs)} "
        f"FROM template_{table} t CROSS JOIN generate_series(CAST(:g0 AS bigint), CAST(:g1 AS bigint)) g"
    )


def _filled_tables(day: datetime) -> list[str]:
    """The tables the fill writes: the plain ones and the day's partitions of the partitioned ones."""
    by_table = {
        spec.table: partitions.partition_name(spec.table, partitions.floor(day, spec.period))
        for spec in HISTORY
    }
    return [by_table.get(t, t) for t in TABLES]


# the indexes of the filled tables that back no constraint (the primary keys and unique constraints stay)
_PLAIN_INDEXES = """
SELECT i.indexname, i.indexdef FROM pg_indexes i
WHERE i.schemaname = current_schema() AND i.tablename = ANY(:t)
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = CAST(i.indexname AS regclass))
ORDER BY i.tablename, i.indexname
"""


def _fill(engine: Engine, templates: int, copies: int, day: datetime, chunk: int, rebuild: bool) -> float:
    """The copies, then the audit rows and a VACUUM (ANALYZE). With ``rebuild`` the filled tables' indexes
    that back no constraint are dropped first and built again after the copies: one sort per index instead of
    an insert per row into indexes larger than shared_buffers (most keys are random md5 ids)."""
    started = time.perf_counter()
    with engine.begin() as conn:
        plain = conn.execute(text(_PLAIN_INDEXES), {"t": _filled_tables(day)}).all() if rebuild else []
        for name, _ in plain:
            conn.execute(text(f"DROP INDEX {name}"))
        for table in TABLES:
            conn.execute(text(f"CREATE UNLOGGED TABLE template_{table} AS SELECT * FROM {table}"))
        t0 = conn.execute(text("SELECT min(created_at) FROM template_workflow_instances")).scalar_one()
        stride = 10 ** len(
            str(conn.execute(text("SELECT max(id) FROM workflow_job_executions")).scalar_one() or 1)
        )
        stride = max(
            stride, 10 ** len(str(conn.execute(text("SELECT max(id) FROM workflow_jobs")).scalar_one()))
        )
        sqls = {t: _copy_sql(conn, t) for t in TABLES}
    base = day + timedelta(hours=1)
    done = 0
    while done < copies:
        g0, g1 = done + 1, min(copies, done + chunk)
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL synchronous_commit = off"))
            # the copies of rows whose references hold (the templates'): no per-row foreign key check
            conn.execute(text("SET LOCAL session_replication_role = replica"))
            for table in TABLES:
                conn.execute(
                    text(sqls[table]), {"g0": g0, "g1": g1, "stride": stride, "base": base, "t0": t0}
                )
        done = g1
        print(f"  filled {done:,} / {copies:,} copies ({time.perf_counter() - started:.0f} s)", flush=True)
    if plain:
        t_ix = time.perf_counter()
        with engine.begin() as conn:
            conn.execute(text("SET LOCAL maintenance_work_mem = '256MB'"))
            for _, definition in plain:
                conn.execute(text(definition))
        print(f"  {len(plain)} indexes built again in {time.perf_counter() - t_ix:.0f} s", flush=True)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO operation_audit (id, namespace_id, actor_id, action, target_type, target_id, "
                "workflow_id, reason, created_at) SELECT md5('audit-' || g), 'ns-bench-retention', 'operator', "
                "'workflow.pause', 'workflow', md5(g::text), md5(g::text), 'bench', "
                "CAST(:base AS timestamptz) + (g % 79200) * interval '1 s' FROM generate_series(1, :n) g"
            ),
            {"base": base, "n": max(1, copies * templates // 10)},
        )
        for table in TABLES:
            conn.execute(text(f"DROP TABLE template_{table}"))
        # the sequences past the copied ids
        conn.execute(
            text("SELECT setval(pg_get_serial_sequence('workflow_jobs', 'id'), max(id)) FROM workflow_jobs")
        )
        conn.execute(
            text("SELECT setval('workflow_job_executions_id_seq', max(id)) FROM workflow_job_executions")
        )
    t_vac = time.perf_counter()
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("VACUUM (ANALYZE)"))
    print(f"  VACUUM (ANALYZE) in {time.perf_counter() - t_vac:.0f} s", flush=True)
    return time.perf_counter() - started


# the time column of each table's rows (the fill moves every time column into the day)
TIME_OF = {
    "workflow_instances": "created_at",
    "workflow_steps": "created_at",
    "workflow_activations": "activated_at",
    "workflow_tasks": "created_at",
    "workflow_waits": "created_at",
    "workflow_signals": "accepted_at",
    "workflow_jobs": "created_at",
    "workflow_job_executions": "started_at",
    "workflow_event_batches": "created_at",
    "operation_audit": "created_at",
}


def _counts(engine: Engine, before: datetime) -> dict[str, int]:
    """Rows of each table older than ``before`` (the fill's day)."""
    with engine.connect() as conn:
        return {
            t: conn.execute(
                text(f"SELECT count(*) FROM {t} WHERE {TIME_OF[t]} < :b"), {"b": before}
            ).scalar_one()
            for t in COUNTED
        }


class Claimer:
    """Claims in a loop on its own thread, as ``bench.claim.time_claims`` does (4 jobs, rolled back, on a
    raw psycopg connection, every fourth by due time); each claim's end (monotonic) and milliseconds."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.pid = 0
        self.tid = 0
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        options = "-c timezone=UTC " + transitions.PG_SESSION_OPTIONS
        with psycopg.connect(self.dsn, autocommit=True, options=options) as conn:
            self.pid = conn.info.backend_pid
            self.tid = threading.get_native_id()
            self.ready.set()
            i = 0
            while not self.stop.is_set():
                conn.execute("BEGIN")
                t0 = time.perf_counter()
                rows = transitions.claim(
                    conn, queue=QUEUE, limit=4, worker_id="bench", lease_seconds=60, by_due=i % 4 == 3
                )
                t1 = time.perf_counter()
                conn.execute("ROLLBACK")
                assert len(rows) == 4, rows
                if i >= WARMUP:
                    self.samples.append((t1, (t1 - t0) * 1000))
                i += 1
                time.sleep(0.002)  # about 300 claims a second: a busy pool, not a saturating one

    def between(self, t0: float, t1: float) -> list[float]:
        return [ms for at, ms in list(self.samples) if t0 <= at < t1]


def _cpu(claimer: Claimer) -> tuple[float, ...]:
    """The machine's CPU seconds so far (/proc/stat): busy, I/O wait, all; then the seconds the claimer's
    backend and its thread ran and waited for a core (``/proc/<pid>/schedstat``: run, run-queue wait)."""
    with open("/proc/stat") as f:
        v = [float(x) / os.sysconf("SC_CLK_TCK") for x in f.readline().split()[1:8]]
    sched = []
    for path in (f"/proc/{claimer.pid}/schedstat", f"/proc/self/task/{claimer.tid}/schedstat"):
        try:
            with open(path) as f:
                sched += [int(x) / 1e9 for x in f.read().split()[:2]]
        except OSError:  # another machine's server
            sched += [0.0, 0.0]
    return (sum(v) - v[3] - v[4], v[4], sum(v), *sched)


class Waits:
    """``pg_stat_activity`` of the bench's database sampled every ``every`` seconds on its own connection:
    what the claimer's backend, the drain's and autovacuum were doing (``wait_event_type:wait_event``;
    ``CPU`` when active without a wait: running or waiting for a core), with the machine's CPU use."""

    def __init__(self, dsn: str, claimer: Claimer, every: float = 0.01) -> None:
        self.dsn, self.claimer, self.claimer_pid, self.every = dsn, claimer, claimer.pid, every
        self.samples: list[tuple[float, str, str]] = []
        self.cpu: list[tuple[float, tuple[float, ...]]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            i = 0
            while not self.stop.is_set():
                now = time.perf_counter()
                if i % 10 == 0:  # a few samples in a drain run's window (``cpu_within``)
                    self.cpu.append((now, _cpu(self.claimer)))
                i += 1
                for pid, btype, state, wtype, wevent in conn.execute(
                    "SELECT pid, backend_type, state, wait_event_type, wait_event "
                    "FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
                    "AND (datname = current_database() OR backend_type IN ('checkpointer', 'walwriter'))"
                ):
                    if pid == self.claimer_pid:
                        who = "claimer"
                    elif btype == "client backend":
                        who = "drain"
                    else:
                        who = btype
                    if state not in (None, "active"):
                        continue  # idle / idle in transaction: the client's turn
                    if who in ("checkpointer", "walwriter") and wtype == "Activity":
                        continue  # asleep
                    self.samples.append((now, who, f"{wtype}:{wevent}" if wtype else "CPU"))
                time.sleep(self.every)

    def report(self, label: str, windows: list[tuple[float, float]]) -> None:
        inside = [(who, w) for at, who, w in self.samples if any(a <= at < b for a, b in windows)]
        if not inside:
            return
        total = sum(b - a for a, b in windows)
        print(f"  {label} ({total:.1f} s, samples every {self.every * 1000:.0f} ms):")
        for who in sorted({w for w, _ in inside}):
            mine = [w for x, w in inside if x == who]
            top = sorted({w: mine.count(w) for w in mine}.items(), key=lambda kv: -kv[1])[:6]
            print(f"    {who:22} {len(mine):6} active: " + ", ".join(f"{w} {n}" for w, n in top))
        d, wall = cpu_within(list(self.cpu), windows)
        if wall > 0 and d[2] > 0:
            print(
                f"    machine CPU (over {wall:.1f} s of it): busy {100 * d[0] / d[2]:.0f} %, "
                f"I/O wait {100 * d[1] / d[2]:.0f} % (of {os.cpu_count()} cores); "
                f"claimer backend ran {1000 * d[3] / wall:.0f} ms/s, waited for a core "
                f"{1000 * d[4] / wall:.1f} ms/s; claimer thread ran {1000 * d[5] / wall:.0f} "
                f"ms/s, waited {1000 * d[6] / wall:.1f} ms/s"
            )


def cpu_within(
    points: list[tuple[float, tuple[float, ...]]], windows: list[tuple[float, float]]
) -> tuple[tuple[float, ...], float]:
    """The CPU counters' growth (``_cpu``'s fields) and the wall seconds between consecutive samples that
    lie in the same window, summed over the windows: a phase's own figures, whatever lies between its
    windows (the first sample of one window and the last of another would span the whole run). A window
    with fewer than two samples adds nothing."""
    total: list[float] = []
    wall = 0.0
    for a, b in windows:
        for (t0, c0), (t1, c1) in pairwise((at, c) for at, c in points if a <= at < b):
            total = [s + y - x for s, x, y in zip(total or [0.0] * len(c0), c0, c1, strict=True)]
            wall += t1 - t0
    return tuple(total), wall


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Spent:
    """Per sweep: seconds, WAL bytes (its transaction's, read before its commit) and time windows."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.wal: dict[str, int] = {}
        self.windows: dict[str, list[tuple[float, float]]] = {}

    def timed(self, name: str, fn: Callable[[Connection, int], int]) -> Callable[[Connection, int], int]:
        def run(conn: Connection, limit: int) -> int:
            lsn = conn.execute(text("SELECT pg_current_wal_insert_lsn()")).scalar_one()
            t0 = time.perf_counter()
            try:
                return fn(conn, limit)
            finally:
                t1 = time.perf_counter()
                self.seconds[name] = self.seconds.get(name, 0.0) + t1 - t0
                self.windows.setdefault(name, []).append((t0, t1))
                self.wal[name] = self.wal.get(name, 0) + int(
                    conn.execute(
                        text("SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), CAST(:l AS pg_lsn))"),
                        {"l": lsn},
                    ).scalar_one()
                )

        return run


RETENTION = {
    "history_partitions",
    "event_partitions",
    "retention_jobs",
    "retention_dead_letters",
    "retention_receipts",
    "retention_audit",
    "retention_signals",
    "retention_events",
    "retention_workflows",
}


def _sweeps(spent: Spent, workflows: bool) -> list[tuple[str, Any]]:
    """The retention sweeps of ``actors.maintenance.run_drain``, each timed; ``retention_workflows`` only
    with ``workflows``."""
    policy = retention.policy_from_env()
    settings = get_settings()
    named = [
        *rollup.sweeps(settings),
        *retention.sweeps(policy),
        *engine_retention.sweeps(policy),
        *integrations_retention.sweeps(policy),
    ]
    return [
        (name, Paced(spent.timed(name, fn.fn), fn.factor) if isinstance(fn, Paced) else spent.timed(name, fn))
        for name, fn in named
        if workflows or name != "retention_workflows"
    ]


def _run(
    url: str,
    workflows: int,
    templates: int,
    days_old: float,
    claim_seconds: float,
    chunk: int,
    with_workflows: bool,
    rebuild: bool = True,
) -> None:
    engine = create_engine(url, pool_size=4)
    dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
    day = partitions.floor(datetime.now(UTC) - timedelta(days=days_old), "day")
    _partitions_of_a_year(engine, day)
    _templates(engine, templates)
    copies = max(1, workflows // templates)
    print(f"filling {copies * templates:,} finished workflows on {day:%Y-%m-%d} ...", flush=True)
    fill_s = _fill(engine, templates, copies, day, max(1, chunk // templates), rebuild)
    with engine.begin() as conn:  # the claimer's backlog: 2,000 pending jobs
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id, payload) "
                f"SELECT 'delay_wake', '{QUEUE}', 3, 'op', md5(g::text), '{{}}' FROM generate_series(1, 2000) g"
            )
        )
        conn.execute(text("ANALYZE workflow_jobs"))
        size = conn.execute(text("SELECT pg_size_pretty(pg_database_size(current_database()))")).scalar_one()
    cutoff = day + timedelta(days=2)
    before = _counts(engine, cutoff)
    print(f"filled in {fill_s:.0f} s; database {size}; rows of the day: {before}", flush=True)

    claimer = Claimer(dsn)
    claimer.thread.start()
    claimer.ready.wait()
    waits = Waits(dsn, claimer)
    waits.thread.start()
    print(f"load average before: {_load()}", flush=True)
    a0 = time.perf_counter()
    time.sleep(claim_seconds)
    a1 = time.perf_counter()
    alone = claimer.between(a0, a1)

    spent = Spent()
    swept: dict[str, int] = {}
    settings = get_settings()
    with engine.connect() as conn:
        lsn0 = conn.execute(text("SELECT pg_current_wal_lsn()")).scalar_one()
    t0 = time.perf_counter()
    runs = 0
    while True:
        report = drain(engine, settings, sweeps=_sweeps(spent, with_workflows))
        runs += 1
        for k, v in report.swept.items():
            swept[k] = swept.get(k, 0) + v
        if not any(n for k, n in report.swept.items() if k in RETENTION) or runs > 100_000:
            break
    t1 = time.perf_counter()
    elapsed = t1 - t0
    with engine.connect() as conn:
        wal = conn.execute(
            text("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), CAST(:l AS pg_lsn))"), {"l": lsn0}
        ).scalar_one()
    # claims alone again, after the retention: the baseline is both windows (a shared machine's other work
    # comes and goes; one window of before alone made the ratio swing by 2x from run to run)
    time.sleep(0.5)
    b0 = time.perf_counter()
    time.sleep(claim_seconds)
    b1 = time.perf_counter()
    after_alone = claimer.between(b0, b1)
    claimer.stop.set()
    claimer.thread.join()
    waits.stop.set()
    waits.thread.join()
    load_after = _load()
    during = claimer.between(t0, t1)
    phases = {
        "partition drops": ("history_partitions", "event_partitions"),
        "job row deletes": ("retention_jobs",),
        "workflow row deletes": ("retention_workflows",),
    }
    by_phase = {
        label: [ms for n in names for w in spent.windows.get(n, []) for ms in claimer.between(*w)]
        for label, names in phases.items()
    }
    after = _counts(engine, cutoff)
    removed = {t: before[t] - after[t] for t in COUNTED}

    print()
    print(f"workflows: {copies * templates:,} finished, {days_old:g} days old (one day)")
    print(
        f"retention: {elapsed:.1f} s in {runs} drain runs; WAL written {int(wal) / 1e6:.1f} MB; "
        f"LEDGERFLOW_RETENTION_PAUSE={retention.policy_from_env().pause:g}, "
        f"LEDGERFLOW_RETENTION_BATCH={retention.policy_from_env().batch}"
    )
    print(f"rows removed: {sum(removed.values()):,}")
    for t in COUNTED:
        print(f"  {t:28} {removed[t]:>12,} removed, {after[t]:>10,} left")
    print("by sweep (seconds, WAL, count: rows, or partitions for the partition sweeps):")
    for name in sorted(spent.seconds, key=lambda n: -spent.seconds[n]):
        if spent.seconds[name] >= 0.01 or swept.get(name):
            print(
                f"  {name:30} {spent.seconds[name]:8.2f} s {spent.wal.get(name, 0) / 1e6:9.2f} MB"
                f"  {swept.get(name, 0):>12,}"
            )
    before_alone = alone
    alone = before_alone + after_alone
    p99_alone = _pct(alone, 0.99)

    def line(label: str, xs: list[float]) -> str:
        return (
            f"  {label:34} p50 {_pct(xs, 0.5):6.2f} p99 {_pct(xs, 0.99):7.2f} "
            f"(n={len(xs)}; p99 {_pct(xs, 0.99) / p99_alone:.2f}x alone)"
        )

    print(f"load average before: see above; after: {load_after}")
    print("claim ms (4 of a 2,000-job backlog, rolled back, ~300/s):")
    print(line("alone (before and after)", alone))
    print(line("alone before", before_alone))
    print(line("alone after", after_alone))
    print(line("during retention (all of it)", during))
    for label, xs in by_phase.items():
        if not xs:
            continue
        print(line(f"during {label}", xs))
    print("pg_stat_activity samples (what each backend waited on while active):")
    waits.report("alone", [(a0, a1), (b0, b1)])
    for label, names in phases.items():
        waits.report(f"during {label}", [w for n in names for w in spent.windows.get(n, [])])
    engine.dispose()


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.retention")
    p.add_argument("--workflows", type=int, default=5_000_000)
    p.add_argument("--templates", type=int, default=20)
    # past the audit's 400 days by more than a month: the day's month of audit is past it too
    p.add_argument("--days-old", type=float, default=440.0)
    p.add_argument("--claim-seconds", type=float, default=20.0)
    p.add_argument("--chunk", type=int, default=100_000, help="workflows copied per transaction")
    p.add_argument(
        "--without-workflow-removal",
        dest="with_workflow_removal",
        action="store_false",
        help="leave retention_workflows out (instances, steps, tasks, waits: row deletes)",
    )
    # the default now; kept so that the command lines of before still run
    p.add_argument("--with-workflow-removal", dest="with_workflow_removal", action="store_true")
    p.add_argument(
        "--keep-indexes",
        dest="rebuild",
        action="store_false",
        help="fill with every index in place (by default the indexes that back no constraint are dropped "
        "before the copies and built again after them)",
    )
    args = p.parse_args()
    with scratch_database("lf_bench_retention") as url:
        _run(
            url,
            args.workflows,
            args.templates,
            args.days_old,
            args.claim_seconds,
            args.chunk,
            args.with_workflow_removal,
            args.rebuild,
        )


if __name__ == "__main__":
    main()
