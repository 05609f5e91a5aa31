"""The operator commands of ``app.engine.operator_commands`` called directly (no Flask, no request context), as
the CLI calls them: each runs the command, writes its audit row with the given principal and request id,
and returns the view the API answers with; an instance outside the principal's namespace or queue scope
is not found (W-API-1)."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, text

import schemas
from app.auth import Principal
from app.db import transaction
from app.engine import operator_commands
from app.errors import NotFound, StateConflict
from app.ids import new_id
from schemas.workflow_control import ControlRequest, SignalRequest
from schemas.workflow_history import RecoveryRequest
from tests.engine.helpers import SIGNAL_DOC, publish, start
from tests.web.wf_ops import unknown_outcome_job

NS = "ns-" + new_id()[:8]


def _principal(namespace_id: str = NS, queues: tuple[str, ...] | None = None) -> Principal:
    return Principal("cred-ops", "operator", namespace_id, "shop", frozenset(), queues)


def _audit(eng: Engine, request_id: str) -> list[Any]:
    with eng.connect() as conn:
        return conn.execute(
            text(
                "SELECT action, actor_id, target_type, target_id, workflow_id, reason, evidence_ref, before, "
                "after FROM operation_audit WHERE request_id = :r ORDER BY created_at, id"
            ),
            {"r": request_id},
        ).all()


def _control(
    eng: Engine, iid: str, operation: str, revision: int, rid: str, principal: Principal | None = None
) -> dict:
    req = schemas.load(
        ControlRequest(),
        {
            "operation": operation,
            "expected_control_revision": str(revision),
            "reason": f"{operation} by hand",
        },
    )
    with transaction(eng) as conn:
        return operator_commands.control_workflow(conn, principal or _principal(), iid, req, request_id=rid)


def test_control_runs_audits_and_answers_the_instance_view(eng: Engine) -> None:
    iid = start(eng, NS, publish(eng, NS, SIGNAL_DOC), {"order": "A-1"})["id"]
    view = _control(eng, iid, "PAUSE", 1, "req-pause")
    assert view["id"] == iid and view["paused"] is True and view["control_revision"] == "2"
    [a] = _audit(eng, "req-pause")
    assert (a.action, a.actor_id, a.target_type, a.target_id, a.workflow_id, a.reason) == (
        "workflow.control.pause",
        "cred-ops",
        "workflow",
        iid,
        iid,
        "PAUSE by hand",
    )
    assert a.before["paused"] is False and a.after == view
    with pytest.raises(StateConflict):  # a decision on a stale control revision
        _control(eng, iid, "RESUME", 1, "req-stale")
    assert _audit(eng, "req-stale") == []  # nothing written for a refused command


def test_an_instance_outside_the_principals_scope_is_not_found(eng: Engine) -> None:
    iid = start(eng, NS, publish(eng, NS, SIGNAL_DOC), {"order": "A-1"})["id"]
    with pytest.raises(NotFound):
        _control(eng, iid, "PAUSE", 1, "req-other-ns", _principal("ns-elsewhere"))
    with pytest.raises(NotFound):
        _control(eng, "not-an-id", "PAUSE", 1, "req-bad-id")
    with transaction(eng) as conn:
        assert (
            operator_commands.visible_instance(conn, _principal(queues=("q1",)), iid)["id"] == iid
        )  # no queues
    assert _audit(eng, "req-other-ns") == [] and _audit(eng, "req-bad-id") == []


def test_send_signal_audits_the_acceptance_on_the_signal(eng: Engine) -> None:
    iid = start(eng, NS, publish(eng, NS, SIGNAL_DOC), {"order": "A-1"})["id"]
    req = schemas.load(
        SignalRequest(),
        {
            "name": "done",
            "payload_version": "v1",
            "target_step_key": "receipt",
            "target_activation_sequence": 1,
            "correlation_key": "A-1",
            "payload": {"ok": True},
            "reason": "receipt seen",
            "evidence_ref": "t:1",
        },
    )
    with transaction(eng) as conn:
        sig = operator_commands.send_signal(conn, _principal(), iid, req, request_id="req-signal")
    assert sig["state"] == "CONSUMED" and sig["name"] == "done"
    accepted = [a for a in _audit(eng, "req-signal") if a.action == "signal.accepted"]
    assert [(a.target_type, a.target_id, a.reason, a.evidence_ref) for a in accepted] == [
        ("signal", sig["id"], "receipt seen", "t:1")
    ]
    assert accepted[0].after["id"] == sig["id"] and accepted[0].after["state"] == "PENDING"


def _recover(eng: Engine, iid: str, body: dict, rid: str) -> dict:
    req = schemas.load(RecoveryRequest(), body)
    with transaction(eng) as conn:
        return operator_commands.recover_workflow(conn, _principal(), iid, req, request_id=rid)


def test_recover_a_step_in_review_and_resolve_an_instance_in_review(eng: Engine) -> None:
    iid = start(eng, NS, publish(eng, NS, SIGNAL_DOC), {"order": "A-1"})["id"]
    unknown_outcome_job(iid, "receipt")
    assert _control(eng, iid, "PAUSE", 1, "req-p1")["state"] == "NEEDS_REVIEW"
    out = _recover(
        eng, iid, {"action": "RETRY_STEP", "step_key": "receipt", "reason": "nothing arrived"}, "req-retry"
    )
    assert set(out) == {"instance", "step", "operation_id"}
    assert out["step"]["activation_sequence"] == 2 and out["instance"]["state"] == "WAITING"
    [a] = _audit(eng, "req-retry")
    assert (a.action, a.target_type, a.target_id, a.reason) == (
        "workflow.recovery.retry_step",
        "step",
        "receipt",
        "nothing arrived",
    )
    assert a.after == {"instance": out["instance"], "step": out["step"]}

    other = start(eng, NS, publish(eng, NS, SIGNAL_DOC), {"order": "B-2"})["id"]
    unknown_outcome_job(other, None)  # an unknown outcome without a step: the instance is in review
    _control(eng, other, "PAUSE", 1, "req-p2")
    body = {
        "action": "RESOLVE_INSTANCE",
        "resolution": "CONTINUE",
        "reason": "not sent",
        "evidence_ref": "t:9",
    }
    out = _recover(eng, other, body, "req-resolve")
    assert set(out) == {"instance", "resolution", "operation_id"}
    assert out["resolution"]["review"] == "UNKNOWN_OUTCOME"
    [a] = _audit(eng, "req-resolve")
    assert (a.action, a.target_type, a.target_id, a.evidence_ref) == (
        "workflow.recovery.resolve_instance",
        "workflow",
        other,
        "t:9",
    )
    assert a.before["state"] == "NEEDS_REVIEW" and a.after["resolution"] == out["resolution"]


def test_engine_health_actions_are_audited_with_their_request_id(eng: Engine) -> None:
    platform = Principal("cred-ops", "operator", NS, "shop", frozenset(), None, platform=True)
    ran = operator_commands.drain_now(platform, "routine check", request_id="req-drain")
    assert ran["ran"] is True and ran["reclaimed_to_pending"] == 0 and ran["reclaimed_ids"] == []
    [a] = _audit(eng, "req-drain")
    assert (a.action, a.target_type, a.target_id, a.reason) == (
        "engine.drain",
        "engine",
        "drain",
        "routine check",
    )
    assert a.before == {"stuck": 0, "stuck_ids": [], "due_by_queue": {}} and a.after == ran
    assert operator_commands.republish_hints(platform, "nudge", request_id="req-hints") == {"published": {}}
    [a] = _audit(eng, "req-hints")
    assert (a.action, a.target_id, a.before, a.after) == (
        "engine.republish_hints",
        "republish_hints",
        {"due_by_queue": {}},
        {"published": {}},
    )
    with transaction(eng) as conn, pytest.raises(NotFound):
        operator_commands.reclaim_node(conn, platform, "node-unknown", "gone", request_id="req-reclaim")
    with eng.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_worker_nodes (node_id, hostname, pid, roles, pools, slot_capacity, "
                "slots_in_use, status, heartbeat_at) VALUES ('node-live', 'h', 1, '{worker}', "
                "'{workflow-ledger}', 4, 0, 'active', now())"
            )
        )
    with transaction(eng) as conn, pytest.raises(StateConflict):
        operator_commands.reclaim_node(conn, platform, "node-live", "gone", request_id="req-reclaim")
    assert _audit(eng, "req-reclaim") == []


def test_a_paused_instance_shows_in_its_events_from_compact_batch_rows(eng: Engine) -> None:
    """A batch row stores the instance's state alone, or ``{"state", "paused": true}`` while it is paused
    (migration 0031); every event body shows the whole summary with the paused flag of its transaction."""
    iid = start(eng, NS, publish(eng, NS, SIGNAL_DOC), {"order": "A-2"})["id"]
    _control(eng, iid, "PAUSE", 1, "req-pause-2")
    _control(eng, iid, "RESUME", 2, "req-resume-2")
    with eng.connect() as conn:
        rows = (
            conn.execute(
                text("SELECT instance FROM workflow_event_batches WHERE instance_id = :i ORDER BY last_seq"),
                {"i": iid},
            )
            .scalars()
            .all()
        )
        bodies = {
            r.type: r.body
            for r in conn.execute(
                text("SELECT type, body FROM workflow_events WHERE instance_id = :i"), {"i": iid}
            )
        }
    assert rows[-2:] == [{"state": "WAITING", "paused": True}, "WAITING"]
    assert bodies["workflow.paused"]["instance"]["paused"] is True
    assert bodies["workflow.resumed"]["instance"]["paused"] is False
    for body in bodies.values():
        assert set(body["instance"]) == {"id", "definition_id", "version", "state", "paused", "business_key"}
