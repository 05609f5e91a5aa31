"""X-AUTO compensation (inline, real Postgres): a failed instance (step failure, deadline) or a canceled
one compensates its completed steps one at a time in reverse completion order — compensation k+1 is
issued only after compensation task k completed — and ends FAILED / CANCELLED only after the last; a
failed or timed-out compensation sends the instance to NEEDS_REVIEW until an operator resolves it
(RESOLVE_INSTANCE: CONTINUE goes on with the next, FAIL / CANCEL end it and abandon the rest)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine import control, recovery, task_protocol
from app.errors import StateConflict
from app.ids import new_id
from tests.engine.helpers import claim_task, complete_task, instance, publish, run_jobs, start, step
from tests.ledger_helpers import OUTBOUND

NS = "ns-" + new_id()[:8]
UNDO = {"queue": "undo"}


@pytest.fixture
def saga_eng(eng):
    import app.engine.handlers.compensation as comp
    from app.ledger import handlers

    handlers.register("compensation_action", comp.compensation_action, replace=True)
    return eng


def _doc(deadline: int = 3600) -> dict:
    return {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": deadline,
        "steps": [
            {"key": "a", "kind": "TASK", "queue": "sq", "after": [], "compensation": UNDO},
            {"key": "b", "kind": "TASK", "queue": "sq", "after": ["a"], "compensation": UNDO},
            {"key": "n", "kind": "TASK", "queue": "sq", "after": ["a"]},  # no compensation declared
            {"key": "c", "kind": "TASK", "queue": "sq", "after": ["b", "n"]},
        ],
    }


def _through_b(eng, def_id: str) -> str:
    iid = start(eng, NS, def_id, {})["id"]
    for _ in ("a", "b", "n"):
        t = claim_task(eng, NS, "sq")
        complete_task(eng, NS, t, {"done": t["step_key"]})
    return iid


def _undo_tasks(eng, iid: str) -> list:
    with eng.connect() as conn:
        return conn.execute(
            text(
                "SELECT step_key, state FROM workflow_tasks WHERE instance_id = :i AND purpose = 'COMPENSATION' "
                "ORDER BY created_at"
            ),
            {"i": iid},
        ).all()


def _outbound(eng) -> list:
    return run_jobs(eng, queue=OUTBOUND)


def _actions(eng, iid: str) -> list[str]:
    with eng.connect() as conn:
        return [
            r[0]
            for r in conn.execute(
                text("SELECT action FROM workflow_operations WHERE workflow_id = :i ORDER BY created_at, id"),
                {"i": iid},
            )
        ]


def _fail(eng, task: dict, retryable: bool = False) -> None:
    with transaction(eng) as conn:
        task_protocol.fail(conn, NS, task["id"], task["epoch"], {"message": "boom", "retryable": retryable})


def test_step_failure_compensates_one_at_a_time_in_reverse_then_fails(saga_eng):
    eng = saga_eng
    iid = _through_b(eng, publish(eng, NS, _doc()))
    _fail(eng, claim_task(eng, NS, "sq"))  # c fails without retry
    inst = instance(eng, iid)
    assert inst["state"] == "CANCELLING" and inst["stop_kind"] == "FAILURE" and "completed_at" not in inst
    assert "cancel_requested_at" not in inst and "stop_requested_at" in inst
    assert step(eng, NS, iid, "c")["step"]["state"] == "FAILED"
    _outbound(eng)
    _outbound(eng)  # nothing more is issued while compensation 1 is open
    assert _undo_tasks(eng, iid) == [("b", "PENDING")]  # b completed last: compensated first
    first = claim_task(eng, NS, "undo")
    assert first["input"]["compensate"] == "b" and first["input"]["order"] == 1
    with pytest.raises(StateConflict):  # no cancel (nor pause) of a failing instance
        with transaction(eng) as conn:
            control.control(conn, iid, {"operation": "CANCEL", "expected_control_revision": 1, "reason": "x"})
    complete_task(eng, NS, first, {"undone": "b"})
    assert instance(eng, iid)["state"] == "CANCELLING"  # a still to compensate
    _outbound(eng)
    assert _undo_tasks(eng, iid) == [("b", "COMPLETED"), ("a", "PENDING")]
    second = claim_task(eng, NS, "undo")
    assert second["input"]["compensate"] == "a" and second["input"]["output"] == {"done": "a"}
    complete_task(eng, NS, second, {"undone": "a"})
    final = instance(eng, iid)
    assert final["state"] == "FAILED" and final["stop_kind"] == "FAILURE" and "completed_at" in final
    with eng.connect() as conn:
        err = conn.execute(
            text("SELECT error->>'step_key' FROM workflow_instances WHERE id = :i"), {"i": iid}
        )
        assert err.scalar() == "c"
    acts = _actions(eng, iid)
    assert acts.index("workflow.compensation.started") < acts.index("workflow.compensation.issued")
    assert acts.count("workflow.compensation.completed") == 2 and acts[-1] == "workflow.failed"


def test_deadline_failure_compensates_before_failed(saga_eng):
    eng = saga_eng
    iid = start(eng, NS, publish(eng, NS, _doc()), {})["id"]
    a = claim_task(eng, NS, "sq")
    complete_task(eng, NS, a, {"done": "a"})
    in_flight = claim_task(eng, NS, "sq")
    with eng.begin() as conn:
        conn.execute(text("UPDATE workflow_instances SET deadline_at = now() WHERE id = :i"), {"i": iid})
        conn.execute(
            text(
                "UPDATE workflow_jobs SET run_at = now() WHERE instance_id = :i AND type = 'task_timeout' AND status = 'pending'"
            ),
            {"i": iid},
        )
    run_jobs(eng)
    inst = instance(eng, iid)
    assert inst["state"] == "CANCELLING" and inst["stop_kind"] == "FAILURE"
    with transaction(eng) as conn:  # the deadline stopped the step work: its late result is refused
        with pytest.raises(StateConflict):
            task_protocol.complete(conn, NS, in_flight["id"], in_flight["epoch"], {})
    _outbound(eng)
    undo = claim_task(eng, NS, "undo")
    assert undo["input"]["compensate"] == "a"
    complete_task(eng, NS, undo, {})
    final = instance(eng, iid)
    assert final["state"] == "FAILED"
    with eng.connect() as conn:
        code = conn.execute(text("SELECT error->>'code' FROM workflow_instances WHERE id = :i"), {"i": iid})
        assert code.scalar() == "DEADLINE_EXCEEDED"


def _resolve(eng, iid: str, resolution: str, reason: str = "checked by hand") -> tuple:
    with transaction(eng) as conn:
        return recovery.resolve_instance(conn, iid, {"resolution": resolution, "reason": reason})


def test_failed_compensation_goes_to_review_then_continue(saga_eng):
    eng = saga_eng
    iid = _through_b(eng, publish(eng, NS, _doc()))
    with transaction(eng) as conn:
        control.control(
            conn, iid, {"operation": "CANCEL", "expected_control_revision": 1, "reason": "withdrawn"}
        )
    assert instance(eng, iid)["state"] == "CANCELLING"  # compensations first
    _outbound(eng)
    _fail(eng, claim_task(eng, NS, "undo"))  # compensating b failed
    inst = instance(eng, iid)
    assert inst["state"] == "NEEDS_REVIEW" and inst["stop_kind"] == "CANCEL" and "completed_at" not in inst
    _outbound(eng)
    assert _undo_tasks(eng, iid) == [("b", "FAILED")]  # the chain stopped: a is not compensated blindly
    with pytest.raises(StateConflict):  # steps are not recovered while compensations are under way
        with transaction(eng) as conn:
            recovery.recover(
                conn, iid, {"action": "RETRY_STEP", "step_key": "c", "output": None, "reason": "r"}
            )
    _, after, summary = _resolve(eng, iid, "CONTINUE")
    assert summary["review"] == "COMPENSATION_FAILED" and summary["compensation"]["step_key"] == "b"
    assert after["state"] == "CANCELLING"
    _outbound(eng)
    undo_a = claim_task(eng, NS, "undo")
    assert undo_a["input"]["compensate"] == "a"
    complete_task(eng, NS, undo_a, {})
    final = instance(eng, iid)
    assert final["state"] == "CANCELLED" and "completed_at" in final


def test_timed_out_compensation_goes_to_review_then_fail_abandons_the_rest(saga_eng):
    eng = saga_eng
    iid = _through_b(eng, publish(eng, NS, _doc()))
    _fail(eng, claim_task(eng, NS, "sq"))
    _outbound(eng)
    with eng.begin() as conn:  # compensation b's deadline passes (time through the database)
        conn.execute(
            text(
                "UPDATE workflow_tasks SET deadline_at = now() WHERE instance_id = :i AND purpose = 'COMPENSATION'"
            ),
            {"i": iid},
        )
        conn.execute(
            text(
                "UPDATE workflow_jobs SET run_at = now() WHERE instance_id = :i AND type = 'task_timeout' AND status = 'pending'"
            ),
            {"i": iid},
        )
    run_jobs(eng)
    assert _undo_tasks(eng, iid) == [("b", "TIMED_OUT")]
    assert instance(eng, iid)["state"] == "NEEDS_REVIEW"
    with pytest.raises(StateConflict):
        _resolve_running(eng)
    _, after, summary = _resolve(eng, iid, "FAIL", "compensation impossible; finance informed")
    assert after["state"] == "FAILED" and summary["abandoned"] == ["a"]
    assert _undo_tasks(eng, iid) == [("b", "TIMED_OUT")]


def _resolve_running(eng) -> None:
    """RESOLVE_INSTANCE on an instance that is not in review is a 409."""
    iid = start(eng, NS, publish(eng, NS, _doc()), {})["id"]
    _resolve(eng, iid, "CONTINUE")
