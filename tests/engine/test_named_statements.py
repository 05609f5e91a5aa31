"""Every statement of the hot path is a named statement of the source (``app.sql.query``): a workflow's
start, its tasks' claims and completions, a TIMER step's firing by the ledger's pool and the pool's own
passes run through ``app.sql``'s one helper, each statement under a name whose text is the one sent, and
nothing on SQLAlchemy's own path. What ``pg_stat_statements`` (or a database log) would show is so
findable in a file: ``app.sql.QUERIES[name]`` is defined beside the module that owns its table."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from app.db import transaction
from app.engine import control, signals, task_protocol
from app.ids import new_id
from app.sql import QUERIES, observing
from tests.engine.helpers import (
    claim_task,
    complete_task,
    definition,
    instance,
    make_due,
    publish,
    run_jobs,
    start,
)

NS = "ns-" + new_id()[:8]
DOC = definition(
    {"key": "a", "kind": "TASK", "queue": "named.q"},
    {"key": "t", "kind": "TIMER", "delay_seconds": 0, "after": ["a"]},
    {"key": "b", "kind": "TASK", "queue": "named.q", "after": ["t"]},
)


def _hot_path(eng: Any, def_id: str) -> str:
    iid = start(eng, NS, def_id, {"n": 1})["id"]
    complete_task(eng, NS, claim_task(eng, NS, "named.q"), {"ok": 1})
    make_due(eng)
    assert run_jobs(eng)  # the timer fires
    complete_task(eng, NS, claim_task(eng, NS, "named.q"), {"ok": 2})
    return iid


def test_the_hot_path_runs_only_named_statements_through_the_one_helper(eng):
    def_id = publish(eng, NS, DOC)  # published before: a definition's writes are not the hot path
    _hot_path(eng, def_id)  # and its version cached by the process, as in steady state
    ran: list[tuple[str | None, str]] = []
    on_sqlalchemy: list[str] = []

    def sqlalchemy_path(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        on_sqlalchemy.append(statement)

    event.listen(eng, "before_cursor_execute", sqlalchemy_path)
    try:
        with observing(lambda name, sql, params: ran.append((name, sql))):
            iid = _hot_path(eng, def_id)
    finally:
        event.remove(eng, "before_cursor_execute", sqlalchemy_path)
    assert instance(eng, iid)["state"] == "SUCCEEDED"
    unnamed = sorted({sql[:120] for name, sql in ran if name is None})
    assert unnamed == [], "\n".join(unnamed)
    for name, sql in ran:
        assert name is not None and QUERIES[name].sql == sql, name
    # SQLAlchemy's own path: only the test helpers' time travel (make_due) and the pool's ping at checkout
    assert [
        s
        for s in on_sqlalchemy
        if s.strip() != ";"
        and "run_at = now() - interval" not in s
        and "deadline_at = now() - interval" not in s
    ] == []


def _names_run(eng: Any, def_id: str, ended: list[str]) -> list[str | None]:
    ran: list[str | None] = []
    with observing(lambda name, sql, params: ran.append(name)):
        ended.append(_hot_path(eng, def_id))
    return ran


def test_tracing_on_and_off_send_the_same_statements_and_each_has_its_span(eng):
    """The same named statements, in the same order, whether tracing is on or off (it used to switch
    ``app.sql.run`` onto SQLAlchemy's path); with tracing on, each is a ``db <name>`` span."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from app.observability import tracing

    def_id = publish(eng, NS, DOC)
    _hot_path(eng, def_id)  # the version cached, as in steady state
    ended: list[str] = []
    off = _names_run(eng, def_id, ended)
    exporter = InMemorySpanExporter()
    assert tracing.setup("test", exporter=exporter, set_global=False)
    try:
        on = _names_run(eng, def_id, ended)
    finally:
        tracing.shutdown()
    assert on == off and None not in on
    spans = [s.name for s in exporter.get_finished_spans() if s.name.startswith("db ")]
    assert spans == [f"db {name}" for name in on]
    assert _names_run(eng, def_id, ended) == off  # and off again
    assert [instance(eng, iid)["state"] for iid in ended] == ["SUCCEEDED"] * 3


RETRIED = definition(
    {"key": "a", "kind": "TASK", "queue": "named.r", "retry": {"max_attempts": 3, "backoff_seconds": 0}},
    {
        "key": "b",
        "kind": "TASK",
        "queue": "named.r",
        "after": ["a"],
        "retry": {"max_attempts": 2, "backoff_seconds": 5},
    },
)


def _fail(eng: Any) -> None:
    task = claim_task(eng, NS, "named.r")
    with transaction(eng) as conn:
        task_protocol.fail(conn, NS, task["id"], task["epoch"], {"message": "no", "retryable": True})


def _retries(eng: Any, def_id: str) -> str:
    """A heartbeat, a failure retried at once, a failure retried after a backoff (its wake), the last
    attempt's failure failing the workflow."""
    iid = start(eng, NS, def_id, {})["id"]
    task = claim_task(eng, NS, "named.r")
    with transaction(eng) as conn:
        task_protocol.heartbeat(conn, NS, task["id"], task["epoch"], 30)
        task_protocol.fail(conn, NS, task["id"], task["epoch"], {"message": "no", "retryable": True})
    complete_task(eng, NS, claim_task(eng, NS, "named.r"), {"ok": 1})
    _fail(eng)
    make_due(eng)
    assert run_jobs(eng)  # the backoff's wake
    _fail(eng)
    return iid


def test_retries_and_failures_run_only_named_statements(eng):
    def_id = publish(eng, NS, RETRIED)
    _retries(eng, def_id)  # steady state: the version cached
    ran: list[tuple[str | None, str]] = []
    with observing(lambda name, sql, params: ran.append((name, sql))):
        iid = _retries(eng, def_id)
    assert instance(eng, iid)["state"] == "FAILED"
    unnamed = sorted({sql[:120] for name, sql in ran if name is None})
    assert unnamed == [], "\n".join(unnamed)
    assert all(QUERIES[name].sql == sql for name, sql in ran if name is not None)


SIGNALLED = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 3600,
    "signals": [{"name": "ping", "payload_version": "v1", "schema": {"type": "object"}}],
    "steps": [
        {
            "key": "receipt",
            "kind": "SIGNAL",
            "after": [],
            "signal": "ping",
            "payload_version": "v1",
            "correlation": "first",
            "timeout_seconds": 3000,
        },
        {"key": "w", "kind": "TASK", "queue": "named.s", "after": ["receipt"]},
    ],
}


def _signalled_then_cancelled(eng: Any, def_id: str) -> str:
    """A signal consumed by its wait, the next task claimed, then the workflow cancelled (its claimed
    task settles the cancel when its lease is gone)."""
    iid = start(eng, NS, def_id, {})["id"]
    with transaction(eng) as conn:
        signals.send(
            conn,
            iid,
            "someone",
            {
                "name": "ping",
                "payload_version": "v1",
                "target_step_key": "receipt",
                "target_activation_sequence": 1,
                "correlation_key": "first",
                "payload": {},
                "reason": "r",
                "evidence_ref": None,
            },
        )
    claim_task(eng, NS, "named.s")
    with transaction(eng) as conn:
        revision = int(instance(eng, iid)["control_revision"])
        control.control(
            conn, iid, {"operation": "CANCEL", "expected_control_revision": revision, "reason": "x"}
        )
    make_due(eng)
    run_jobs(eng)
    return iid


def test_signals_and_cancels_run_only_named_statements(eng):
    def_id = publish(eng, NS, SIGNALLED)
    _signalled_then_cancelled(eng, def_id)
    ran: list[tuple[str | None, str]] = []
    with observing(lambda name, sql, params: ran.append((name, sql))):
        iid = _signalled_then_cancelled(eng, def_id)
    assert instance(eng, iid)["state"] in ("CANCELLING", "CANCELLED")
    unnamed = sorted({sql[:120] for name, sql in ran if name is None})
    assert unnamed == [], "\n".join(unnamed)
    assert all(QUERIES[name].sql == sql for name, sql in ran if name is not None)
