"""Time skipping, for tests only (``ledgerflow.testing``, docs/testing.md): make everything of one
namespace that would fall due within a span fall due now, so a workflow with a 1 h timer, a 10 min retry
backoff and a 1 day signal timeout is tested in seconds.

Every due decision of the product compares a stored time with database ``now()``; skipping moves the stored
times that fall within ``(now, now + span]`` to ``now()`` and wakes the worker pools, and nothing else
changes: the handlers that then run are the ones that run when the time comes for real.

What moves (in one transaction, the instances locked first, as every advance locks them):

- the pending ledger jobs of the namespace's open, unpaused workflows (``workflow_jobs.run_at``): timers,
  signal timeouts, retry backoffs of TASK steps, POLL rounds, early signals' expiry, the instance's watch
  (workflow and task deadlines), and the retry backoff of the engine's own outbound jobs. Not the wake that
  waits for a cancel's in-flight task leases (``cancel_settle``): a lease is a worker's liveness, not time a
  workflow waits for;
- the deadlines those jobs check: TIMER and SIGNAL waits (``workflow_waits.deadline_at``), open tasks'
  deadlines, early signals' expiry, the workflow deadline, a POLL step's next round and deadline;
- the namespace's active schedules whose next fire time falls within the span: each gets its launch now
  (its latest fire time in the span, earlier ones coalesced as the scheduler coalesces missed fires).

Paused workflows are left as they are (a pause stops their clock). Leases (task claims, running jobs) never
move. Times later than the span stay where they are: skip again for them.

Only a server the test kit started has it (``gate``): ``LEDGERFLOW_TEST_TIME_SKIPPING`` must hold
``<pid>:<key>`` where ``pid`` is a process this process descends from (the kit that started it) and the
environment is not production; a server started any other way never registers the route and says so at
start when the variable is set (``refusal``). A request must also carry the key (the kit's header)."""

from __future__ import annotations

import hmac
import os
import re
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import Connection

from app import audit
from app.auth import Principal
from app.engine.states import TERMINAL, task_open_sql
from app.integrations import schedules
from app.ledger.hints import publish_after_commit
from app.ledger.models import QUEUES
from app.settings import TEST_TIME_SKIPPING, is_production
from app.sql import Query, query, run

MAX_SECONDS = 366 * 86_400  # a year: the longest span one call skips
MAX_INSTANCES = 10_000  # open workflows one call looks at, in id order (``more``: there may be others)
HEADER = "X-Ledgerflow-Time-Skipping-Key"
_VALUE = re.compile(r"(\d{1,10}):([A-Za-z0-9_-]{32,128})")

_TERMINAL = ", ".join(f"'{s}'" for s in sorted(TERMINAL))
_SPAN = "> now() AND {col} <= now() + make_interval(secs => :s)"


def _in_span(col: str) -> str:
    return f"{col} " + _SPAN.format(col=col)


# The namespace's open, unpaused workflows, locked in id order (every advance locks its instance first).
LOCK_INSTANCES = query(
    "time_skip_lock_instances",
    "SELECT id FROM workflow_instances WHERE namespace_id = :ns AND state NOT IN ("
    + _TERMINAL
    + ") AND NOT paused ORDER BY id LIMIT :n FOR UPDATE",
)
MOVE_JOBS = query(
    "time_skip_jobs",
    "UPDATE workflow_jobs SET run_at = now(), updated_at = now() "
    "WHERE instance_id = ANY(:ids) AND status = 'pending' AND " + _in_span("run_at") + " "
    "AND NOT (type = 'delay_wake' AND payload->>'wake' = 'cancel_settle') RETURNING queue::text",
)
MOVE_WAITS = query(
    "time_skip_waits",
    "UPDATE workflow_waits SET deadline_at = now() "
    "WHERE instance_id = ANY(:ids) AND state = 'WAITING' AND " + _in_span("deadline_at") + " RETURNING id",
)
# the instances' open tasks, read through their instance's index (app.engine.row_access._OPEN_WORK)
MOVE_TASKS = query(
    "time_skip_tasks",
    "UPDATE workflow_tasks SET deadline_at = now(), updated_at = now() "
    f"WHERE instance_id = ANY(:ids) AND {task_open_sql()} AND " + _in_span("deadline_at") + " RETURNING id",
)
MOVE_SIGNALS = query(
    "time_skip_signals",
    "UPDATE workflow_signals SET expires_at = now(), updated_at = now() "
    "WHERE instance_id = ANY(:ids) AND state = 'PENDING' AND " + _in_span("expires_at") + " RETURNING id",
)
MOVE_DEADLINES = query(
    "time_skip_deadlines",
    "UPDATE workflow_instances SET deadline_at = now() "
    "WHERE id = ANY(:ids) AND " + _in_span("deadline_at") + " RETURNING id",
)
MOVE_POLLS = query(
    "time_skip_polls",
    "UPDATE workflow_steps SET "
    "poll_next_at = CASE WHEN " + _in_span("poll_next_at") + " THEN now() ELSE poll_next_at END, "
    "poll_deadline_at = CASE WHEN " + _in_span("poll_deadline_at") + " THEN now() ELSE poll_deadline_at END "
    "WHERE instance_id = ANY(:ids) AND ("
    + _in_span("poll_next_at")
    + " OR "
    + _in_span("poll_deadline_at")
    + ") "
    "RETURNING id",
)


@dataclass(frozen=True)
class Skipped:
    """What one skip moved (counts of rows), and whether open workflows were left for another call."""

    seconds: float
    jobs: int
    waits: int
    tasks: int
    signals: int
    deadlines: int
    polls: int
    schedules: int
    more: bool

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def skip(conn: Connection, principal: Principal, seconds: float, *, request_id: str | None = None) -> Skipped:
    """Move what falls due within ``seconds`` in ``principal``'s namespace to now, in ``conn``'s
    transaction; the worker pools are woken after commit, and one audit row says what moved."""
    ids = [r.id for r in run(conn, LOCK_INSTANCES, {"ns": principal.namespace_id, "n": MAX_INSTANCES}).all()]
    args = {"ids": ids, "s": seconds}
    queues = [r.queue for r in run(conn, MOVE_JOBS, args).all()] if ids else []

    def moved(statement: Query) -> int:
        return len(run(conn, statement, args).all()) if ids else 0

    result = Skipped(
        seconds=seconds,
        jobs=len(queues),
        waits=moved(MOVE_WAITS),
        tasks=moved(MOVE_TASKS),
        signals=moved(MOVE_SIGNALS),
        deadlines=moved(MOVE_DEADLINES),
        polls=moved(MOVE_POLLS),
        schedules=schedules.hand_out_due_by(conn, principal.namespace_id, seconds),
        more=len(ids) == MAX_INSTANCES,
    )
    # a pool that sleeps until its next due job (an hour away) hears of the moved ones now; the deadlines
    # moved are checked by the jobs moved with them (a wait's by its timer job, a task's by the watch)
    publish_after_commit(conn, QUEUES)
    audit.record(
        conn,
        principal=principal,
        request_id=request_id,
        action="testing.time_skip",
        target_type="namespace",
        target_id=principal.namespace_id,
        reason=f"skipped {seconds:g} s (test kit)",
        after=result.to_dict(),
    )
    return result


# --------------------------------------------------------------------------------------------- the gate
def _ancestors() -> set[int]:
    """The ids of this process's ancestors (Linux: /proc; elsewhere: the parent only)."""
    found, pid = set(), os.getppid()
    proc = Path("/proc")
    for _ in range(64):
        if pid <= 1:
            break
        found.add(pid)
        try:
            stat = (proc / str(pid) / "stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the name, which may hold spaces
    return found


def refusal() -> str | None:
    """Why time skipping is off in this process while LEDGERFLOW_TEST_TIME_SKIPPING is set (None: on, or
    not asked for). A server started by the test kit has it; one started any other way is told why not."""
    raw = TEST_TIME_SKIPPING.get()
    if raw is None:
        return None
    if is_production():
        return "LEDGERFLOW_TEST_TIME_SKIPPING is ignored: LEDGERFLOW_ENV is production"
    found = _VALUE.fullmatch(raw)
    if found is None or int(found.group(1)) not in _ancestors():
        return (
            "LEDGERFLOW_TEST_TIME_SKIPPING is set, but this server was not started by the test kit "
            "(ledgerflow.testing): time skipping stays off (only the kit sets this variable)"
        )
    return None


def enabled() -> bool:
    """Time skipping is on in this process (a server the test kit started)."""
    return TEST_TIME_SKIPPING.get() is not None and refusal() is None


def key_matches(presented: str | None) -> bool:
    """The request carries the kit's key (compared in constant time)."""
    found = _VALUE.fullmatch(TEST_TIME_SKIPPING.get() or "")
    return found is not None and presented is not None and hmac.compare_digest(presented, found.group(2))
