"""Fan-out, skips and automation with the outbound jobs run inline (claim -> handler -> settle, as the
pool does): one delivery per (event, subscription) however often the dispatch runs; a subscription
disabled or deleted at delivery time gives a ``skipped`` attempt; auto-disable after consecutive
failures; an automation rule starts exactly one workflow per event under retries and replays."""

from __future__ import annotations

import pytest
from sqlalchemy import text

import app.integrations.actions  # registers automation_action
import app.integrations.webhooks  # noqa: F401 - registers event_dispatch, webhook_delivery
from app.auth import Principal
from app.db import transaction
from app.ids import new_id
from app.integrations import automation, subscriptions
from app.integrations.patterns import conditions_hold, type_matches
from app.ledger import handlers
from tests.engine.helpers import SIGNAL_DOC, author, claim_task, complete_task, publish, run_jobs, start

NS = "ns-" + new_id()[:8]
OUT = "workflow-ledger-outbound"
DOC = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 3600,
    "steps": [{"key": "work", "kind": "TASK", "queue": "int-q"}],
}


@pytest.fixture
def out(eng, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")
    from app.integrations import actions, webhooks

    for name, fn in (
        ("event_dispatch", webhooks.event_dispatch),
        ("webhook_delivery", webhooks.webhook_delivery),
        ("automation_action", actions.automation_action),
    ):
        handlers.register(name, fn, replace=True)
    return eng


def _principal() -> Principal:
    return author(NS)


def _sub(eng, url: str, types: list[str]) -> dict:
    with transaction(eng) as conn:
        return subscriptions.create(conn, _principal(), None, {"url": url, "event_types": types})


def _q(eng, sql: str, **kw):
    with eng.begin() as conn:
        res = conn.execute(text(sql), kw)
        return res.all() if res.returns_rows else []


def test_one_delivery_per_event_and_subscription_even_when_dispatch_runs_again(out) -> None:
    # a closed port: deliveries fail before sending and stay retryable (nothing listens on 127.0.0.1:1)
    sub = _sub(out, "http://127.0.0.1:1/hook", ["workflow.*", "task.*"])
    iid = start(out, NS, publish(out, NS, DOC), {})["id"]
    complete_task(out, NS, claim_task(out, NS, "int-q"), {"ok": True})
    ran = run_jobs(out, queue=OUT, limit=2)
    assert [t for t, _ in ran] == ["event_dispatch", "event_dispatch"]
    wanted = _q(
        out,
        "SELECT id FROM workflow_events WHERE instance_id = :i AND (type LIKE 'workflow.%' "
        "OR type LIKE 'task.%')",
        i=iid,
    )
    pairs = _q(out, "SELECT event_id FROM webhook_deliveries WHERE subscription_id = :s", s=sub["id"])
    assert sorted(p[0] for p in pairs) == sorted(w[0] for w in wanted)
    # the dispatch jobs run again (a replay, or a worker killed before settling): nothing new
    _q(out, "UPDATE workflow_jobs SET status = 'pending', run_at = now() WHERE type = 'event_dispatch'")
    with transaction(out) as conn:  # even without the stored receipt, the unique pair decides
        conn.execute(text("DELETE FROM workflow_job_effects"))
    run_jobs(out, queue=OUT, limit=2)
    assert len(_q(out, "SELECT 1 FROM webhook_deliveries")) == len(wanted)
    assert len(_q(out, "SELECT 1 FROM workflow_jobs WHERE type = 'webhook_delivery'")) == len(wanted)


def test_disabled_or_deleted_subscription_at_delivery_time_is_skipped(out) -> None:
    kept = _sub(out, "http://127.0.0.1:1/a", ["workflow.started"])
    gone = _sub(out, "http://127.0.0.1:1/b", ["workflow.started"])
    start(out, NS, publish(out, NS, DOC), {})
    run_jobs(out, queue=OUT, limit=1)  # the dispatch only
    with transaction(out) as conn:
        subscriptions.set_enabled(conn, _principal(), None, kept["id"], False)
        subscriptions.delete(conn, _principal(), None, gone["id"])
    ran = run_jobs(out, queue=OUT, limit=5)
    assert sorted(k for _, k in ran) == ["skipped", "skipped"]
    attempts = _q(
        out,
        "SELECT e.status FROM workflow_job_executions e JOIN workflow_jobs j ON j.id = e.job_id "
        "WHERE j.type = 'webhook_delivery'",
    )
    assert [a[0] for a in attempts] == ["skipped", "skipped"]
    [(status,)] = _q(out, "SELECT status FROM webhook_deliveries WHERE subscription_id = :s", s=kept["id"])
    assert status == "skipped"


def test_consecutive_failures_disable_the_subscription_and_say_why(out, monkeypatch) -> None:
    monkeypatch.setenv("LEDGERFLOW_WEBHOOK_DISABLE_AFTER", "3")
    sub = _sub(out, "http://127.0.0.1:1/down", ["workflow.*", "task.*", "step.*"])
    start(out, NS, publish(out, NS, DOC), {})
    run_jobs(out, queue=OUT, limit=1)
    run_jobs(out, queue=OUT, limit=3)  # three failed attempts (connection refused before sending)
    with out.connect() as conn:
        view = subscriptions.get(conn, NS, sub["id"])
    assert view["enabled"] is False and "3 consecutive failed deliveries" in view["disabled_reason"]
    assert "127.0.0.1:1" in view["disabled_reason"]
    with transaction(out) as conn:
        again = subscriptions.set_enabled(conn, _principal(), None, sub["id"], True)
    assert again["enabled"] and again["consecutive_failures"] == 0 and again["disabled_reason"] is None


def test_a_rule_starts_exactly_one_workflow_per_event_under_retries(out) -> None:
    parent_def, child_def = publish(out, NS, DOC), publish(out, NS, DOC)
    with transaction(out) as conn:
        rule = automation.create_rule(
            conn,
            _principal(),
            None,
            {
                "name": "follow-up",
                "event_type": "workflow.succeeded",
                "definition_id": parent_def,
                "conditions": [{"path": "data.instance.state", "op": "eq", "value": "SUCCEEDED"}],
                "action": {
                    "kind": "start_workflow",
                    "definition_id": child_def,
                    "version": "v1",
                    "input": {"parent": "$.event.workflow_id", "missing": "$.event.data.nope"},
                    "business_key": "$.event.id",
                },
            },
        )
    parent = start(out, NS, parent_def, {})["id"]
    complete_task(out, NS, claim_task(out, NS, "int-q"), {"ok": True})
    run_jobs(out, queue=OUT, limit=10)

    def children() -> list:
        return _q(out, "SELECT id, input FROM workflow_instances WHERE definition_id = :d", d=child_def)

    [(child_id, child_input)] = children()
    assert child_input == {"parent": parent}
    # every retry / replay of the action and of the dispatch: still one child
    for _ in range(2):
        _q(
            out,
            "UPDATE workflow_jobs SET status = 'pending', run_at = now() "
            "WHERE type IN ('automation_action', 'event_dispatch')",
        )
        run_jobs(out, queue=OUT, limit=20)
    assert len(children()) == 1
    [(status, result)] = _q(
        out, "SELECT status, result FROM automation_executions WHERE rule_id = :r", r=rule["id"]
    )
    assert status == "succeeded" and result == {"workflow_id": child_id}
    with out.connect() as conn:
        log = automation.executions(conn, NS, rule["id"], 10, None)
    assert [x["status"] for x in log["items"]] == ["succeeded"]


def test_patterns_and_conditions() -> None:
    assert type_matches(["workflow.*"], "workflow.succeeded") and not type_matches(
        ["workflow.*"], "step.failed"
    )
    assert type_matches(["*"], "signal.consumed") and type_matches(["task.created"], "task.created")
    doc = {"data": {"instance": {"state": "FAILED", "n": 2}}}
    assert conditions_hold([{"path": "data.instance.n", "op": "eq", "value": 2.0}], doc)
    assert conditions_hold(
        [{"path": "data.instance.state", "op": "in", "value": ["FAILED", "CANCELLED"]}], doc
    )
    assert not conditions_hold([{"path": "data.nope", "op": "eq", "value": 1}], doc)
    assert conditions_hold([{"path": "data.nope", "op": "exists", "value": False}], doc)


def test_pages_of_subscriptions_and_deliveries(out) -> None:
    subs = [_sub(out, f"http://127.0.0.1:1/{i}", ["workflow.started", "task.created"]) for i in range(3)]
    start(out, NS, publish(out, NS, DOC), {})
    run_jobs(out, queue=OUT, limit=1)
    with out.connect() as conn:
        first = subscriptions.list_page(conn, NS, 2, None)
        second = subscriptions.list_page(conn, NS, 2, first["next_cursor"])
        log1 = subscriptions.deliveries(conn, NS, subs[0]["id"], 1, None)
        log2 = subscriptions.deliveries(conn, NS, subs[0]["id"], 1, log1["next_cursor"])
    assert [s["id"] for s in first["items"] + second["items"]] == [s["id"] for s in subs]
    assert "next_cursor" not in second
    assert {d["event_type"] for d in log1["items"] + log2["items"]} == {"workflow.started", "task.created"}
    assert "next_cursor" not in log2


def test_http_action_is_signed_and_update_rechecks_the_url(out) -> None:
    from ledgerflow.client import verify_webhook
    from tests.web.webhook_receiver import start_receiver

    receiver = start_receiver()
    try:
        with transaction(out) as conn:
            rule = automation.create_rule(
                conn,
                _principal(),
                None,
                {
                    "name": "notify",
                    "event_type": "workflow.started",
                    "action": {"kind": "http", "url": receiver.url("/ok")},
                },
            )
        start(out, NS, publish(out, NS, DOC), {})
        run_jobs(out, queue=OUT, limit=5)
        [got] = receiver.received("/ok")
        event = verify_webhook(rule["secret"], got.body, got.headers)
        assert event["type"] == "workflow.started"
        [(status,)] = _q(out, "SELECT status FROM automation_executions WHERE rule_id = :r", r=rule["id"])
        assert status == "succeeded"
    finally:
        receiver.close()
    sub = _sub(out, "http://127.0.0.1:1/x", ["*"])
    with pytest.raises(Exception, match="private|loopback|resolves"), transaction(out) as conn:
        subscriptions.update(conn, _principal(), None, sub["id"], {"url": "http://10.0.0.5/h"})
    with transaction(out) as conn:
        changed = subscriptions.update(conn, _principal(), None, sub["id"], {"event_types": ["step.*"]})
    assert changed["event_types"] == ["step.*"] and changed["revision"] == 2


def test_a_signal_action_sends_one_signal_under_retries(out) -> None:
    waiter = start(out, NS, publish(out, NS, SIGNAL_DOC), {"order": "o-1"})["id"]
    source_def = publish(out, NS, DOC)
    with transaction(out) as conn:
        automation.create_rule(
            conn,
            _principal(),
            None,
            {
                "name": "tell",
                "event_type": "workflow.succeeded",
                "definition_id": source_def,
                "action": {
                    "kind": "signal",
                    "workflow_id": waiter,
                    "name": "done",
                    "payload_version": "v1",
                    "target_step_key": "receipt",
                    "correlation_key": "o-1",
                    "payload": {"from": "$.event.workflow_id"},
                },
            },
        )
    source = start(out, NS, source_def, {})["id"]
    complete_task(out, NS, claim_task(out, NS, "int-q"), {"ok": True})
    run_jobs(out, queue=OUT, limit=10)
    _q(out, "UPDATE workflow_jobs SET status = 'pending', run_at = now() WHERE type = 'automation_action'")
    run_jobs(out, queue=OUT, limit=10)
    sigs = _q(out, "SELECT state, payload FROM workflow_signals WHERE instance_id = :i", i=waiter)
    assert sigs == [("CONSUMED", {"from": source})]


def test_429_waits_for_retry_after_a_4xx_is_dead_and_redeliver_since_retries_it(out) -> None:
    from datetime import timedelta

    from app.db_time import db_now
    from app.ledger.job_actions import Actor
    from tests.web.webhook_receiver import start_receiver

    receiver = start_receiver()
    try:
        busy = _sub(out, receiver.url("/busy"), ["workflow.started"])
        gone = _sub(out, receiver.url("/gone"), ["workflow.started"])
        start(out, NS, publish(out, NS, DOC), {})
        run_jobs(out, queue=OUT, limit=3)  # dispatch, then one attempt each
        [(wait_s,)] = _q(
            out,
            "SELECT extract(epoch FROM j.run_at - now()) FROM webhook_deliveries d "
            "JOIN workflow_jobs j ON j.id = d.job_id WHERE d.subscription_id = :s",
            s=busy["id"],
        )
        assert 100 < float(wait_s) <= 120  # Retry-After: 120 wins over the 30 s backoff
        with out.connect() as conn:
            [dead] = subscriptions.deliveries(conn, NS, gone["id"], 10, None)["items"]
        assert (dead["status"], dead["response_code"], dead["job_status"]) == ("dead", 410, "dead")
        with transaction(out) as conn:
            since = db_now(conn) - timedelta(minutes=5)
            done = subscriptions.redeliver_since(conn, Actor(_principal(), None), gone["id"], since)
        assert done["submitted"] == 1
        [(job_status,)] = _q(
            out,
            "SELECT j.status FROM webhook_deliveries d JOIN workflow_jobs j ON j.id = d.job_id "
            "WHERE d.subscription_id = :s",
            s=gone["id"],
        )
        assert job_status == "pending"
    finally:
        receiver.close()


def test_a_delivery_whose_marker_commit_was_lost_retries_and_counts_no_failure(out, monkeypatch) -> None:
    """PostgreSQL lost while the delivery's effect marker committed (a failover): the request never left, so
    the delivery is retried (not held for confirmation), and neither the delivery row nor the subscription
    counts an attempt of the receiver's; the retry delivers once."""
    from app.ledger import transitions
    from tests.ledger_helpers import InDoubtMarker
    from tests.web.webhook_receiver import start_receiver

    receiver = start_receiver()
    try:
        sub = _sub(out, receiver.url("/ok"), ["workflow.started"])
        start(out, NS, publish(out, NS, DOC), {})
        monkeypatch.setattr(
            transitions, "set_effect_marker", InDoubtMarker(transitions.set_effect_marker, False)
        )
        ran = run_jobs(out, queue=OUT, limit=2)  # the dispatch, then the delivery's attempt
        assert [t for t, _ in ran] == ["event_dispatch", "webhook_delivery"]
        assert ran[1][1].startswith("retry: ") and "not sent" in ran[1][1]
        [(status, attempts, job_status, marker, failures)] = _q(
            out,
            "SELECT d.status, d.attempts, j.status, j.effect_marker, s.consecutive_failures "
            "FROM webhook_deliveries d JOIN workflow_jobs j ON j.id = d.job_id "
            "JOIN event_subscriptions s ON s.id = d.subscription_id WHERE d.subscription_id = :s",
            s=sub["id"],
        )
        assert (status, attempts, job_status, marker, failures) == ("pending", 0, "pending", None, 0)
        assert receiver.received() == []
        _q(out, "UPDATE workflow_jobs SET run_at = now() WHERE type = 'webhook_delivery'")
        assert [k for _, k in run_jobs(out, queue=OUT, limit=2)] == ["succeeded"]
        assert len(receiver.received("/ok")) == 1
    finally:
        receiver.close()
