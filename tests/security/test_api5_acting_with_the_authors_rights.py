"""OWASP API5:2023 Broken Function Level Authorization, through work that acts later. A
credential with only ``--integration-access`` got 403 on ``POST /v1/workflows`` and ``/v1/schedules``
but created a rule whose ``start_workflow`` action then started workflows (a ``signal`` action bypassed
``workflows:signal`` the same way), and a rule, schedule or subscription kept acting after its author was
revoked. Now each acts with its author's rights, checked at creation and again every time it acts: it
stops, saying why, and re-enabling (resuming) it with a credential that may adopts it."""

from __future__ import annotations

import uuid

import httpx

from app.auth import Scope
from app.db import transaction
from app.integrations import automation, schedules, subscriptions
from tests.engine.helpers import publish, run_jobs, start
from tests.security.hostile import TIMER_DOC, author, drain_outbound, revoke, sql
from tests.web.wf_ops import Ops

NS = "ns-" + uuid.uuid4().hex[:8]
QUEUE_DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [{"key": "t", "kind": "TASK", "queue": "q-" + uuid.uuid4().hex[:6]}],
}


def _skipped_and_disabled(log: str, column: str, owner: str, owner_id: str) -> None:
    """The one attempt (a row of ``log``) was skipped as its author was revoked, and its owner (a rule, a
    subscription) disabled itself saying so."""
    [(status, why)] = sql(f"SELECT status, last_error FROM {log} WHERE {column} = :i", i=owner_id)
    assert status == "skipped" and "revoked" in why
    [(enabled, reason)] = sql(f"SELECT enabled, disabled_reason FROM {owner} WHERE id = :i", i=owner_id)
    assert enabled is False and "revoked" in reason


def _post_rule(ops: Ops, headers: dict, action: dict) -> httpx.Response:
    return httpx.post(
        ops.ns.url + "/v1/automation-rules",
        json={"name": "r-" + uuid.uuid4().hex[:6], "event_type": "workflow.started", "action": action},
        headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )


def test_an_integration_only_credential_cannot_have_a_rule_start_or_signal(ops):
    integration = author(ops.ns.name, [Scope.INTEGRATIONS_MANAGE])
    def_id = ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]})
    body = {"definition_id": def_id, "version": "v1", "input": {}}
    assert (
        httpx.post(
            ops.ns.url + "/v1/workflows",
            json=body,
            timeout=10,
            headers={**integration.headers, "Idempotency-Key": uuid.uuid4().hex},
        ).status_code
        == 403
    )
    starts = _post_rule(ops, integration.headers, {"kind": "start_workflow", **body})
    assert starts.status_code == 403, starts.text
    assert "workflows:start" in starts.json()["message"]
    signals = _post_rule(
        ops,
        integration.headers,
        {
            "kind": "signal",
            "workflow_id": "$.event.workflow_id",
            "name": "n",
            "payload_version": "v1",
            "target_step_key": "t",
        },
    )
    assert signals.status_code == 403 and "workflows:signal" in signals.json()["message"]
    # with the rights, the same rules are created
    able = author(ops.ns.name, [Scope.INTEGRATIONS_MANAGE, Scope.WORKFLOWS_START, Scope.WORKFLOWS_SIGNAL])
    assert _post_rule(ops, able.headers, {"kind": "start_workflow", **body}).status_code == 201
    assert (
        sql(
            "SELECT count(*) FROM automation_rules r JOIN namespaces n ON n.id = r.namespace_id "
            "WHERE n.name = :n",
            n=ops.ns.name,
        )[0][0]
        == 1
    )


def test_a_version_with_task_queues_needs_tasks_submit_as_a_start_does(ops):
    starter = author(ops.ns.name, [Scope.INTEGRATIONS_MANAGE, Scope.WORKFLOWS_START])
    def_id = ops.define({"steps": [{"key": "t", "kind": "TASK", "queue": "q1"}]})
    refused = _post_rule(
        ops,
        starter.headers,
        {"kind": "start_workflow", "definition_id": def_id, "version": "v1", "input": {}},
    )
    assert refused.status_code == 403 and "tasks:submit" in refused.json()["message"]


def test_a_rule_stops_when_its_author_is_revoked_and_a_live_credential_adopts_it(outbound):
    source, target = publish(outbound, NS, TIMER_DOC), publish(outbound, NS, TIMER_DOC)
    first = author("acting", ns_id=NS)
    with transaction(outbound) as conn:
        rule = automation.create_rule(
            conn,
            first.principal,
            None,
            {
                "name": "follow",
                "event_type": "workflow.started",
                "definition_id": source,
                "action": {"kind": "start_workflow", "definition_id": target, "version": "v1", "input": {}},
            },
        )
    revoke(first.credential_id)
    start(outbound, NS, source, {})
    drain_outbound(outbound)
    assert sql("SELECT count(*) FROM workflow_instances WHERE definition_id = :d", d=target)[0][0] == 0
    _skipped_and_disabled("automation_executions", "rule_id", "automation_rules", rule["id"])
    # enabled again by a live credential that may: it acts with that one's rights
    with transaction(outbound) as conn:
        automation.set_rule_enabled(conn, author("acting", ns_id=NS).principal, None, rule["id"], True)
    start(outbound, NS, source, {})
    drain_outbound(outbound)
    assert sql("SELECT count(*) FROM workflow_instances WHERE definition_id = :d", d=target)[0][0] == 1


def test_a_schedule_whose_author_was_revoked_pauses_and_says_why(outbound):
    import app.integrations.schedule_jobs as schedule_jobs
    from app.ledger import handlers

    handlers.register("schedule_launch", schedule_jobs.schedule_launch, replace=True)
    def_id = publish(outbound, NS, TIMER_DOC)
    owner = author("acting", ns_id=NS)
    body = {
        "name": "s-" + uuid.uuid4().hex[:6],
        "definition_id": def_id,
        "version": "v1",
        "input": {},
        "interval_seconds": 3600,
    }
    with transaction(outbound) as conn:
        sid = schedules.create_schedule(conn, owner.principal, body)["id"]
    revoke(owner.credential_id)
    with transaction(outbound) as conn:
        schedules.launch_now(conn, author("acting", ns_id=NS).principal, sid)
    run_jobs(outbound, queue="workflow-ledger", limit=5)
    [(status, reason, instance)] = sql(
        "SELECT status, reason, instance_id FROM workflow_schedule_fires WHERE schedule_id = :s", s=sid
    )
    assert (status, instance) == ("SKIPPED", None) and "revoked" in reason
    assert sql("SELECT paused FROM workflow_schedules WHERE id = :s", s=sid)[0][0] is True


def test_a_subscription_whose_author_was_revoked_stops_delivering(outbound, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")
    owner = author("acting", ns_id=NS)
    with transaction(outbound) as conn:
        sub = subscriptions.create(
            conn,
            owner.principal,
            None,
            {"url": "http://127.0.0.1:1/hook", "event_types": ["workflow.started"]},
        )
    revoke(owner.credential_id)
    start(outbound, NS, publish(outbound, NS, TIMER_DOC), {})
    drain_outbound(outbound, limit=3)
    _skipped_and_disabled("webhook_deliveries", "subscription_id", "event_subscriptions", sub["id"])
