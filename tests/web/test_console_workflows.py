"""Console workflow actions through the Flask test client on a live engine: NEEDS_REVIEW resolution
(SUCCEED_STEP with a JSON output, the API's audit row), a stale control revision (409, nothing
changed), and the human-task page's claim / fail through the task protocol."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.auth import ALL_SCOPES, create_credential
from app.db import get_engine, transaction
from tests.web.test_console import _csrf, login
from tests.web.test_workflow_history_recovery_audit import DOC
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ENGINE_WORKER_ENV, ops, unknown_outcome_job, until  # noqa: F401


@pytest.fixture
def console(app, ops):  # noqa: F811
    with transaction() as conn:
        tok = create_credential(conn, namespace=ops.ns.name, name="console", scopes=sorted(ALL_SCOPES)).token
    c = app.test_client()
    login(c, tok)
    return c


def test_resolve_needs_review_with_succeed_step(console, ops):  # noqa: F811
    wid = ops.start(ops.define(DOC), {"order": "A-1"})
    unknown_outcome_job(wid, "receipt")
    ops.client.control_workflow(wid, "PAUSE", 1, "freeze")
    page = console.get(f"/console/workflows/{wid}")
    assert page.status_code == 200 and b"Resolve a step in review" in page.data
    form = {
        "action": "SUCCEED_STEP",
        "step_key": "receipt",
        "output": '{"amount": 12.50}',
        "reason": "it arrived",
        "evidence_ref": "ticket:9",
        "csrf_token": _csrf(page.data),
    }
    bad = console.post(f"/console/workflows/{wid}/recovery", data={**form, "output": "{nope"})
    assert bad.status_code == 400 and b"not valid JSON" in bad.data
    r = console.post(f"/console/workflows/{wid}/recovery", data={**form, "confirm": "yes"})
    assert r.status_code == 302
    step = ops.client.get_workflow_step(wid, "receipt")
    assert step.step.state == "SUCCEEDED" and str(step.output["amount"]) == "12.50"
    with get_engine().connect() as conn:
        a = conn.execute(
            text(
                "SELECT action, reason, evidence_ref FROM operation_audit WHERE workflow_id = :w AND action LIKE "
                "'workflow.recovery.%'"
            ),
            {"w": wid},
        ).one()
    assert (a.action, a.reason, a.evidence_ref) == (
        "workflow.recovery.succeed_step",
        "it arrived",
        "ticket:9",
    )


def test_stale_control_revision_is_a_409_and_changes_nothing(console, ops):  # noqa: F811
    wid = ops.start(ops.define(DOC), {"order": "A-2"})
    page = console.get(f"/console/workflows/{wid}")
    ops.client.control_workflow(wid, "PAUSE", 1, "someone else")
    r = console.post(
        f"/console/workflows/{wid}/control",
        data={
            "operation": "CANCEL",
            "expected_control_revision": "1",
            "reason": "old page",
            "confirm": "yes",
            "csrf_token": _csrf(page.data),
        },
    )
    assert r.status_code == 409
    inst = ops.client.get_workflow(wid)
    assert inst.paused and inst.state != "CANCELLED" and inst.control_revision == 2


def test_claim_then_fail_a_task_from_the_task_page(console, ops):  # noqa: F811
    wid = ops.start(ops.define({"steps": [{"key": "t", "kind": "TASK", "queue": "q1", "after": []}]}))
    page = console.get("/console/tasks")
    assert b"Claim next on q1" in page.data
    csrf = _csrf(page.data)
    assert console.post("/console/tasks/claim", data={"queue": "q1", "csrf_token": csrf}).status_code == 302
    task_id = ops.client.get_workflow_steps(wid).steps[0].task_id
    page = console.get("/console/tasks")
    assert f"/console/tasks/{task_id}/fail".encode() in page.data  # this session holds it
    r = console.post(f"/console/tasks/{task_id}/fail", data={"message": "cannot approve", "csrf_token": csrf})
    assert r.status_code == 302
    assert ops.client.get_workflow(wid).state == "FAILED"
    again = console.post(f"/console/tasks/{task_id}/complete", data={"output": "{}", "csrf_token": csrf})
    assert again.status_code == 404  # no longer held by this session


SAGA = {
    "steps": [
        {"key": "book", "kind": "TASK", "queue": "q1", "after": [], "compensation": {"queue": "undo"}},
        {"key": "flight", "kind": "TASK", "queue": "q1", "after": ["book"]},
    ]
}


def test_compensation_failure_is_the_review_cause(console, ops, spawn_worker):  # noqa: F811
    """Issue 47, point 9: a workflow in NEEDS_REVIEW because its compensation failed showed the step failure
    that began the stop as its cause ("TASK_FAILED — from step flight"), and the undo's error nowhere but in
    a folded audit entry."""
    spawn_worker("outbound", env=ENGINE_WORKER_ENV)  # issues the compensation task
    wid = ops.start(ops.define(SAGA))
    [t] = ops.worker.claim_tasks(["q1"])
    ops.worker.complete_task(t.id, t.epoch, {"booked": True})
    [t] = ops.worker.claim_tasks(["q1"])
    ops.worker.fail_task(t.id, t.epoch, "no seats left", retryable=False)
    undo = until(lambda: ops.worker.claim_tasks(["undo"]))[0]
    ops.worker.fail_task(undo.id, undo.epoch, "refund service down", retryable=False)
    until(lambda: ops.client.get_workflow(wid).state == "NEEDS_REVIEW")
    page = console.get(f"/console/workflows/{wid}").get_data(as_text=True)
    why = page.split('aria-label="Why"')[1].split("</section>")[0]
    assert "Needs review: COMPENSATION_FAILED" in why and f"/console/workflows/{wid}/steps/book" in why
    assert "refund service down" in why  # the undo's own error
    assert 'id="failure-origin"' in why and "TASK_FAILED" in why and "from step" in why and "flight" in why
    step = console.get(f"/console/workflows/{wid}/steps/book").get_data(as_text=True)
    section = step.split('id="compensation"')[1]
    assert "FAILED" in section and "refund service down" in section and undo.id[:8] in section
