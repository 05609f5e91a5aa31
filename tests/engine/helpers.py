"""Engine test helpers: definitions, inline job runs (claim -> handler -> settle, as the pool does)."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event, text

from app.auth import ALL_SCOPES, Principal, create_credential
from app.db import transaction
from app.engine import definitions, instances, task_protocol
from app.ledger import handlers
from app.ledger.outcome import outcome_of
from app.sql import observing
from tests.ledger_helpers import claim, context_for, settle, settlement

ENGINE_TABLES = (
    "workflow_tasks, workflow_waits, workflow_activations, workflow_steps, workflow_instances, "
    "workflow_definition_versions, workflow_definitions, workflow_event_batches, event_subscriptions, "
    "webhook_deliveries, automation_rules, automation_executions, workflow_quota_counts"
)

# one SIGNAL step waiting for ``done`` correlated on the input's ``order`` (signal, control and recovery tests)
SIGNAL_DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "signals": [{"name": "done", "payload_version": "v1", "schema": {"type": "object"}}],
    "steps": [
        {
            "key": "receipt",
            "kind": "SIGNAL",
            "after": [],
            "signal": "done",
            "payload_version": "v1",
            "correlation": "$.input.order",
            "timeout_seconds": 300,
        }
    ],
}


@functools.cache
def author(ns: str) -> Principal:
    """The principal of a live credential with every scope, acting in namespace id ``ns``: rules,
    schedules and subscriptions act with their author's rights, checked each time they act."""
    with transaction() as conn:
        issued = create_credential(
            conn, namespace=ns, name="author-" + uuid.uuid4().hex[:8], scopes=ALL_SCOPES
        )
    return Principal(issued.credential_id, issued.name, ns, ns, frozenset(issued.scopes), None)


def definition(*steps: dict, deadline_seconds: int = 600) -> dict:
    """A definition document of ``steps`` (version v1, any input)."""
    return {"version": "v1", "input_schema": {}, "deadline_seconds": deadline_seconds, "steps": list(steps)}


def publish(engine: Engine, ns: str, doc: dict, name: str | None = None) -> str:
    import uuid

    with transaction(engine) as conn:
        d = definitions.create_definition(conn, ns, name or f"def-{uuid.uuid4().hex[:8]}")
        definitions.publish_version(conn, ns, d["id"], doc)
    return d["id"]


def start(engine: Engine, ns: str, def_id: str, input: Any, version: str = "v1", **kw: Any) -> dict:
    with transaction(engine) as conn:
        return instances.start_workflow(
            conn, ns, {"definition_id": def_id, "version": version, "input": input, **kw}
        )


def make_due(engine: Engine) -> None:
    """Time travel for inline tests: every pending job, task deadline and wait is due now."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE workflow_jobs SET run_at = now() - interval '1 ms' WHERE status = 'pending' "
                "AND type <> 'task_timeout'"
            )
        )
        conn.execute(
            text("UPDATE workflow_waits SET deadline_at = now() - interval '1 ms' WHERE kind = 'TIMER'")
        )


def run_jobs(engine: Engine, limit: int = 50, queue: str | None = None) -> list[tuple[str, str]]:
    """Run due advance-pool jobs (or ``queue``'s) inline until none is due; returns (type, outcome kind)."""
    ran = []
    for _ in range(limit):
        rows = claim(engine, queue) if queue else claim(engine)
        if not rows:
            break
        row = rows[0]
        ctx = context_for(row, engine)
        try:
            result, exc = handlers.resolve(row["type"])(ctx), None
        except Exception as e:
            result, exc = None, e
        out = outcome_of(result, exc)
        settle(
            engine,
            [
                settlement(
                    row,
                    out.kind,
                    result=out.result,
                    error=out.error,
                    error_code=out.error_code,
                    retry_after_s=out.retry_after,
                )
            ],
        )
        ran.append((row["type"], out.kind if exc is None else f"{out.kind}: {exc}"))
    return ran


def claim_task(engine: Engine, ns: str, queue: str, lease: float = 60.0) -> dict:
    with transaction(engine) as conn:
        got = task_protocol.claim(conn, ns, [queue], 1, lease)
    assert got, f"no task on {queue}"
    return got[0]


def complete_task(engine: Engine, ns: str, task: dict, output: Any) -> dict:
    with transaction(engine) as conn:
        return task_protocol.complete(conn, ns, task["id"], task["epoch"], output)


def instance(engine: Engine, iid: str) -> dict:
    from app.engine.row_access import read_instance

    with engine.connect() as conn:
        return instances.instance_view(read_instance(conn, iid))


def step(engine: Engine, ns: str, iid: str, key: str) -> dict:
    from app.engine.views import step_view

    with engine.connect() as conn:
        return step_view(conn, iid, ns, key)


@contextmanager
def statements_seen(engine: Engine) -> Iterator[list[str]]:
    """The statements run meanwhile: ``app.sql``'s (its observers) and those SQLAlchemy executes itself on
    ``engine`` (its cursor events), each as the driver is given it."""
    seen: list[str] = []

    def listen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", listen)
    try:
        with observing(lambda name, sql, params: seen.append(sql)):
            yield seen
    finally:
        event.remove(engine, "before_cursor_execute", listen)
