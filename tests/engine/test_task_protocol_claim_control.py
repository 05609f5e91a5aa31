"""W-CTL-2, -3 (inline, real Postgres): the task claim grants nothing to a paused or cancelling
instance (an expired lease is not handed out again while a cancel settles); the ``cancel_settle``
re-check when an in-flight task's lease runs out."""

from __future__ import annotations

from sqlalchemy import text

from app.db import transaction
from app.engine import control, task_protocol
from app.ids import new_id
from tests.engine.helpers import claim_task, definition, instance, make_due, publish, run_jobs, start

NS = "ns-" + new_id()[:8]


def _doc(*steps: dict) -> dict:
    return definition(*steps, deadline_seconds=3600)


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


def test_a_result_locks_instance_then_task_in_one_statement(eng):
    """A completion takes the instance's lock and the task's in ONE statement (one round trip less per
    step than a lock each), in the lock order of every transaction: the instance first. While another
    transaction holds the task row, the completion waits for it holding the instance lock, so a third
    transaction that wants the instance waits as well (with the task locked first, it would get it)."""
    import threading

    import psycopg
    from sqlalchemy.exc import OperationalError

    def_id = publish(eng, NS, _doc({"key": "a", "kind": "TASK", "queue": "lk.q"}))
    iid = start(eng, NS, def_id, {})["id"]
    task = claim_task(eng, NS, "lk.q")
    done: list[dict] = []
    with eng.connect() as holder:
        holder.execute(text("SELECT 1 FROM workflow_tasks WHERE id = :t FOR UPDATE"), {"t": task["id"]})

        def complete() -> None:
            with transaction(eng) as conn:
                done.append(task_protocol.complete(conn, NS, task["id"], task["epoch"], {"ok": 1}))

        t = threading.Thread(target=complete)
        t.start()
        try:
            with eng.connect() as probe:
                waited = False
                for _ in range(100):  # until the completion holds the instance (it waits for the task)
                    probe.execute(text("SET lock_timeout = '50ms'"))
                    try:
                        probe.execute(
                            text("SELECT 1 FROM workflow_instances WHERE id = :i FOR UPDATE"), {"i": iid}
                        )
                    except OperationalError as exc:
                        assert isinstance(exc.orig, psycopg.errors.LockNotAvailable)
                        probe.rollback()
                        waited = True
                        break
                    probe.rollback()
                assert waited, "the completion never held the instance while it waited for the task"
                assert done == []
        finally:
            holder.rollback()
            t.join(10)
    assert done and done[0]["state"] == "COMPLETED"
    assert instance(eng, iid)["state"] == "SUCCEEDED"


def test_a_result_takes_its_locks_in_one_statement(eng):
    """The statements of a completion that lock rows before its first write: one (two before: the
    instance, then the task)."""
    from tests.engine.helpers import statements_seen

    def_id = publish(eng, NS, _doc({"key": "a", "kind": "TASK", "queue": "lk.one"}))
    start(eng, NS, def_id, {})
    task = claim_task(eng, NS, "lk.one")
    with statements_seen(eng) as sent, transaction(eng) as conn:
        task_protocol.complete(conn, NS, task["id"], task["epoch"], {"ok": 1})
    first_write = next(
        i for i, s in enumerate(sent) if s.lstrip().upper().startswith(("UPDATE", "INSERT", "WITH"))
    )
    locks = [s for s in sent[:first_write] if "FOR UPDATE" in s]
    assert len(locks) == 1 and "FOR UPDATE OF i, t" in locks[0], sent[:first_write]
