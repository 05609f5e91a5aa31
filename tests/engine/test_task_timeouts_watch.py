"""The instance's watch: ONE ``task_timeout`` job per instance enforces the workflow deadline and its
open tasks' deadlines (no ``delay_wake`` deadline job); a pause never moves the workflow deadline but
moves the open tasks' deadlines, and the watch follows both; jobs enqueued before the watch (a
``delay_wake`` with wake ``deadline``) still fail their instance."""

from __future__ import annotations

from sqlalchemy import text

from app.db import transaction
from app.engine import control, jobs_and_tasks, stopping
from app.engine.row_access import read_instance
from app.ids import new_id
from tests.engine.helpers import (
    claim_task,
    complete_task,
    definition,
    instance,
    make_due,
    publish,
    run_jobs,
    start,
    statements_seen,
    step,
)

NS = "ns-" + new_id()[:8]


def _deadline_jobs(eng, iid: str) -> list:
    """Every job of the instance that enforces a deadline (the watch, or an old deadline wake)."""
    with eng.connect() as conn:
        return conn.execute(
            text(
                "SELECT id, type::text AS type, status::text AS status, run_at FROM workflow_jobs "
                "WHERE instance_id = :i AND (type = 'task_timeout' OR payload->>'wake' = 'deadline') ORDER BY id"
            ),
            {"i": iid},
        ).all()


def _times(eng, iid: str) -> dict:
    with eng.connect() as conn:
        deadline = conn.execute(
            text("SELECT deadline_at FROM workflow_instances WHERE id = :i"), {"i": iid}
        ).scalar()
        tasks = dict(
            conn.execute(
                text(
                    "SELECT step_key, deadline_at FROM workflow_tasks WHERE instance_id = :i "
                    "AND state IN ('PENDING', 'CLAIMED')"
                ),
                {"i": iid},
            ).all()
        )
        watch = conn.execute(
            text(
                "SELECT run_at FROM workflow_jobs WHERE instance_id = :i AND type = 'task_timeout' AND status = 'pending'"
            ),
            {"i": iid},
        ).scalar()
    return {"deadline": deadline, "tasks": tasks, "watch": watch}


def _travel(eng, iid: str, seconds: float) -> None:
    """``seconds`` pass for the instance: its deadline, its open tasks' deadlines and its pending jobs
    come that much closer (database time stays as it is)."""
    by = {"i": iid, "s": seconds}
    with eng.begin() as conn:
        conn.execute(
            text(
                "UPDATE workflow_instances SET deadline_at = deadline_at - make_interval(secs => :s) WHERE id = :i"
            ),
            by,
        )
        conn.execute(
            text(
                "UPDATE workflow_tasks SET deadline_at = deadline_at - make_interval(secs => :s) "
                "WHERE instance_id = :i AND state IN ('PENDING', 'CLAIMED')"
            ),
            by,
        )
        conn.execute(
            text(
                "UPDATE workflow_jobs SET run_at = run_at - make_interval(secs => :s) "
                "WHERE instance_id = :i AND status = 'pending'"
            ),
            by,
        )


def _left(eng, table: str, where: str, iid: str) -> float:
    """Seconds from now (database time) to the earliest deadline of the rows of ``table`` ``where``."""
    with eng.connect() as conn:
        return float(
            conn.execute(
                text(f"SELECT extract(epoch FROM min(deadline_at) - now()) FROM {table} WHERE {where}"),
                {"i": iid},
            ).scalar()
        )


def _control(eng, iid: str, op: str, revision: int) -> None:
    with transaction(eng) as conn:
        control.control(
            conn, iid, {"operation": op, "expected_control_revision": revision, "reason": op.lower()}
        )


def _doc(deadline: int, *steps: dict) -> dict:
    return definition(*steps, deadline_seconds=deadline)


def test_a_workflow_has_exactly_one_watch_job(eng):
    def_id = publish(
        eng,
        NS,
        _doc(
            600,
            {"key": "a", "kind": "TASK", "queue": "wq", "timeout_seconds": 60},
            {"key": "cool", "kind": "TIMER", "after": ["a"], "delay_seconds": 1},
            {"key": "b", "kind": "TASK", "queue": "wq", "after": ["cool"], "timeout_seconds": 60},
        ),
    )
    iid = start(eng, NS, def_id, {})["id"]
    [watch] = _deadline_jobs(eng, iid)
    times = _times(eng, iid)
    # one task_timeout job, no deadline delay_wake; due at the earlier of the task's and the workflow's deadline
    assert watch.type == "task_timeout" and watch.status == "pending"
    assert watch.run_at == times["tasks"]["a"] < times["deadline"]
    complete_task(eng, NS, claim_task(eng, NS, "wq"), {})
    make_due(eng)  # the timer fires
    run_jobs(eng)
    assert _deadline_jobs(eng, iid) == [watch]  # the next task writes no job: the watch is early enough
    complete_task(eng, NS, claim_task(eng, NS, "wq"), {})
    assert instance(eng, iid)["state"] == "SUCCEEDED"
    [(job_id, job_type, status, _)] = _deadline_jobs(eng, iid)
    assert (job_id, job_type, status) == (watch.id, "task_timeout", "canceled")  # canceled with the work


def test_a_workflow_without_a_first_task_is_watched_from_its_deadline(eng):
    def_id = publish(
        eng,
        NS,
        _doc(
            600,
            {"key": "cool", "kind": "TIMER", "delay_seconds": 30},
            {"key": "a", "kind": "TASK", "queue": "wq0", "after": ["cool"], "timeout_seconds": 60},
        ),
    )
    iid = start(eng, NS, def_id, {})["id"]
    [watch] = _deadline_jobs(eng, iid)
    assert watch.type == "task_timeout" and watch.run_at == _times(eng, iid)["deadline"]
    make_due(eng)
    run_jobs(eng)
    [moved] = _deadline_jobs(eng, iid)  # the first task moved the same job earlier
    assert moved.id == watch.id and moved.run_at == _times(eng, iid)["tasks"]["a"]


def test_a_paused_then_resumed_instance_keeps_its_deadline_and_its_tasks_deadlines_move(eng):
    def_id = publish(
        eng,
        NS,
        _doc(
            100,
            {"key": "a", "kind": "TASK", "queue": "wq1", "timeout_seconds": 30, "retry": {"max_attempts": 2}},
            {"key": "b", "kind": "TASK", "queue": "wq1", "timeout_seconds": 90},
        ),
    )
    iid = start(eng, NS, def_id, {})["id"]
    before = _times(eng, iid)
    assert before["watch"] == before["tasks"]["a"]
    _control(eng, iid, "PAUSE", 1)
    with eng.begin() as conn:  # the pause lasted 50 s
        conn.execute(
            text("UPDATE workflow_instances SET paused_at = paused_at - interval '50 s' WHERE id = :i"),
            {"i": iid},
        )
    _control(eng, iid, "RESUME", 2)
    after = _times(eng, iid)
    assert after["deadline"] == before["deadline"]  # W-CTL-2: never extended
    for key in ("a", "b"):  # the open tasks' deadlines moved on by the pause
        moved = (after["tasks"][key] - before["tasks"][key]).total_seconds()
        assert 50 <= moved < 55, (key, moved)
    # the one watch: due at the earlier of the workflow deadline and the moved task deadlines
    assert [j.status for j in _deadline_jobs(eng, iid)] == ["pending"]
    assert after["watch"] == min(after["deadline"], *after["tasks"].values()) == after["tasks"]["a"]

    # a's moved deadline passes (b's and the workflow's do not): a times out, its retry waits
    _travel(eng, iid, (after["tasks"]["a"] - before["tasks"]["a"]).total_seconds() + 30 + 1)
    assert ("task_timeout", "succeeded") in run_jobs(eng)
    assert step(eng, NS, iid, "a")["step"]["state"] == "WAITING"
    assert step(eng, NS, iid, "b")["step"]["state"] == "ACTIVE" and instance(eng, iid)["state"] != "FAILED"
    rearmed = _times(eng, iid)
    # armed again at the original workflow deadline, before b's moved deadline
    assert rearmed["watch"] == rearmed["deadline"] < rearmed["tasks"]["b"]
    assert [j.status for j in _deadline_jobs(eng, iid)] == ["succeeded", "pending"]

    # the original workflow deadline passes while b's moved deadline has not: the instance FAILS
    _travel(eng, iid, _left(eng, "workflow_instances", "id = :i", iid) + 0.5)
    assert (
        _left(eng, "workflow_tasks", "instance_id = :i AND step_key = 'b'", iid) > 30
    )  # b's own (moved) deadline is still ahead
    run_jobs(eng)
    inst = instance(eng, iid)
    assert inst["state"] == "FAILED" and inst["stop_kind"] == "FAILURE"
    with eng.connect() as conn:
        code = conn.execute(
            text("SELECT error->>'code' FROM workflow_instances WHERE id = :i"), {"i": iid}
        ).scalar()
    assert code == "DEADLINE_EXCEEDED"
    assert step(eng, NS, iid, "b")["step"]["state"] == "CANCELLED"
    assert [j.status for j in _deadline_jobs(eng, iid)] == ["succeeded", "succeeded"]  # nothing left armed


def test_a_resumed_instance_whose_deadline_came_first_is_watched_at_it(eng):
    def_id = publish(eng, NS, _doc(60, {"key": "a", "kind": "TASK", "queue": "wq2", "timeout_seconds": 50}))
    iid = start(eng, NS, def_id, {})["id"]
    _control(eng, iid, "PAUSE", 1)
    with eng.begin() as conn:  # a 20 s pause moves the task past the workflow deadline
        conn.execute(
            text("UPDATE workflow_instances SET paused_at = paused_at - interval '20 s' WHERE id = :i"),
            {"i": iid},
        )
    _control(eng, iid, "RESUME", 2)
    after = _times(eng, iid)
    assert after["tasks"]["a"] > after["deadline"] and after["watch"] == after["deadline"]


def test_a_deadline_wake_enqueued_before_the_watch_still_fails_its_instance(eng):
    def_id = publish(eng, NS, _doc(600, {"key": "a", "kind": "TASK", "queue": "wq3", "timeout_seconds": 60}))
    iid = start(eng, NS, def_id, {})["id"]
    with transaction(eng) as conn:  # as an older release enqueued it; due now, the deadline passed
        inst = read_instance(conn, iid)
        jobs_and_tasks.wake(conn, inst, "deadline", key=f"deadline:{iid}", run_at=None)
        conn.execute(
            text("UPDATE workflow_instances SET deadline_at = now() - interval '1 ms' WHERE id = :i"),
            {"i": iid},
        )
    assert ("delay_wake", "succeeded") in run_jobs(eng)
    inst = instance(eng, iid)
    assert inst["state"] == "FAILED" and inst["stop_kind"] == "FAILURE"
    assert [j.status for j in _deadline_jobs(eng, iid) if j.type == "task_timeout"] == ["canceled"]


def test_a_watch_canceled_with_the_work_is_armed_again_later_in_the_same_transaction(eng):
    """The transaction's arm cache forgets a watch canceled with the instance's work: a task created
    after it in the same transaction (a compensation, a retry) is watched, whatever was armed before."""
    def_id = publish(eng, NS, _doc(600, {"key": "a", "kind": "TASK", "queue": "wq4", "timeout_seconds": 60}))
    iid = start(eng, NS, def_id, {})["id"]
    with transaction(eng) as conn:
        inst = read_instance(conn, iid)
        jobs_and_tasks.arm_watch(conn, inst, 5)  # earlier than the task: the watch moves
        stopping.close_work(conn, inst, "FAILED")  # the work closes: the pending watch is canceled
        jobs_and_tasks.arm_watch(conn, inst, 3600)  # asked later than before: still a watch of its own
    assert [j.status for j in _deadline_jobs(eng, iid)] == ["canceled", "pending"]
    with eng.connect() as conn:
        due_in = conn.execute(
            text(
                "SELECT extract(epoch FROM run_at - now()) FROM workflow_jobs WHERE instance_id = :i "
                "AND type = 'task_timeout' AND status = 'pending'"
            ),
            {"i": iid},
        ).scalar()
    assert 3500 < due_in <= 3600


def _statements_on_jobs(eng, call) -> list[str]:
    """The statements on ``workflow_jobs`` that ``call()`` sends."""
    with statements_seen(eng) as seen:
        call()
    return [s for s in seen if "workflow_jobs" in s]


def test_a_next_task_due_no_earlier_than_the_completed_one_arms_nothing(eng):
    """The completed task was open under the instance's lock, so the watch is due no later than its
    deadline (jobs_and_tasks.watch_covers): the next step's task, due later, sends no statement on the jobs (the arm
    took a row lock on the watch at every step before). A next task due earlier moves the watch earlier."""
    def_id = publish(
        eng,
        NS,
        _doc(
            600,
            {"key": "a", "kind": "TASK", "queue": "cq", "timeout_seconds": 60},
            {"key": "b", "kind": "TASK", "queue": "cq", "after": ["a"], "timeout_seconds": 60},
            {"key": "c", "kind": "TASK", "queue": "cq", "after": ["b"], "timeout_seconds": 5},
        ),
    )
    iid = start(eng, NS, def_id, {})["id"]
    [watch] = _deadline_jobs(eng, iid)
    assert _statements_on_jobs(eng, lambda: complete_task(eng, NS, claim_task(eng, NS, "cq"), {})) == []
    times = _times(eng, iid)
    assert _deadline_jobs(eng, iid) == [watch] and times["watch"] == watch.run_at <= times["tasks"]["b"]
    assert len(_statements_on_jobs(eng, lambda: complete_task(eng, NS, claim_task(eng, NS, "cq"), {}))) == 1
    times = _times(eng, iid)
    assert times["watch"] == times["tasks"]["c"] < watch.run_at  # moved earlier, for c's 5 s
    complete_task(eng, NS, claim_task(eng, NS, "cq"), {})
    assert instance(eng, iid)["state"] == "SUCCEEDED"
