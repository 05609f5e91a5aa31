"""A lookup by id of a partitioned history table looks into one partition: the statements of the hot path
that read event batches by a dispatch job or an event id, and the job attempts by job id, carry the partition
key (the enqueuing transaction's time, the event's time, the job's creation), so that PostgreSQL prunes the
other partitions: when it plans with the values, and, for a prepared statement's generic plan, at the
executor's start (``Subplans Removed``). Before, each such read looked into every partition's index (a year
of event batch weeks, a week or more of attempt days).

Each test has a database of its own (``scratch``), with the partitions a month of running leaves ahead."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, text

from app.engine.retention import EVENT_BATCHES
from app.integrations import actions, webhooks
from app.ledger import job_reads, partitions
from app.migrate import upgrade
from app.sql import Query

_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def _literal(value: Any) -> str:
    if isinstance(value, datetime):
        return f"'{value.isoformat()}'"
    if isinstance(value, list):
        return "'{" + ",".join(str(v) for v in value) + "}'"
    if isinstance(value, int):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _plans(conn: Connection, statement: Query, params: dict[str, Any]) -> list[dict[str, Any]]:
    """EXPLAIN (ANALYZE) of ``statement`` (its ``Query.text``) planned with the values, then as a prepared
    statement's generic plan."""
    out = [
        conn.execute(text("EXPLAIN (ANALYZE, FORMAT JSON) " + statement.text), params).scalar_one()[0]["Plan"]
    ]
    names: list[str] = []
    sql = _PARAM.sub(
        lambda m: f"${(names.index(m[1]) if m[1] in names else names.append(m[1]) or len(names) - 1) + 1}",
        statement.text,
    )
    conn.execute(text("SET plan_cache_mode = force_generic_plan"))
    conn.exec_driver_sql(f"PREPARE probe AS {sql}")
    args = ", ".join(_literal(params[n]) for n in names)
    out.append(
        conn.exec_driver_sql(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE probe({args})").scalar_one()[0]["Plan"]
    )
    conn.exec_driver_sql("DEALLOCATE probe")
    conn.execute(text("RESET plan_cache_mode"))
    return out


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    return [plan, *(n for p in plan.get("Plans", []) for n in _nodes(p))]


def _in_plan(plan: dict[str, Any], table: str, *, ran: bool = False) -> set[str]:
    """The partitions of ``table`` in the plan (``ran``: only those of a node that ran at least once)."""
    return {
        n["Relation Name"]
        for n in _nodes(plan)
        if partitions.is_history_partition(n.get("Relation Name", ""))
        and n["Relation Name"].startswith(table)
        and (not ran or n.get("Actual Loops", 0) > 0)
    }


def _scanned(plan: dict[str, Any], table: str) -> set[str]:
    """The partitions of ``table`` the plan read (a node that ran at least once)."""
    return _in_plan(plan, table, ran=True)


def _month_ahead(url: str, eng: Engine) -> None:
    upgrade(url)
    with eng.begin() as conn:
        for spec in (EVENT_BATCHES, partitions.EXECUTIONS):
            partitions.ensure(conn, spec, datetime.now(UTC) + timedelta(days=30))
            assert len(partitions.partitions(conn, spec.table)) > 4


def _one_partition(conn: Connection, statement: Query, params: dict[str, Any], table: str) -> set[str]:
    custom, generic = _plans(conn, statement, params)
    for plan in (custom, generic):
        assert len(_scanned(plan, table)) == 1, (statement.name, _scanned(plan, table))
    # planned with the values: the other partitions are not in the plan at all; the generic plan names them
    # but removes them when the executor starts
    assert _in_plan(custom, table) == _scanned(custom, table)
    assert any(n.get("Subplans Removed", 0) > 0 for n in _nodes(generic)), statement.name
    return _scanned(custom, table)


def test_the_attempts_of_a_job_are_read_from_its_days_only(scratch):
    url, eng = scratch
    _month_ahead(url, eng)
    with eng.begin() as conn:
        job = conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, max_attempts, operation_key, trace_id, status, "
                "finished_at) VALUES ('delay_wake', 'workflow-ledger', 3, 'op', 'tr', 'succeeded', now()) "
                "RETURNING id, created_at"
            )
        ).one()
        conn.execute(
            text(
                "INSERT INTO workflow_job_executions (id, job_id, generation, attempt, status, due_at, started_at, "
                "finished_at) VALUES (1, :j, 1, 1, 'succeeded', now(), now(), now())"
            ),
            {"j": job.id},
        )
    with eng.connect() as conn:
        scanned = _one_partition(
            conn, job_reads._ATTEMPTS, {"ids": [job.id], "since": job.created_at}, "workflow_job_executions"
        )
        part = conn.execute(text("SELECT tableoid::regclass::text FROM workflow_job_executions")).scalar_one()
        assert scanned == {part}
        # and the read finds the attempt
        assert [
            r.id
            for r in conn.execute(text(job_reads._ATTEMPTS.text), {"ids": [job.id], "since": job.created_at})
        ] == [1]


def _event_batch(conn: Connection, job_id: int, at: datetime) -> str:
    bid = uuid.uuid4().hex[:29] + "000"
    conn.execute(
        text(
            "INSERT INTO workflow_event_batches (id, namespace_id, instance_id, first_seq, last_seq, definition_id, "
            "instance, trace_id, events, dispatch_job_id, created_at) VALUES (:b, 'ns', :i, 1, 1, '', "
            "'\"RUNNING\"', '', '[[\"workflow.started\"]]', :j, :at)"
        ),
        {"b": bid, "i": uuid.uuid4().hex, "j": job_id, "at": at},
    )
    return bid


def test_a_dispatch_and_its_deliveries_and_actions_read_their_events_from_one_week(scratch):
    url, eng = scratch
    _month_ahead(url, eng)
    with eng.begin() as conn:
        at = conn.execute(text("SELECT now()")).scalar_one()
        bid = _event_batch(conn, 7, at)
        event_id = bid[:29] + "000"
        conn.execute(
            text(
                "INSERT INTO webhook_deliveries (id, namespace_id, subscription_id, event_id, event_type) "
                "VALUES ('d1', 'ns', 's1', :e, 'workflow.started')"
            ),
            {"e": event_id},
        )
        conn.execute(
            text(
                "INSERT INTO automation_executions (id, namespace_id, rule_id, event_id) VALUES ('x1', 'ns', 'r1', :e)"
            ),
            {"e": event_id},
        )
    table = "workflow_event_batches"
    with eng.connect() as conn:
        part = conn.execute(text("SELECT tableoid::regclass::text FROM workflow_event_batches")).scalar_one()
        for statement, params in (
            (webhooks._DISPATCH_EVENTS, {"j": 7, "at": at, "n": 100}),
            (webhooks._LOAD_AT, {"id": "d1", "at": at}),
            (actions._LOAD_AT, {"id": "x1", "at": at}),
        ):
            assert _one_partition(conn, statement, params, table) == {part}, statement.name
            # the same rows as without the time
            assert len(conn.execute(text(statement.text), params).all()) == 1, statement.name
