"""``task_timeout`` jobs: ONE per open instance, its watch (``jobs_and_tasks.arm_watch``), enforces the workflow
deadline and the deadlines of the instance's open tasks. It is due at the earlier of the two (a new task
moves it earlier; a pause keeps its remainder and a resume sets it to the earlier of the workflow
deadline, which never moves, and the open tasks' deadlines, moved on by the pause: ``control``). When it
runs, in time order:

- every open task whose deadline passed before the workflow deadline times out; the step's retry policy
  (TASK) or its round budget (POLL) decides what comes next (``driver.task_ended``);
- then, the workflow deadline passed and no stop requested: the instance FAILS (DEADLINE_EXCEEDED,
  stop_kind FAILURE; its open tasks are canceled, completed steps compensated: ``stopping.stop``);
- an instance whose stop was requested has no deadline left: only its tasks' deadlines count (a
  compensation task times out like any other);

then it arms itself again for the next due time while the instance is still open. The job of an instance
that ended was canceled with its work (L-PAUSE-4).

Rows enqueued by earlier releases keep working: a job naming one task (``task_id``, before migration
0018_i27) times out that task only; a ``delay_wake`` job with wake ``deadline`` (before the watch) still
fails its instance (``handlers.timers``): for such an instance both enforce the deadline, and the second
finds it stopped."""

from __future__ import annotations

from sqlalchemy import Connection

from app.db_time import is_past
from app.engine import jobs_and_tasks, stopping, task_protocol
from app.engine.decide import stopping as decide_stopping
from app.engine.decide.model import Stop
from app.engine.handlers.common import bind, run_locked_once
from app.engine.row_access import read_instance
from app.engine.snapshot import inst_model
from app.engine.states import TERMINAL
from app.ledger import handlers
from app.ledger.context import JobContext
from app.sql import query, run

# Seconds from now to the instance's next due time: its earliest open task deadline and, unless it is
# stopping or ended, its workflow deadline (NULL: nothing left to watch).
_NEXT_DUE = query(
    "instance_watch_next_due",
    f"SELECT EXTRACT(EPOCH FROM {jobs_and_tasks.WATCH_DUE_SQL} - now())::float8 FROM workflow_instances i WHERE i.id = :i",
)


def watch(conn: Connection, inst: dict) -> dict:
    """The instance's watch job (see the module's description)."""
    stopping_before = inst["stop_requested_at"] is not None
    timed_out = task_protocol.time_out_overdue(conn, inst, None if stopping_before else inst["deadline_at"])
    out: dict = {"timed_out": timed_out}
    current = read_instance(conn, inst["id"]) if timed_out else inst
    if current["state"] in TERMINAL:
        return out
    if current["stop_requested_at"] is None:
        due = is_past(conn, current["deadline_at"])
        verdict = decide_stopping.deadline_passed(inst_model(current), due)
        if isinstance(verdict, Stop):
            stopping.apply_stop(conn, current, verdict)
            out["failed"] = "DEADLINE_EXCEEDED"
    elif not stopping_before:  # a time-out stopped it: no workflow deadline comes first any more
        out["timed_out"] += task_protocol.time_out_overdue(conn, current)
    nxt = run(conn, _NEXT_DUE, {"i": inst["id"]}).scalar()
    if nxt is not None:
        jobs_and_tasks.arm_watch(conn, current, max(0.0, nxt))
    return out


_TASK_OWNER = query(
    "task_owner",
    "SELECT instance_id FROM workflow_tasks WHERE id = :id",
)


@handlers.register("task_timeout")
def task_timeout(ctx: JobContext):
    named = (ctx.payload or {}).get("task_id") or ctx.task_id
    if not named:
        return run_locked_once(ctx, watch)
    task_id = str(named)

    def write(conn: Connection, inst: dict) -> dict:
        owner = run(conn, _TASK_OWNER, {"id": task_id}).scalar()
        bind("task", task_id, owner, inst["id"])
        if not task_protocol.time_out(conn, inst, task_id):
            return {"skipped": "the task was settled before its deadline"}
        return {"timed_out": task_id}

    return run_locked_once(ctx, write)
