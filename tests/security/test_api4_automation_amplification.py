"""OWASP API4:2023 Unrestricted Resource Consumption, through automation rules: a rule on
``workflow.started`` of D whose action starts D fed itself (7, 87, 160, 232 instances after 2, 4, 6, 8 s)
until it was disabled. Now an instance a rule started carries its chain of rules, a rule never fires on
its own work (directly or through other rules), a chain stops at a fixed depth, and a rule past its rate
budget disables itself saying why. The outbound jobs run inline until none is due: on the code before
the fix these runs never drained (the loop kept making work)."""

from __future__ import annotations

import uuid

import pytest

from app.db import transaction
from app.integrations import automation
from tests.engine.helpers import publish, start
from tests.security.hostile import TIMER_DOC, author, drain_outbound, due_outbound, sql

pytestmark = pytest.mark.usefixtures("outbound")
NS = "ns-" + uuid.uuid4().hex[:8]


def _rule(eng, event_type: str, action: dict, **kw) -> dict:
    with transaction(eng) as conn:
        return automation.create_rule(
            conn,
            author("amplify", ns_id=NS).principal,
            None,
            {"name": "r-" + uuid.uuid4().hex[:6], "event_type": event_type, "action": action, **kw},
        )


def _starts(def_id: str) -> dict:
    return {"kind": "start_workflow", "definition_id": def_id, "version": "v1", "input": {}}


def _instances(def_id: str) -> int:
    return sql("SELECT count(*) FROM workflow_instances WHERE definition_id = :d", d=def_id)[0][0]


def _run_until_quiet(eng, budget: int = 150) -> None:
    drain_outbound(eng, limit=budget)
    assert due_outbound() == 0, "automation kept making work: the outbound queue never drained"


def test_a_rule_that_starts_its_own_definition_fires_once(outbound):
    d = publish(outbound, NS, TIMER_DOC)
    _rule(outbound, "workflow.started", _starts(d), definition_id=d)
    start(outbound, NS, d, {})
    _run_until_quiet(outbound)
    assert _instances(d) == 2  # the one started by hand, and the rule's start of it; not the rule's own
    [(chain,)] = sql(
        "SELECT automation_chain FROM workflow_instances WHERE definition_id = :d "
        "AND automation_chain IS NOT NULL",
        d=d,
    )
    assert len(chain) == 1


def test_two_rules_playing_ping_pong_stop(outbound):
    d1, d2 = publish(outbound, NS, TIMER_DOC), publish(outbound, NS, TIMER_DOC)
    _rule(outbound, "workflow.started", _starts(d2), definition_id=d1)
    _rule(outbound, "workflow.started", _starts(d1), definition_id=d2)
    start(outbound, NS, d1, {})
    _run_until_quiet(outbound)
    # d1 by hand -> d2 (rule A) -> d1 (rule B, chain A, B) -> A is in the chain: no more
    assert (_instances(d1), _instances(d2)) == (2, 1)


def test_wildcard_rules_fire_on_each_others_work_once_and_stop(outbound):
    d = publish(outbound, NS, TIMER_DOC)
    _rule(outbound, "*", _starts(d), definition_id=d)
    _rule(outbound, "*", _starts(d), definition_id=d)
    start(outbound, NS, d, {})
    _run_until_quiet(outbound)
    events = sql(
        "SELECT count(*) FROM workflow_events WHERE instance_id IN (SELECT id FROM workflow_instances "
        "WHERE definition_id = :d AND automation_chain IS NULL)",
        d=d,
    )[0][0]
    # by hand: 1; each rule on each of its events: 2 * events; the other rule on each of theirs: 2 * events^2
    assert _instances(d) == 1 + 2 * events + 2 * events * events
    chains = sql(
        "SELECT DISTINCT cardinality(automation_chain) FROM workflow_instances WHERE definition_id = :d "
        "AND automation_chain IS NOT NULL",
        d=d,
    )
    assert sorted(c[0] for c in chains) == [1, 2]


def test_a_chain_of_rules_stops_at_the_documented_depth(outbound):
    defs = [publish(outbound, NS, TIMER_DOC) for _ in range(5)]
    rules = [
        _rule(outbound, "workflow.started", _starts(b), definition_id=a)
        for a, b in zip(defs, defs[1:], strict=False)
    ]
    start(outbound, NS, defs[0], {})
    _run_until_quiet(outbound)
    assert [_instances(d) for d in defs] == [1, 1, 1, 1, 0]  # the documented depth: 3 rule starts in a row
    assert automation.MAX_CHAIN_DEPTH == 3
    [(status, why)] = sql(
        "SELECT status, last_error FROM automation_executions WHERE rule_id = :r", r=rules[-1]["id"]
    )
    assert status == "skipped" and "chain of 3 automation rules" in why


def test_a_rule_past_its_rate_budget_disables_itself_and_says_why(outbound, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_RULE_RATE_PER_MINUTE", "3")
    source, target = publish(outbound, NS, TIMER_DOC), publish(outbound, NS, TIMER_DOC)
    rule = _rule(outbound, "workflow.started", _starts(target), definition_id=source)
    for _ in range(5):
        start(outbound, NS, source, {})
    _run_until_quiet(outbound)
    assert _instances(target) == 3
    rows = sql(
        "SELECT status, last_error FROM automation_executions WHERE rule_id = :r ORDER BY status",
        r=rule["id"],
    )
    # three within the budget ran (also those still queued when it disabled itself); the next event was
    # recorded skipped with the reason; once disabled, the rule sees no more events
    assert [r[0] for r in rows] == ["skipped", "succeeded", "succeeded", "succeeded"]
    assert "rate budget" in rows[0][1]
    [(enabled, reason)] = sql(
        "SELECT enabled, disabled_reason FROM automation_rules WHERE id = :r", r=rule["id"]
    )
    assert enabled is False and "rate budget" in reason


SIGNAL_DOC = {
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
        {"key": "rest", "kind": "TIMER", "after": ["receipt"], "delay_seconds": 3600},
    ],
}


def test_a_rule_does_not_answer_its_own_signals(outbound):
    from app.engine import signals

    d = publish(outbound, NS, SIGNAL_DOC)
    _rule(
        outbound,
        "signal.accepted",
        {
            "kind": "signal",
            "workflow_id": "$.event.workflow_id",
            "name": "ping",
            "payload_version": "v1",
            "target_step_key": "receipt",
            "correlation_key": "$.event.id",
            "payload": {},
        },
        definition_id=d,
    )
    wid = start(outbound, NS, d, {})["id"]
    with transaction(outbound) as conn:
        signals.send(
            conn,
            wid,
            "someone",
            {
                "name": "ping",
                "payload_version": "v1",
                "target_step_key": "receipt",
                "target_activation_sequence": 1,
                "correlation_key": "first",
                "payload": {},
                "reason": "probe",
                "evidence_ref": None,
            },
        )
    _run_until_quiet(outbound)
    # the person's signal, and the rule's answer to it; the rule does not answer its own signal
    assert sql("SELECT count(*) FROM workflow_signals WHERE instance_id = :i", i=wid)[0][0] == 2
