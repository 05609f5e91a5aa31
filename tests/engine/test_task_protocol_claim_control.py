"""W-CTL-2, -3 (inline, real Postgres): the task claim grants nothing to a paused or cancelling
instance (an expired lease is not handed out again while a cancel settles); the ``cancel_settle``
re-check when an in-flight task's lease runs out."""

from __future__ import annotations

from sqlalchemy import text

from app.db import transaction
from app.engine import control, task_protocol
from app.ids import new_id
from tests.engine.helpers import claim_task, instance, make_due, publish, run_jobs, start

NS = "ns-" + new_id()[:8]


def _doc(*steps: dict) -> dict:
    return {"version": "v1", "input_schema": {}, "deadline_seconds": 3600, "steps": list(steps)}


def _cancel(eng, iid: str, reason: str = "stop") -> dict:
    with transaction(eng) as conn:
        inst = instance(eng, iid)
        control.control(
            conn,
            iid,
            {
                "operation": "CANCEL",
                "expected_control_revision": int(inst["control_revision"]),
                "reason": reason,
            },
        )
    return instance(eng, iid)


def _claim(eng, queue: str) -> list:
    with transaction(eng) as conn:
        return task_protocol.claim(conn, NS, [queue], 4, 60.0)


def _expire_leases(eng, iid: str) -> None:
    with eng.begin() as conn:
        conn.execute(
            text(
                "UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 ms' "
                "WHERE instance_id = :i AND state = 'CLAIMED'"
            ),
            {"i": iid},
        )


def test_claim_refuses_expired_lease_of_a_cancelling_instance_then_cancel_settles(eng):
    def_id = publish(eng, NS, _doc({"key": "t", "kind": "TASK", "queue": "cq", "after": []}))
    iid = start(eng, NS, def_id, {})["id"]
    in_flight = claim_task(eng, NS, "cq")
    assert _cancel(eng, iid)["state"] == "CANCELLING"  # the claimed task keeps its permit
    _expire_leases(eng, iid)  # its lease runs out before the cancel settled
    assert _claim(eng, "cq") == []  # never handed out again (before: re-claimed with epoch 2)
    with eng.connect() as conn:
        [(state, epoch)] = conn.execute(
            text("SELECT state, epoch FROM workflow_tasks WHERE id = :t"), {"t": in_flight["id"]}
        ).all()
    assert (state, epoch) == ("CLAIMED", in_flight["epoch"])
    # the cancel_settle delay_wake re-checks when the lease ran out: the cancel finishes
    make_due(eng)
    ran = run_jobs(eng)
    assert ("delay_wake", "succeeded") in ran
    inst = instance(eng, iid)
    assert inst["state"] == "CANCELLED" and "completed_at" in inst
    with eng.connect() as conn:
        assert (
            conn.execute(
                text("SELECT state FROM workflow_tasks WHERE id = :t"), {"t": in_flight["id"]}
            ).scalar()
            == "CANCELLED"
        )


def test_claim_refuses_expired_lease_of_a_paused_instance(eng):
    def_id = publish(eng, NS, _doc({"key": "t", "kind": "TASK", "queue": "pq", "after": []}))
    iid = start(eng, NS, def_id, {})["id"]
    claim_task(eng, NS, "pq")
    with transaction(eng) as conn:
        control.control(conn, iid, {"operation": "PAUSE", "expected_control_revision": 1, "reason": "hold"})
    _expire_leases(eng, iid)
    assert _claim(eng, "pq") == []
    with transaction(eng) as conn:
        control.control(conn, iid, {"operation": "RESUME", "expected_control_revision": 2, "reason": "go"})
    [again] = _claim(eng, "pq")
    assert again["epoch"] == 2
