"""Pause, resume, cancel (W-CTL, L-PAUSE) inside the caller's transaction, instance row locked first.

- Every decision names the ``control_revision`` it was made on; a stale one is a 409 STATE_CONFLICT.
  A decision bumps ``control_revision`` and ``revision``; background progress bumps ``revision`` only.
- PAUSE: ``paused`` gates task claims (``tasks.claim``) and new activations (``steps.after_change``);
  the instance's suspend-scope jobs keep their remaining milliseconds (``suspend_jobs``); results of
  in-flight tasks are still collected. A running unsafe call with an open marker goes to the
  "needs confirmation" dead letter and the instance to NEEDS_REVIEW.
- RESUME: jobs come back with exactly their remainder and the domain deadlines they enforce (timer /
  signal wait, poll round, signal expiry) follow them; open tasks' deadlines move on by the pause; the
  workflow deadline never moves; the instance's watch (its one ``task_timeout`` job, which enforces
  both) is then due at the earlier of the two; NEEDS_REVIEW stays.
- CANCEL: CANCELLING with cancel_requested_at / stop_kind CANCEL / stop_requested_at (a first stop
  target is kept); waiting work stops; clear-scope jobs are canceled; claimed tasks keep their permit
  until they end (``collect_during_cancel``); then completed steps that declare a compensation are
  compensated one after another in reverse completion order (``saga``) and the instance is CANCELLED. A job whose
  external outcome is unknown sends the instance (and its step) to NEEDS_REVIEW instead.
"""

from __future__ import annotations

from sqlalchemy import Connection

from app.engine import driver, jobs_and_tasks, stopping
from app.engine.decide import stopping as decide
from app.engine.decide.model import Pause, Refuse, Resume
from app.engine.row_access import lock_instance, read_instance
from app.engine.snapshot import inst_model
from app.engine.transitions import instance_moves, task_moves
from app.errors import StateConflict
from app.ledger.suspend import resume_jobs, suspend_jobs
from app.sql import Query, query, run

OPERATIONS = ("PAUSE", "RESUME", "CANCEL")


def control(conn: Connection, instance_id: str, req: dict) -> tuple[dict, dict]:
    """Apply one decision; returns (instance before, instance after). The caller audits it."""
    inst = lock_instance(conn, instance_id)
    verdict = decide.control(inst_model(inst), req["operation"], req["expected_control_revision"])
    if isinstance(verdict, Refuse):
        raise StateConflict(verdict.message)
    if isinstance(verdict, Pause):
        pause(conn, inst)
    elif isinstance(verdict, Resume):
        resume(conn, inst)
    else:
        stopping.request_cancel(conn, inst)
    return inst, read_instance(conn, instance_id)


def pause(conn: Connection, inst: dict) -> None:
    """``paused`` gates task claims and new activations; suspend-scope jobs keep their remaining
    milliseconds; an unknown external outcome found while pausing sends the instance to review."""
    instance_moves.pause(conn, inst["id"])
    moved = suspend_jobs(conn, inst["id"])
    dead = [m["id"] for m in moved if m["status"] == "dead"]
    if dead:
        stopping.to_review(conn, inst["id"], dead)


def resume(conn: Connection, inst: dict) -> None:
    paused_for = instance_moves.resume(conn, inst["id"])
    rows = resume_jobs(conn, inst["id"])
    # the deadlines of the open tasks move on by the pause (their watch follows: ``sync_resumed``)
    task_moves.postpone_deadlines(conn, inst["id"], paused_for)
    sync_resumed(conn, [r["id"] for r in rows])
    if inst["stop_requested_at"] is None:
        driver.fanout_top_up(conn, inst, "resume")  # fan-out children held back by the pause start
        driver.make_progress(conn, inst["id"])  # activations held back by the pause start now


_SYNC: list[Query] = [
    # timer / signal-timeout waits follow their delay_wake job
    query(
        "resume_waits_follow_wakes",
        """UPDATE workflow_waits w SET deadline_at = j.run_at FROM workflow_jobs j
       WHERE j.id = ANY(:ids) AND j.type = 'delay_wake' AND j.payload->>'wake' IN ('timer', 'signal_timeout')
         AND w.activation_id = j.payload->>'activation_id' AND w.state = 'WAITING'""",
    ),
    query(
        "resume_polls_follow_wakes",
        """UPDATE workflow_steps s SET poll_next_at = j.run_at FROM workflow_jobs j
       WHERE j.id = ANY(:ids) AND j.type = 'delay_wake' AND j.payload->>'wake' = 'poll'
         AND s.activation_id = j.payload->>'activation_id' AND s.poll_next_at IS NOT NULL""",
    ),
    query(
        "resume_signal_expiry_follow_wakes",
        """UPDATE workflow_signals s SET expires_at = j.run_at, updated_at = now() FROM workflow_jobs j
       WHERE j.id = ANY(:ids) AND j.type = 'delay_wake' AND j.payload->>'wake' = 'signal_expiry'
         AND s.id = j.payload->>'signal_id' AND s.state = 'PENDING'""",
    ),
    # the instance's watch: due at the earlier of the workflow deadline, never extended by a pause
    # (W-CTL-2), and its open tasks' deadlines, moved on by the pause (``postpone_deadlines``, before)
    query(
        "resume_watch_follow_tasks",
        f"""UPDATE workflow_jobs j SET run_at = d.due, updated_at = now()
       FROM workflow_instances i CROSS JOIN LATERAL (SELECT {jobs_and_tasks.WATCH_DUE_SQL} AS due) d
       WHERE j.id = ANY(:ids) AND j.type = 'task_timeout' AND j.task_id IS NULL
         AND j.payload->>'task_id' IS NULL AND i.id = j.instance_id AND j.status = 'pending'
         AND d.due IS NOT NULL AND j.run_at <> d.due""",
    ),
    # a deadline job enqueued before the watch (a delay_wake with wake 'deadline'): never extended either
    query(
        "resume_deadline_wakes_cap",
        """UPDATE workflow_jobs j SET run_at = LEAST(j.run_at, i.deadline_at) FROM workflow_instances i
       WHERE j.id = ANY(:ids) AND j.type = 'delay_wake' AND j.payload->>'wake' = 'deadline'
         AND i.id = j.instance_id AND j.status = 'pending'""",
    ),
]


def sync_resumed(conn: Connection, job_ids: list[int]) -> None:
    """The domain deadlines follow the resumed jobs that enforce them (W-CTL-2)."""
    if job_ids:
        for sql in _SYNC:
            run(conn, sql, {"ids": job_ids})
