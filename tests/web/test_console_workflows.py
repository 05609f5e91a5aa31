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
from tests.web.wf_ops import ops, unknown_outcome_job  # noqa: F401


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
