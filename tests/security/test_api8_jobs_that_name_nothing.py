"""OWASP API8:2023 Security Misconfiguration, the job side: ``webhook_delivery``,
``automation_action``, ``event_dispatch`` and ``compensation_action`` jobs enqueued by hand with payloads
naming no existing row ended ``succeeded`` ("skipped: the execution no longer exists"), so a mistyped id
looked like success. Now a job naming a row that never existed ends ``dead`` with REFERENCE_NOT_FOUND.
"It existed and is gone" stays a skip: a row these jobs name is removed only by retention, past the job
retention window, so a job older than that window whose row is missing is skipped; and deleting a
subscription keeps the deliveries whose job is still to run, so those find their row and skip."""

from __future__ import annotations

import uuid

import pytest

from app.db import transaction
from app.ids import new_id
from app.integrations import subscriptions
from app.ledger.enqueue import enqueue
from app.ledger.states import JobType
from tests.engine.helpers import publish, start
from tests.security.hostile import TIMER_DOC, author, drain_outbound, sql

NS = "ns-" + uuid.uuid4().hex[:8]


def _job(job_type: str, payload: dict, **kw) -> int:
    with transaction() as conn:
        return enqueue(conn, job_type, payload, **kw).id


def _outcome(job_id: int) -> tuple[str, str | None]:
    """(status, error code); a skip settles ``succeeded`` with ``{"skipped": true}`` and reads ``skipped``."""
    [(status, code, skipped)] = sql(
        "SELECT status::text, error_code, result->>'skipped' FROM workflow_jobs WHERE id = :i", i=job_id
    )
    return ("skipped" if status == "succeeded" and skipped == "true" else status), code


@pytest.mark.parametrize(
    ("job_type", "payload", "kw"),
    [
        ("webhook_delivery", {"delivery_id": new_id()}, {}),
        ("webhook_delivery", {"delivery_id": "not an id"}, {}),
        ("automation_action", {"execution_id": new_id()}, {}),
        ("automation_action", {}, {}),
        ("event_dispatch", {"instance_id": (iid := new_id())}, {"instance_id": iid}),
        ("compensation_action", {"index": 0}, {}),
        ("compensation_action", {"index": 0}, {"instance_id": new_id()}),
    ],
)
def test_a_job_naming_a_row_that_never_existed_is_dead(outbound, job_type, payload, kw):
    job_id = _job(job_type, payload, **kw)
    drain_outbound(outbound, limit=5)
    assert _outcome(job_id) == ("dead", "REFERENCE_NOT_FOUND")


@pytest.mark.parametrize(
    ("job_type", "payload", "code", "says"),
    [
        ("subprocess_spawn", {}, "REFERENCE_NOT_FOUND", "activation_id"),
        ("subprocess_spawn", {"activation_id": None}, "REFERENCE_NOT_FOUND", "activation_id"),
        ("subprocess_join", {}, "REFERENCE_NOT_FOUND", "child_id"),
        ("subprocess_join", {"child_id": ["x"]}, "REFERENCE_NOT_FOUND", "child_id"),
        ("trigger_dispatch", {}, "REFERENCE_NOT_FOUND", "activation_id"),
        ("schedule_launch", {}, "REFERENCE_NOT_FOUND", "schedule_id"),
        ("schedule_launch", {"schedule_id": new_id()}, "REFERENCE_NOT_FOUND", "namespace_id"),
        (
            "schedule_launch",
            {"schedule_id": new_id(), "namespace_id": NS, "fire_at": "yesterday"},
            "PERMANENT_ERROR",
            "fire_at",
        ),
        (
            "schedule_launch",
            {"schedule_id": new_id(), "namespace_id": NS, "fire_at": "2026-01-01T00:00:00Z", "skipped": "x"},
            "PERMANENT_ERROR",
            "skipped",
        ),
    ],
)
def test_an_advance_job_with_a_malformed_payload_is_dead_saying_which_field(
    eng, job_type, payload, code, says
):
    """An advance-pool job enqueued by an operator whose payload lacks the id it must name, or holds a
    field of the wrong shape, is dead at once with a code and a message naming the field (it died of a
    ``KeyError`` / ``ValueError`` after its retries, HANDLER_ERROR)."""
    import app.engine.handlers.triggers
    import app.integrations.schedule_jobs
    from app.ledger import handlers
    from tests.engine.helpers import run_jobs

    handlers.register("trigger_dispatch", app.engine.handlers.triggers.trigger_dispatch, replace=True)
    handlers.register("schedule_launch", app.integrations.schedule_jobs.schedule_launch, replace=True)
    job_id = _job(job_type, payload, instance_id=new_id())
    run_jobs(eng, limit=3, queue=JobType(job_type).pool.queue)
    [(attempts, last_error)] = sql("SELECT attempts, last_error FROM workflow_jobs WHERE id = :i", i=job_id)
    assert (_outcome(job_id), attempts) == (("dead", code), 1), last_error
    assert says in last_error and "KeyError" not in last_error


def test_a_row_removed_by_retention_is_a_skip(outbound):
    job_id = _job("webhook_delivery", {"delivery_id": new_id()})
    sql("UPDATE workflow_jobs SET created_at = now() - interval '8 days' WHERE id = :i", i=job_id)
    drain_outbound(outbound, limit=5)
    assert _outcome(job_id) == ("skipped", None)


def test_a_delivery_still_to_run_when_its_subscription_is_deleted_is_skipped(outbound, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")
    who = author("gone", ns_id=NS).principal
    with transaction(outbound) as conn:
        sub = subscriptions.create(
            conn, who, None, {"url": "http://127.0.0.1:1/h", "event_types": ["workflow.started"]}
        )
    start(outbound, NS, publish(outbound, NS, TIMER_DOC), {})
    drain_outbound(outbound, limit=2)  # the dispatch, then a first attempt: refused connection, retrying
    [(delivery, job_id, status)] = sql(
        "SELECT id, job_id, status FROM webhook_deliveries WHERE subscription_id = :s", s=sub["id"]
    )
    assert status == "retrying"
    with transaction(outbound) as conn:
        subscriptions.delete(conn, who, None, sub["id"])
    sql("UPDATE workflow_jobs SET run_at = now() WHERE id = :j", j=job_id)
    drain_outbound(outbound, limit=2)
    assert _outcome(job_id) == ("skipped", None)
    assert sql("SELECT status, last_error FROM webhook_deliveries WHERE id = :d", d=delivery) == [
        ("skipped", "the subscription was deleted")
    ]
