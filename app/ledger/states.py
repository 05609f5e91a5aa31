"""Job types, pools and states (SPEC L-TYPE, L-STATE).

Who moves a parent job between statuses (every move is a guarded UPDATE in ``app/ledger/transitions/``):

- ``pending``   in: enqueue, automatic retry (settle / drain reclaim), manual retry, instance resume.
                out: claim (-> running), suspend (-> paused), clear/skip/instance end (-> canceled).
- ``running``   in: claim only.
                out: settle (-> succeeded / pending / failed / dead), drain reclaim (-> pending / dead),
                     hand back at worker shutdown (-> pending due at once, or dead when an external
                     outcome is unknown),
                     suspend (-> paused, or dead when an external outcome is unknown), clear/skip (-> canceled).
- ``paused``    in: suspend.   out: resume (-> pending), clear/skip/instance end (-> canceled).
- ``succeeded`` in: settle.    out: none (terminal).
- ``failed``    in: settle (handler asked for a manual decision).  out: manual retry, skip.
- ``dead``      in: settle, drain, suspend.  out: manual retry, skip.
- ``canceled``  in: skip, clear, instance end (``cancel_waiting``: its waiting jobs only).  out: manual retry.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple


class JobStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DEAD = "dead"
    CANCELED = "canceled"


class AttemptStatus(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELED = "canceled"


class Pool(StrEnum):
    ADVANCE = "advance"
    OUTBOUND = "outbound"

    @property
    def queue(self) -> str:
        return QUEUE_OF_POOL[self]


QUEUE_OF_POOL = {Pool.ADVANCE: "workflow-ledger", Pool.OUTBOUND: "workflow-ledger-outbound"}


class JobType(StrEnum):
    DELAY_WAKE = "delay_wake"
    TASK_TIMEOUT = "task_timeout"
    SUBPROCESS_SPAWN = "subprocess_spawn"
    SUBPROCESS_JOIN = "subprocess_join"
    SCHEDULE_LAUNCH = "schedule_launch"
    TRIGGER_DISPATCH = "trigger_dispatch"
    EXTERNAL_DISPATCH = "external_dispatch"
    EVENT_DISPATCH = "event_dispatch"
    WEBHOOK_DELIVERY = "webhook_delivery"
    COMPENSATION_ACTION = "compensation_action"
    AUTOMATION_ACTION = "automation_action"

    @property
    def pool(self) -> Pool:
        return POOL_OF_TYPE[self]


POOL_OF_TYPE: dict[JobType, Pool] = {
    JobType.DELAY_WAKE: Pool.ADVANCE,
    JobType.TASK_TIMEOUT: Pool.ADVANCE,
    JobType.SUBPROCESS_SPAWN: Pool.ADVANCE,
    JobType.SUBPROCESS_JOIN: Pool.ADVANCE,
    JobType.SCHEDULE_LAUNCH: Pool.ADVANCE,
    JobType.TRIGGER_DISPATCH: Pool.OUTBOUND,
    JobType.EXTERNAL_DISPATCH: Pool.OUTBOUND,
    JobType.EVENT_DISPATCH: Pool.OUTBOUND,
    JobType.WEBHOOK_DELIVERY: Pool.OUTBOUND,
    JobType.COMPENSATION_ACTION: Pool.OUTBOUND,
    JobType.AUTOMATION_ACTION: Pool.OUTBOUND,
}

# L-STATE-2: the attempt budget is set per type at enqueue time. Outbound calls to receivers that
# may be down get more room; timers and joins are internal and cheap to retry.
DEFAULT_MAX_ATTEMPTS: dict[JobType, int] = {
    JobType.DELAY_WAKE: 5,
    JobType.TASK_TIMEOUT: 5,
    JobType.SUBPROCESS_SPAWN: 5,
    JobType.SUBPROCESS_JOIN: 5,
    JobType.SCHEDULE_LAUNCH: 3,
    JobType.TRIGGER_DISPATCH: 8,
    JobType.EXTERNAL_DISPATCH: 8,
    JobType.EVENT_DISPATCH: 10,
    JobType.WEBHOOK_DELIVERY: 10,
    JobType.COMPENSATION_ACTION: 8,
    JobType.AUTOMATION_ACTION: 8,
}

# L-PAUSE-1 / -3: what an instance suspension pauses (events, webhooks, automation and
# compensation keep running).
SUSPEND_SCOPE: frozenset[JobType] = frozenset(
    {
        JobType.DELAY_WAKE,
        JobType.TASK_TIMEOUT,
        JobType.TRIGGER_DISPATCH,
        JobType.EXTERNAL_DISPATCH,
        JobType.SUBPROCESS_SPAWN,
        JobType.SUBPROCESS_JOIN,
    }
)

# L-PAUSE-4: what terminating / canceling an instance clears (triggers are gated elsewhere).
CLEAR_SCOPE: frozenset[JobType] = frozenset(
    {
        JobType.DELAY_WAKE,
        JobType.TASK_TIMEOUT,
        JobType.EXTERNAL_DISPATCH,
        JobType.SUBPROCESS_SPAWN,
        JobType.SUBPROCESS_JOIN,
    }
)

# Error codes written to ``error_code`` by the ledger itself.
EXTERNAL_OUTCOME_UNKNOWN = "EXTERNAL_OUTCOME_UNKNOWN"
LEASE_EXPIRED = "LEASE_EXPIRED"
DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
HANDLER_MISSING = "HANDLER_MISSING"
HANDLER_ERROR = "HANDLER_ERROR"
PERMANENT_ERROR = "PERMANENT_ERROR"
CANCELED_BY_OPERATOR = "CANCELED"
# The attempt was interrupted because its worker shut down (SIGTERM, a deploy): not a handler failure.
WORKER_SHUTDOWN = "WORKER_SHUTDOWN"


# --------------------------------------------------------------------------- the state machines, as data
class Move(NamedTuple):
    """One transition of a state machine: the function that makes it (``module.function`` under
    ``app/ledger/transitions/`` or ``app/engine/transitions/``, or the module that inserts the row), the
    states it may leave (``()``: the row is created) and the states it may enter. ``guard``: the
    module-level constant that holds ``frm`` in the code (``module.NAME``), when the move reads its guard
    from one. docs/state_machine.md is drawn from these tables (``python -m app.engine.state_diagrams``);
    tests/unit/test_state_machine.py holds them against the code."""

    by: str
    frm: tuple[str, ...]
    to: tuple[str, ...]
    guard: str | None = None


_J = JobStatus
# workflow_jobs.status (the module docstring says who moves a job in and out of each)
JOB_MOVES: tuple[Move, ...] = (
    Move("enqueue.enqueue", (), (_J.PENDING,)),
    Move("enqueue.arm", (), (_J.PENDING,)),
    Move("executor.claim", (_J.PENDING,), (_J.RUNNING,)),
    Move("executor.settle", (_J.RUNNING,), (_J.SUCCEEDED, _J.PENDING, _J.FAILED, _J.DEAD)),
    Move("executor.hand_back", (_J.RUNNING,), (_J.PENDING, _J.DEAD)),
    Move("interventions.reclaim_expired", (_J.RUNNING,), (_J.PENDING, _J.DEAD)),
    Move("interventions.suspend_instance", (_J.PENDING, _J.RUNNING), (_J.PAUSED, _J.DEAD)),
    Move("interventions.resume_instance", (_J.PAUSED,), (_J.PENDING,)),
    Move(
        "interventions.cancel_job",
        (_J.PENDING, _J.RUNNING, _J.PAUSED, _J.FAILED, _J.DEAD),
        (_J.CANCELED,),
    ),
    Move("interventions.cancel_waiting", (_J.PENDING, _J.PAUSED), (_J.CANCELED,)),
    Move("interventions.retry_job", (_J.FAILED, _J.DEAD, _J.CANCELED), (_J.PENDING,)),
)

_A = AttemptStatus
# workflow_job_executions.status: an attempt is open on its job row while the job runs (``running``), and
# its final row is written once, by the move that ends it
ATTEMPT_MOVES: tuple[Move, ...] = (
    Move("executor.claim", (), (_A.RUNNING,)),
    Move("executor.settle", (_A.RUNNING,), (_A.SUCCEEDED, _A.SKIPPED, _A.FAILED)),
    Move("executor.hand_back", (_A.RUNNING,), (_A.FAILED, _A.CANCELED)),
    Move("interventions.reclaim_expired", (_A.RUNNING,), (_A.FAILED,)),
    Move("interventions.suspend_instance", (_A.RUNNING,), (_A.CANCELED,)),
    Move("interventions.cancel_job", (_A.RUNNING,), (_A.CANCELED,)),
)
JOB_TERMINAL: frozenset[str] = frozenset({_J.SUCCEEDED})
ATTEMPT_TERMINAL: frozenset[str] = frozenset({_A.SUCCEEDED, _A.SKIPPED, _A.FAILED, _A.CANCELED})
