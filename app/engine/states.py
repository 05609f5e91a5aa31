"""The states of the workflow engine's rows, and who moves a row in and out of each.

Every move is a named, guarded statement in ``app/engine/transitions/`` (``WHERE state = ANY(:from)``);
nothing else writes a ``state`` column of ``workflow_instances``, ``workflow_steps``,
``workflow_activations``, ``workflow_tasks``, ``workflow_waits`` or ``workflow_signals``
(``tests/unit/test_engine_write_scan.py`` checks the source). The decisions (which move happens on which
event) are pure functions in ``app/engine/decide/``; ``app/engine/advance.py`` applies them.

Instance (``workflow_instances.state``; ``paused`` is a flag beside it, not a state):

- ``RUNNING``      in: ``instances.create``; ``instances.set_progress`` (a step is ACTIVE, or nothing waits);
                   ``instances.leave_review``.  out: any move below.
- ``WAITING``      in: ``instances.set_progress`` (only waits remain: timers, signals, retry backoff, poll
                   interval).  out: ``set_progress`` -> RUNNING, ``request_cancel``, ``to_review``, ``end``.
- ``CANCELLING``   in: ``instances.request_cancel`` (operator / parent cancel), ``instances.start_compensation``
                   (a failing instance runs its compensations).  out: ``end`` (CANCELLED / FAILED after the
                   last compensation), ``to_review``.
- ``NEEDS_REVIEW`` in: ``instances.to_review`` (unknown external outcome, failed compensation).
                   out: ``leave_review`` (operator recovery) -> RUNNING / CANCELLING, ``end``.
- ``SUCCEEDED`` / ``FAILED`` / ``CANCELLED``  in: ``instances.end`` only.  out: none (terminal).

Step (``workflow_steps.state``) and its current activation (``workflow_activations.state``, same values):

- ``BLOCKED``      in: ``instances.create`` (``steps.insert_all``).  out: ``steps.activate`` -> ACTIVE / WAITING.
- ``ACTIVE``       in: ``steps.activate`` (TASK, POLL, SUBWORKFLOW, TRIGGER), ``steps.set_active`` (next task attempt,
                   next poll round).  out: ``set_waiting``, ``succeed``, ``fail``, ``cancel_*``, ``to_review``.
- ``WAITING``      in: ``steps.activate`` (TIMER, SIGNAL), ``steps.set_waiting`` (retry backoff, poll interval).
                   out: ``set_active``, ``succeed``, ``fail``, ``cancel_*``, ``to_review``.
- ``NEEDS_REVIEW`` in: ``steps.to_review`` (also a TRIGGER whose call has an unknown outcome).  out: ``steps.close`` / ``steps.activate`` (operator recovery).
- ``SUCCEEDED``    in: ``steps.succeed`` (task result, timer, signal, child, trigger answer), ``steps.close`` (operator).
                   out: ``steps.activate`` (operator RETRY_STEP only).
- ``FAILED`` / ``CANCELLED``  in: ``steps.fail`` / ``steps.cancel_*`` / ``steps.close``.
                   out: ``steps.activate`` (operator RETRY_STEP only).
- ``SKIPPED``      reserved by the schema; no transition enters it today.

An activation row is created by ``steps.activate`` in ACTIVE / WAITING and leaves that state exactly once
(succeed, fail, cancel, review, close); a new activation is a new row with ``sequence + 1``.

Task (``workflow_tasks.state``):

- ``PENDING``    in: ``tasks.insert``; ``tasks.return_expired`` (lease passed).  out: ``claim``, ``cancel_*``,
                 ``time_out``.
- ``CLAIMED``    in: ``tasks.claim`` (epoch + 1).  out: ``complete``, ``fail``, ``time_out``, ``return_expired``,
                 ``cancel_*``.
- ``COMPLETED`` / ``FAILED`` / ``TIMED_OUT`` / ``CANCELLED``  terminal.

Wait (``workflow_waits.state``): ``WAITING`` in: ``waits.insert``; out: ``waits.resolve`` (timer due, signal
consumed, poll resolved) -> RESOLVED, ``waits.expire`` -> EXPIRED, ``waits.cancel_*`` -> CANCELLED.

Signal (``workflow_signals.state``): ``PENDING`` in: ``signals.insert``; out: ``signals.settle`` -> CONSUMED /
REJECTED, ``signals.expire`` -> EXPIRED, ``signals.close_pending`` -> REJECTED (WORKFLOW_ENDED). A signal for
an older activation is inserted REJECTED (STALE_ACTIVATION) directly.
"""

from __future__ import annotations

from enum import StrEnum


class InstanceState(StrEnum):
    RUNNING = "RUNNING"
    WAITING = "WAITING"
    CANCELLING = "CANCELLING"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


class StepState(StrEnum):
    BLOCKED = "BLOCKED"
    ACTIVE = "ACTIVE"
    WAITING = "WAITING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    NEEDS_REVIEW = "NEEDS_REVIEW"
    SKIPPED = "SKIPPED"


ActivationState = StepState  # an activation carries the state of its step's current run


class StepKind(StrEnum):
    ROOT = "ROOT"
    TASK = "TASK"
    SIGNAL = "SIGNAL"
    TIMER = "TIMER"
    POLL = "POLL"
    SUBWORKFLOW = "SUBWORKFLOW"
    TRIGGER = "TRIGGER"  # one outbound call (``trigger_dispatch`` job, outbound pool; ``decide/triggers``)


class TaskState(StrEnum):
    PENDING = "PENDING"
    CLAIMED = "CLAIMED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    CANCELLED = "CANCELLED"


class TaskPurpose(StrEnum):
    STEP = "STEP"  # a step's own task: holds a cancel open while claimed
    COMPENSATION = "COMPENSATION"  # created by a compensation_action job (saga)


class WaitState(StrEnum):
    WAITING = "WAITING"
    RESOLVED = "RESOLVED"
    EXPIRED = "EXPIRED"
    CANCELLED = "CANCELLED"


class SignalState(StrEnum):
    PENDING = "PENDING"
    CONSUMED = "CONSUMED"
    REJECTED = "REJECTED"
    EXPIRED = "EXPIRED"


class StopKind(StrEnum):
    CANCEL = "CANCEL"
    FAILURE = "FAILURE"


class CompensationState(StrEnum):
    """``workflow_instances.compensation->>'state'`` (the saga chain, ``app.engine.stopping``)."""

    RUNNING = "RUNNING"
    FAILED = "FAILED"
    DONE = "DONE"
    ABANDONED = "ABANDONED"


TERMINAL: frozenset[str] = frozenset({InstanceState.SUCCEEDED, InstanceState.FAILED, InstanceState.CANCELLED})
STEP_OPEN: frozenset[str] = frozenset({StepState.ACTIVE, StepState.WAITING})
STEP_DONE: frozenset[str] = frozenset({StepState.SUCCEEDED, StepState.SKIPPED})
TASK_OPEN: frozenset[str] = frozenset({TaskState.PENDING, TaskState.CLAIMED})
ADVANCING: frozenset[str] = frozenset({InstanceState.RUNNING, InstanceState.WAITING})


def values(enum: type[StrEnum]) -> list[str]:
    return [m.value for m in enum]
