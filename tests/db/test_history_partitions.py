"""History partitioned by time (migration 0031_history_partitions, ``app.ledger.partitions``): the drain
creates partitions ahead; retention drops a partition whose whole range is past its horizon and keeps
one that holds a row that must stay (an attempt of a job that exists; an event batch of an unfinished or
held workflow); the migration turns an installation with rows into partitioned tables without moving a
row; the event stream and the audit read the same rows in the same order across partitions.

Each test has a database of its own (``scratch``): they drop partitions, which the session's database
shares with every other test."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.exc import IntegrityError

from app import audit
from app.engine import retention as engine_retention
from app.engine.retention import EVENT_BATCHES
from app.ledger import partitions, retention
from app.ledger.partitions import AUDIT, EXECUTIONS, History, Partition
from app.ledger.retention import RetentionPolicy
from app.migrate import upgrade
from tests.db.old_schemas import migration_module, todays_functions
from tests.engine.helpers import make_due, publish, run_jobs, start

SPECS = (EVENT_BATCHES, EXECUTIONS, AUDIT)
ROOT = Path(__file__).resolve().parents[2]
TIMER = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [{"key": "w", "kind": "TIMER", "delay_seconds": 60}],
}
NOW = datetime.now(UTC)


def _parts(eng: Engine, spec: History) -> list[Partition]:
    with eng.begin() as conn:
        return partitions.partitions(conn, spec.table)


def _ensure(eng: Engine, spec: History, now: datetime | None = None) -> int:
    with eng.begin() as conn:
        return partitions.ensure(conn, spec, now)


def _drop(eng: Engine, spec: History, horizon: datetime) -> list[str]:
    with eng.begin() as conn:
        return partitions.drop_expired(conn, spec, horizon, limit=100)


def _one(eng: Engine, sql: str, **params: object) -> object:
    with eng.connect() as conn:
        return conn.execute(text(sql), params).scalar()


def test_period_bounds_are_utc_boundaries():
    t = datetime(2026, 12, 31, 23, 59, tzinfo=UTC)
    assert partitions.floor(t, "day") == datetime(2026, 12, 31, tzinfo=UTC)
    assert partitions.floor(t, "week") == datetime(2026, 12, 28, tzinfo=UTC)  # a Monday
    assert partitions.floor(t, "month") == datetime(2026, 12, 1, tzinfo=UTC)
    assert partitions.step(datetime(2026, 12, 1, tzinfo=UTC), "month") == datetime(2027, 1, 1, tzinfo=UTC)
    assert partitions.step(datetime(2027, 1, 31, tzinfo=UTC), "day") == datetime(2027, 2, 1, tzinfo=UTC)
    assert partitions.is_history_partition("workflow_event_batches_p20261207")
    assert partitions.is_history_partition("operation_audit_legacy")
    assert not partitions.is_history_partition("workflow_event_batches")


def test_the_drain_creates_partitions_ahead_and_rows_land_in_them(scratch):
    url, eng = scratch
    upgrade(url)
    for spec in SPECS:  # a new installation: the (empty) table of before is the range up to the cutoff
        (legacy,) = _parts(eng, spec)
        assert (legacy.name, legacy.lo, legacy.default) == (f"{spec.table}_legacy", None, False)
        assert legacy.hi is not None and legacy.hi > NOW + timedelta(days=1)
    with eng.begin() as conn:  # the drain's sweeps: the ledger's and the engine's
        for name, sweep in (*retention.sweeps(), *engine_retention.sweeps()):
            if name in ("history_partitions", "event_partitions"):
                assert sweep(conn, 100) == 0  # nothing to drop on a new installation
    for spec in SPECS:
        parts = _parts(eng, spec)
        assert parts[-1].hi is not None and parts[-1].hi >= NOW + partitions.AHEAD
        for a, b in zip(parts, parts[1:], strict=False):  # contiguous, each one period
            assert a.hi == b.lo and b.hi == partitions.step(b.lo, spec.period)  # type: ignore[arg-type]
        assert _ensure(eng, spec) == 0  # a second run creates nothing
        # every partition has its indexes, named after it
        for p in parts[1:]:
            names = {
                r[0]
                for r in eng.connect().execute(
                    text("SELECT indexname FROM pg_indexes WHERE tablename = :t"), {"t": p.name}
                )
            }
            assert names and all(n.startswith(p.name) for n in names), names
            assert f"{p.name}_pkey" in names
    # a row goes to the partition of its time
    _ensure(eng, EVENT_BATCHES, NOW + timedelta(days=30))
    last = _parts(eng, EVENT_BATCHES)[-1]
    assert last.lo is not None and last.name == partitions.partition_name(EVENT_BATCHES.table, last.lo)
    ns = "ns-" + uuid.uuid4().hex[:8]
    iid = start(eng, ns, publish(eng, ns, TIMER), {})["id"]
    bid = _batch_at(eng, iid, last.lo + timedelta(hours=1))
    assert _partition_of(eng, EVENT_BATCHES.table, bid) == last.name


def _batch_at(eng: Engine, iid: str, at: datetime) -> str:
    """A copy of the instance's first batch written at ``at`` (an event batch of a later transaction)."""
    bid = uuid.uuid4().hex[:29] + "000"
    with eng.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_event_batches (id, namespace_id, instance_id, first_seq, last_seq, "
                "definition_id, instance, trace_id, events, audit, created_at, audited_at) "
                "SELECT :bid, namespace_id, instance_id, m.s + 1, m.s + 1, definition_id, instance, trace_id, "
                '\'[{"type": "workflow.resumed", "data": {}}]\', \'[]\', :at, :at '
                "FROM workflow_event_batches, "
                "LATERAL (SELECT max(last_seq) AS s FROM workflow_event_batches WHERE instance_id = :i) m "
                "WHERE instance_id = :i ORDER BY created_at LIMIT 1"
            ),
            {"bid": bid, "i": iid, "at": at},
        )
    return bid


def _partition_of(eng: Engine, table: str, row_id: str) -> str:
    return str(_one(eng, f"SELECT tableoid::regclass::text FROM {table} WHERE id = :id", id=row_id))


def test_retention_drops_old_partitions_and_keeps_those_of_unfinished_or_held_workflows(scratch):
    """Partitions a few weeks ahead stand for old ones (the horizon is what retention computes from
    now): the finished workflow's week goes; the running workflow's and the held workflow's stay with
    every row, and go once that workflow ended or its hold was released."""
    url, eng = scratch
    upgrade(url)
    _ensure(eng, EVENT_BATCHES, NOW + timedelta(days=60))
    ns = "ns-" + uuid.uuid4().hex[:8]
    def_id = publish(eng, ns, TIMER)
    done, running, held = (start(eng, ns, def_id, {})["id"] for _ in range(3))
    with eng.begin() as conn:
        conn.execute(
            text(
                "UPDATE workflow_instances SET state = 'SUCCEEDED', completed_at = now() WHERE id = ANY(:ids)"
            ),
            {"ids": [done, held]},
        )
        conn.execute(
            text("UPDATE workflow_instances SET hold_until = now() + interval '1000 days' WHERE id = :i"),
            {"i": held},
        )
    b_done = _batch_at(eng, done, NOW + timedelta(days=15))
    b_running = _batch_at(eng, running, NOW + timedelta(days=22))
    b_held = _batch_at(eng, held, NOW + timedelta(days=29))
    p_done, p_running, p_held = (
        _partition_of(eng, EVENT_BATCHES.table, b) for b in (b_done, b_running, b_held)
    )
    assert len({p_done, p_running, p_held}) == 3
    horizon = NOW + timedelta(days=40)
    before = {p.name for p in _parts(eng, EVENT_BATCHES)}
    dropped = set(_drop(eng, EVENT_BATCHES, horizon))
    # the legacy partition holds the running workflow's first batch: it stays too
    assert p_done in dropped and f"{EVENT_BATCHES.table}_legacy" not in dropped
    assert p_running not in dropped and p_held not in dropped
    assert {p.name for p in _parts(eng, EVENT_BATCHES)} == before - dropped
    # what stays: the kept ones and those whose range reaches past the horizon (empty or not)
    assert all(
        p.hi is not None and p.hi > horizon
        for p in _parts(eng, EVENT_BATCHES)
        if p.name not in (p_running, p_held, f"{EVENT_BATCHES.table}_legacy")
    )
    seqs = {
        i: _one(eng, "SELECT count(*) FROM workflow_events WHERE instance_id = :i", i=i)
        for i in (done, running, held)
    }
    assert seqs[running] >= 2 and seqs[held] >= 2  # their later batches are all still read
    # the workflow ends, the hold is released: their partitions go at the next run
    with eng.begin() as conn:
        conn.execute(
            text("UPDATE workflow_instances SET state = 'SUCCEEDED', completed_at = now() WHERE id = :i"),
            {"i": running},
        )
        conn.execute(text("UPDATE workflow_instances SET hold_until = NULL WHERE id = :i"), {"i": held})
    again = set(_drop(eng, EVENT_BATCHES, horizon))
    assert {p_running, p_held, f"{EVENT_BATCHES.table}_legacy"} <= again


def test_a_day_of_attempts_stays_while_a_job_of_it_exists(scratch):
    url, eng = scratch
    upgrade(url)
    _ensure(eng, EXECUTIONS, NOW + timedelta(days=30))
    with eng.begin() as conn:
        jobs = [
            conn.execute(
                text(
                    "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id, status, "
                    "finished_at) VALUES ('delay_wake', 'workflow-ledger', 3, 'op', 't', 'succeeded', now()) "
                    "RETURNING id"
                )
            ).scalar_one()
            for _ in range(2)
        ]
        for day, job in ((10, jobs[0]), (12, jobs[1])):
            conn.execute(
                text(
                    "INSERT INTO workflow_job_executions (job_id, generation, attempt, status, due_at, started_at, "
                    "finished_at) VALUES (:j, 1, 1, 'succeeded', :at, :at, :at)"
                ),
                {"j": job, "at": NOW + timedelta(days=day)},
            )
    part_of = {
        job: str(
            _one(eng, "SELECT tableoid::regclass::text FROM workflow_job_executions WHERE job_id = :j", j=job)
        )
        for job in jobs
    }
    with eng.begin() as conn:  # the job retention removed the first job (and never its attempts)
        conn.execute(text("DELETE FROM workflow_jobs WHERE id = :j"), {"j": jobs[0]})
    dropped = _drop(eng, EXECUTIONS, NOW + timedelta(days=20))
    assert part_of[jobs[0]] in dropped and part_of[jobs[1]] not in dropped
    assert _one(eng, "SELECT count(*) FROM workflow_job_executions WHERE job_id = :j", j=jobs[1]) == 1
    with eng.begin() as conn:
        conn.execute(text("DELETE FROM workflow_jobs WHERE id = :j"), {"j": jobs[1]})
    assert part_of[jobs[1]] in _drop(eng, EXECUTIONS, NOW + timedelta(days=20))


def test_the_audit_is_dropped_by_month_past_its_retention_and_its_cursor_reads_across_partitions(scratch):
    url, eng = scratch
    upgrade(url)
    _ensure(eng, AUDIT, NOW + timedelta(days=100))
    ns = "ns-" + uuid.uuid4().hex[:8]
    times = [NOW - timedelta(days=1), *(NOW + timedelta(days=d) for d in (1, 35, 36, 70))]
    with eng.begin() as conn:
        for n, at in enumerate(times):
            for k in range(3):
                conn.execute(
                    text(
                        "INSERT INTO operation_audit (id, namespace_id, actor_id, action, target_type, target_id, "
                        "created_at) VALUES (:id, :ns, 'x', 'a', 't', :t, :at)"
                    ),
                    {
                        "id": f"{n:02d}{k:02d}" + "0" * 28,
                        "ns": ns,
                        "t": str(n),
                        "at": at + timedelta(seconds=k),
                    },
                )
    assert (
        len({_partition_of(eng, "operation_audit", f"{n:02d}00" + "0" * 28) for n in range(len(times))}) >= 3
    )
    # newest first, every row once, whichever partition it is in, two rows a page
    seen: list[str] = []
    cursor = None
    with eng.connect() as conn:
        while True:
            page = audit.list_entries(conn, ns, limit=2, cursor=cursor)
            seen += [r["id"] for r in page.items]
            cursor = page.next_cursor
            if cursor is None:
                break
    expected = [f"{n:02d}{k:02d}" + "0" * 28 for n in reversed(range(len(times))) for k in reversed(range(3))]
    assert seen == expected
    # the audit horizon: the longest retention of any namespace
    policy = RetentionPolicy(audit_days=400, by_namespace={"long": 800})
    assert (
        abs((retention.audit_horizon(policy) - (datetime.now(UTC) - timedelta(days=800))).total_seconds())
        < 60
    )
    # a horizon on a month boundary: every partition that ends by then goes, the legacy one (up to the
    # cutoff the migration chose, here that boundary) with yesterday's and tomorrow's rows included
    horizon = partitions.step(partitions.floor(NOW + timedelta(days=1), "month"), "month")
    month_of_day_1 = _partition_of(eng, "operation_audit", "0100" + "0" * 28)
    assert month_of_day_1 in _drop(eng, AUDIT, horizon)
    left = _one(eng, "SELECT count(*) FROM operation_audit WHERE namespace_id = :ns", ns=ns)
    assert left == 3 * sum(1 for t in times if t >= horizon) and left > 0


def test_the_migration_keeps_every_row_and_the_drain_settles_the_legacy_partition(scratch):
    """An installation with rows: upgraded, every row is read as before (events in order, the audit with
    its cursor); the old table is the DEFAULT partition until the drain validates its bound and makes it a
    range; then new rows go to new partitions and an old workflow's events go on in sequence."""
    url, eng = scratch
    upgrade(url, "0031_compact_event_batches")
    todays_functions(eng)  # the rows are made by today's code
    ns = "ns-" + uuid.uuid4().hex[:8]
    def_id = publish(eng, ns, TIMER)
    iids = [start(eng, ns, def_id, {"n": n})["id"] for n in range(3)]
    with eng.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO operation_audit (id, namespace_id, actor_id, action, target_type, target_id, workflow_id) "
                "SELECT md5(g::text), :ns, 'x', 'a', 't', g::text, :wf FROM generate_series(1, 7) g"
            ),
            {"ns": ns, "wf": iids[0]},
        )
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (id, type, queue, max_attempts, operation_key, trace_id, status) "
                "VALUES (900001, 'delay_wake', 'workflow-ledger', 3, 'op', 't', 'succeeded')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO workflow_job_executions (job_id, generation, attempt, status, due_at) "
                "VALUES (900001, 1, 1, 'succeeded', now())"
            )
        )

    with eng.begin() as conn:  # the batches as that revision's code wrote them (jsonb: before migration 0038)
        conn.execute(text(migration_module("0038_event_batches_json").AS_JSONB))

    def read() -> tuple:
        with eng.connect() as conn:
            events = conn.execute(
                text(
                    "SELECT instance_id, seq, type FROM workflow_events WHERE namespace_id = :ns ORDER BY 1, 2"
                ),
                {"ns": ns},
            ).all()
            ops = conn.execute(
                text("SELECT id FROM workflow_operations WHERE namespace_id = :ns ORDER BY created_at, id"),
                {"ns": ns},
            ).all()
            n_attempts = conn.execute(text("SELECT count(*) FROM workflow_job_executions")).scalar()
        return [tuple(r) for r in events], [r[0] for r in ops], n_attempts

    before = read()
    assert before[0] and len(before[1]) >= 7 and before[2] == 1
    upgrade(url)
    assert read() == before
    for spec in SPECS:
        (legacy,) = _parts(eng, spec)
        assert legacy.default and legacy.name == f"{spec.table}_legacy"
        assert (
            _one(eng, "SELECT convalidated FROM pg_constraint WHERE conname = :c", c=f"{legacy.name}_before")
            is False
        )
    with eng.begin() as conn:  # the drain's sweeps
        for name, sweep in (*retention.sweeps(), *engine_retention.sweeps()):
            if name in ("history_partitions", "event_partitions"):
                sweep(conn, 100)
    for spec in SPECS:
        parts = _parts(eng, spec)
        assert (
            not any(p.default for p in parts)
            and parts[0].name == f"{spec.table}_legacy"
            and parts[0].lo is None
        )
        assert parts[-1].hi is not None and parts[-1].hi >= NOW + partitions.AHEAD
        assert _one(
            eng, "SELECT convalidated FROM pg_constraint WHERE conname = :c", c=f"{spec.table}_legacy_before"
        )
    assert read() == before
    # the old workflows advance: their new batches (written now, in the legacy range until its cutoff,
    # then in the partitions) continue each one's sequence
    make_due(eng)
    run_jobs(eng)
    events, ops, _ = read()
    for iid in iids:
        seqs = [s for i, s, _t in events if i == iid]
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) > sum(1 for r in before[0] if r[0] == iid)
    assert set(before[1]) <= set(ops)
    # an attempt id never comes twice: the new sequence starts past the old one
    with eng.begin() as conn:
        new_id = conn.execute(text("SELECT nextval('workflow_job_executions_id_seq')")).scalar_one()
        old_max = conn.execute(text("SELECT max(id) FROM workflow_job_executions")).scalar_one()
    assert new_id > old_max
    # and a downgrade puts the plain tables back with every row
    upgrade_then_down = read()
    from alembic import command

    from app.migrate import alembic_config

    command.downgrade(alembic_config(url), "0031_compact_event_batches")
    assert _one(eng, "SELECT relkind FROM pg_class WHERE relname = 'workflow_event_batches'") == "r"
    assert read()[:2] == upgrade_then_down[:2]


def test_a_partition_step_gives_up_on_a_busy_table_and_is_done_at_the_next_run(scratch):
    """A transaction that has read the table holds a lock a drop must wait for: the drop waits at most
    ``LOCK_TIMEOUT`` (so the writers behind it are not held up longer), is skipped, and goes next time."""
    url, eng = scratch
    upgrade(url)
    _ensure(eng, AUDIT, NOW + timedelta(days=70))
    horizon = partitions.step(partitions.floor(NOW + timedelta(days=40), "month"), "month")
    reader = eng.connect()
    tx = reader.begin()
    reader.execute(text("SELECT count(*) FROM operation_audit"))  # holds ACCESS SHARE until it ends
    try:
        t0 = datetime.now(UTC)
        assert _drop(eng, AUDIT, horizon) == []
        assert datetime.now(UTC) - t0 < timedelta(seconds=10)
    finally:
        tx.rollback()
        reader.close()
    assert len(_drop(eng, AUDIT, horizon)) >= 2  # the legacy partition and at least one month


def test_a_check_that_runs_out_of_time_keeps_its_partition(scratch):
    """The check of what must stay runs under the sessions' statement timeout: when it runs out, the
    partition stays (and the drain goes on) rather than being dropped unchecked."""
    url, eng = scratch
    upgrade(url)
    _ensure(eng, AUDIT, NOW + timedelta(days=70))
    slow = History(AUDIT.table, AUDIT.column, AUDIT.period, AUDIT.indexes, keeps="SELECT pg_sleep(2) IS NULL")
    horizon = partitions.step(partitions.floor(NOW + timedelta(days=40), "month"), "month")
    with eng.begin() as conn:
        conn.execute(text("SET LOCAL statement_timeout = '100ms'"))
        assert partitions.drop_expired(conn, slow, horizon, limit=100) == []
        conn.execute(text("SET LOCAL statement_timeout = 0"))
        assert conn.execute(text("SELECT 1")).scalar_one() == 1  # the transaction goes on
    assert len(_drop(eng, AUDIT, horizon)) >= 2


def _cutoff(eng: Engine, spec: History) -> datetime:
    definition = _one(
        eng,
        "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :c",
        c=f"{spec.table}_legacy_before",
    )
    return partitions._ts(str(definition).split("'")[1])


# a row of each history table at ``:at`` (an attempt of job 900001)
_ROW_AT = {
    "workflow_event_batches": "INSERT INTO workflow_event_batches (id, namespace_id, instance_id, last_seq, "
    "definition_id, instance, trace_id, created_at) VALUES (md5(random()::text), 'ns', md5(random()::text), 1, "
    "'d', '{}', 't', :at)",
    "workflow_job_executions": "INSERT INTO workflow_job_executions (job_id, generation, attempt, status, "
    "due_at, started_at) VALUES (900001, 1, (SELECT coalesce(max(attempt), 0) + 1 FROM "
    "workflow_job_executions WHERE job_id = 900001), 'succeeded', :at, :at)",
    "operation_audit": "INSERT INTO operation_audit (id, namespace_id, actor_id, action, target_type, target_id, "
    "created_at) VALUES (md5(random()::text), 'ns', 'x', 'a', 't', 'id', :at)",
}


def test_an_upgraded_installation_takes_rows_for_a_week_and_the_release_phase_settles_its_partitions(scratch):
    """An installation with rows, upgraded: its legacy table is the DEFAULT partition with a bound that new
    rows are checked against, so a row past that bound would be refused until the drain settles it. The
    bound is a week ahead at least (the drain's partitions ahead), so stopped workers do not make the
    upgrade an outage; and the release phase (``ledgerflow db upgrade``) settles the partitions right after
    the migrations: the legacy partition validated and made a range, partitions a week ahead, rows of any
    time in that week taken, as the drain would have left them."""
    url, eng = scratch
    upgrade(url, "0031_compact_event_batches")
    todays_functions(eng)  # the rows are made by today's code
    ns = "ns-" + uuid.uuid4().hex[:8]
    start(eng, ns, publish(eng, ns, TIMER), {"n": 1})
    with eng.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (id, type, queue, max_attempts, operation_key, trace_id, status) "
                "VALUES (900001, 'delay_wake', 'workflow-ledger', 3, 'op', 't', 'succeeded')"
            )
        )
        conn.execute(text(_ROW_AT["workflow_job_executions"]), {"at": NOW})
        conn.execute(text(_ROW_AT["operation_audit"]), {"at": NOW})
    upgrade(url)
    week = datetime.now(UTC) + partitions.AHEAD
    for spec in SPECS:
        (legacy,) = _parts(eng, spec)
        assert legacy.default
        cutoff = _cutoff(eng, spec)
        assert cutoff >= week, (spec.table, cutoff)  # before: a day ahead at least
        with eng.begin() as conn:  # taken until the bound, by the DEFAULT partition
            conn.execute(text(_ROW_AT[spec.table]), {"at": week - timedelta(hours=1)})
        with pytest.raises(IntegrityError, match="legacy_before"), eng.begin() as conn:  # refused past it
            conn.execute(text(_ROW_AT[spec.table]), {"at": cutoff + timedelta(hours=1)})

    done = subprocess.run(
        [sys.executable, "-m", "ledgerflow.cli", "db", "upgrade"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "history partitions: settled" in done.stdout
    for spec in SPECS:
        parts = _parts(eng, spec)
        assert not any(p.default for p in parts) and parts[0].name == f"{spec.table}_legacy"
        assert parts[0].hi == _cutoff(eng, spec) and parts[-1].hi is not None and parts[-1].hi >= week
        assert _one(
            eng, "SELECT convalidated FROM pg_constraint WHERE conname = :c", c=f"{spec.table}_legacy_before"
        )
        with eng.begin() as conn:  # every time up to the last partition's end is taken
            for at in (datetime.now(UTC), week - timedelta(hours=1), parts[-1].hi - timedelta(seconds=1)):
                conn.execute(text(_ROW_AT[spec.table]), {"at": at})
