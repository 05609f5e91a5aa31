"""The states of the workflow engine's rows, and who moves a row in and out of each.

Every move is a named, guarded statement in ``app/engine/transitions/`` (``WHERE state = ANY(:from)``);
nothing else writes a ``state`` column of ``workflow_instances``, ``workflow_steps``,
``workflow_activations``, ``workflow_tasks``, ``workflow_waits`` or ``workflow_signals``
(``tests/unit/test_engine_write_scan.py`` checks the source). The decisions (which move happens on which
event) are pure functions in ``app/engine/decide/``; ``app/engine/driver.py`` applies them.

Instance (``workflow_instances.state``; ``paused`` is a flag beside it, not a state):

- ``RUNNING``      in: ``instance_moves.create``; ``instance_moves.set_progress`` (a step is ACTIVE, or nothing waits);
                   ``instance_moves.leave_review``.  out: any move below.
- ``WAITING``      in: ``instance_moves.set_progress`` (only waits remain: timers, signals, retry backoff, poll
                   interval).  out: ``set_progress`` -> RUNNING, ``request_cancel``, ``to_review``, ``end``.
- ``CANCELLING``   in: ``instance_moves.request_cancel`` (operator / parent cancel), ``instance_moves.start_compensation``
                   (a failing instance runs its compensations).  out: ``end`` (CANCELLED / FAILED after the
                   last compensation), ``to_review``.
- ``NEEDS_REVIEW`` in: ``instance_moves.to_review`` (unknown external outcome, failed compensation).
                   out: ``leave_review`` (operator recovery) -> RUNNING / CANCELLING, ``end``.
- ``SUCCEEDED`` / ``FAILED`` / ``CANCELLED``  in: ``instance_moves.end`` only.  out: none (terminal).

Step (``workflow_steps.state``) and its current activation (``workflow_steps.act_state``, same values):

- ``BLOCKED``      not stored: a declared step without a row (``row_access.read_steps`` reads it from the pinned document;
                   a start writes none, ``step_moves.blocked_all``).  out: ``step_moves.activate`` -> ACTIVE / WAITING
                   (inserts the step's row; a row already there refuses the move), ``step_moves.skip`` -> SKIPPED.
- ``ACTIVE``       in: ``step_moves.activate`` (TASK, POLL, SUBWORKFLOW, TRIGGER), ``step_moves.set_active`` (next task attempt,
                   next poll round).  out: ``set_waiting``, ``succeed``, ``task_moves.complete_closing_step`` (with
                   its task), ``fail``, ``cancel_*``, ``to_review``.
- ``WAITING``      in: ``step_moves.activate`` (TIMER, SIGNAL), ``step_moves.set_waiting`` (retry backoff, poll interval).
                   out: ``set_active``, ``succeed``, ``wait_moves.try_fire_due`` (a TIMER, with its wait),
                   ``task_moves.complete_closing_step`` (with its task), ``fail``, ``cancel_*``, ``to_review``.
- ``NEEDS_REVIEW`` in: ``step_moves.to_review`` (also a TRIGGER whose call has an unknown outcome).  out: ``step_moves.close`` / ``step_moves.activate`` (operator recovery).
- ``SUCCEEDED``    in: ``step_moves.succeed`` (task result, signal, child, trigger answer), ``wait_moves.try_fire_due``
                   (a timer: its wait and its step in one statement), ``task_moves.complete_closing_step`` (a
                   task's completion: its task and its step in one statement), ``step_moves.close`` (operator).
                   out: none (``step_moves.RESOLVABLE``, the states an operator's RETRY_STEP may leave, leaves it out).
- ``FAILED`` / ``CANCELLED``  in: ``step_moves.fail`` / ``step_moves.cancel_*`` / ``step_moves.close``.
                   out: ``step_moves.activate`` (operator RETRY_STEP only).
- ``SKIPPED``      in: ``step_moves.skip`` (from BLOCKED: its condition is false, or every dependency was skipped;
                   the skip rule in ``decide/progress.py``).  out: none (a settled step, like SUCCEEDED for what follows).

An activation is begun by ``step_moves.activate`` in ACTIVE / WAITING, on its step's row, and leaves that state
exactly once (succeed, fail, cancel, review, close); a new activation (``sequence + 1``, an operator's RETRY_STEP)
first copies the current one to ``workflow_activations`` (``step_moves.insert_activation``).

Task (``workflow_tasks.state``):

- ``PENDING``    in: ``task_moves.insert``; ``task_moves.return_expired`` (lease passed).  out: ``claim``, ``cancel_*``,
                 ``time_out``.
- ``CLAIMED``    in: ``task_moves.claim`` (epoch + 1).  out: ``complete`` (``complete_closing_step``: with its step), ``fail``, ``time_out``, ``return_expired``,
                 ``cancel_*``.
- ``COMPLETED`` / ``FAILED`` / ``TIMED_OUT`` / ``CANCELLED``  terminal.

Wait (``workflow_waits.state``): ``WAITING`` in: ``wait_moves.insert``; out: ``wait_moves.try_fire_due`` (timer
due, its step SUCCEEDED in the same statement), ``resolve_by_signal`` (signal consumed), ``resolve_open`` (poll resolved) -> RESOLVED, ``try_expire_due`` ->
EXPIRED, ``cancel_open`` -> CANCELLED. The two ``*_due`` moves record the job operation that made them
(``resolved_by_operation``): the wait is that job's effect receipt (``handlers.timers.WaitReceipt``).

Signal (``workflow_signals.state``): ``PENDING`` in: ``signal_moves.insert``; out: ``signal_moves.dispose`` -> CONSUMED /
REJECTED, ``signal_moves.expire`` -> EXPIRED, ``signal_moves.close_pending`` -> REJECTED (WORKFLOW_ENDED). A signal for
an older activation is inserted REJECTED (STALE_ACTIVATION) directly.
"""

from __future__ import annotations

from enum import StrEnum

from app.ledger.states import Move


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
    ROOT = "ROOT"  # the $root row starts used to store (none since migration 0020); kept for the kind check
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


def ended_sql(alias: str) -> str:
    """SQL: the instance ``alias`` has ended (its state is in TERMINAL), said as the partial indexes say it
    (migration 0034): ``completed_at`` is set exactly when the state is terminal (the constraint
    ``ck_workflow_instances_ended``), and no index reads ``state``, so that a move between open states is a
    HOT update."""
    return f"{alias}.completed_at IS NOT NULL"


def task_open_sql(column: str = "state") -> str:
    """SQL: the task state ``column`` is open (PENDING or CLAIMED), said as "not closed": ``state IN
    ('PENDING', 'CLAIMED')`` is the predicate of the claim's partial index, and a prepared statement's plan
    made while that index was small read the whole index, every open task of every namespace, to find one
    instance's; "not closed" cannot use it, so the instance's own index is read (``row_access._OPEN_WORK``,
    tests/db/test_open_tasks_plans.py)."""
    closed = ", ".join(f"'{s.value}'" for s in TaskState if s not in TASK_OPEN)
    return f"{column} NOT IN ({closed})"


def unfinished_sql(alias: str) -> str:
    """SQL: the instance ``alias`` has not ended (``ended_sql``'s negation, as the unfinished index says it)."""
    return f"{alias}.completed_at IS NULL"


# --------------------------------------------------------------------------- the state machines, as data
# Every move of the prose above as a row (``app.ledger.states.Move``): docs/state_machine.md is drawn from
# these tables (``python -m app.engine.state_diagrams``), and tests/unit/test_state_machine.py holds them
# against the transitions modules (each function exists, names its target states, and guards with the
# states listed here).
_I, _S, _T, _W, _G = InstanceState, StepState, TaskState, WaitState, SignalState
_OPEN_INSTANCE = (_I.RUNNING, _I.WAITING, _I.CANCELLING, _I.NEEDS_REVIEW)
_OPEN_STEP = (_S.ACTIVE, _S.WAITING)
_RESOLVABLE = (_S.ACTIVE, _S.WAITING, _S.FAILED, _S.CANCELLED, _S.NEEDS_REVIEW)

INSTANCE_MOVES: tuple[Move, ...] = (
    Move("instance_moves.create", (), (_I.RUNNING,)),
    Move(
        "instance_moves.set_progress", (_I.RUNNING, _I.WAITING), (_I.RUNNING, _I.WAITING), "states.ADVANCING"
    ),
    Move(
        "instance_moves.request_cancel",
        (_I.RUNNING, _I.WAITING, _I.NEEDS_REVIEW),
        (_I.CANCELLING,),
        "instance_moves.CANCELLABLE",
    ),
    Move("instance_moves.start_compensation", _OPEN_INSTANCE, (_I.CANCELLING,), "instance_moves.OPEN"),
    Move(
        "instance_moves.save_compensation",
        _OPEN_INSTANCE,
        (_I.CANCELLING, _I.NEEDS_REVIEW),
        "instance_moves.OPEN",
    ),
    Move("instance_moves.to_review", _OPEN_INSTANCE, (_I.NEEDS_REVIEW,), "instance_moves.OPEN"),
    Move(
        "instance_moves.leave_review",
        (_I.NEEDS_REVIEW, _I.RUNNING, _I.WAITING, _I.CANCELLING),
        (_I.RUNNING, _I.CANCELLING),
        "instance_moves.REVIEWABLE",
    ),
    Move(
        "instance_moves.end", _OPEN_INSTANCE, (_I.SUCCEEDED, _I.FAILED, _I.CANCELLED), "instance_moves.OPEN"
    ),
)

# A step (``workflow_steps.state``); BLOCKED is not stored (a declared step without a row).
STEP_MOVES: tuple[Move, ...] = (
    Move("step_moves.blocked_all", (), (_S.BLOCKED,)),
    Move("step_moves.activate", (_S.BLOCKED,), (_S.ACTIVE, _S.WAITING)),
    Move("step_moves.activate", _RESOLVABLE, (_S.ACTIVE, _S.WAITING), "step_moves.RESOLVABLE"),
    Move("step_moves.set_active", _OPEN_STEP, (_S.ACTIVE,), "step_moves.OPEN"),
    Move("step_moves.set_waiting", _OPEN_STEP, (_S.WAITING,), "step_moves.OPEN"),
    Move("step_moves.succeed", _OPEN_STEP, (_S.SUCCEEDED,), "step_moves.OPEN"),
    Move("wait_moves.try_fire_due", (_S.WAITING,), (_S.SUCCEEDED,)),
    Move("task_moves.complete_closing_step", _OPEN_STEP, (_S.SUCCEEDED,), "states.STEP_OPEN"),
    Move("step_moves.fail", _OPEN_STEP, (_S.FAILED,), "step_moves.OPEN"),
    Move("step_moves.cancel", _OPEN_STEP, (_S.CANCELLED,), "step_moves.OPEN"),
    Move("step_moves.cancel_open", _OPEN_STEP, (_S.CANCELLED,), "step_moves.OPEN"),
    Move("step_moves.to_review", _OPEN_STEP, (_S.NEEDS_REVIEW,), "step_moves.OPEN"),
    Move("step_moves.close", _RESOLVABLE, (_S.SUCCEEDED, _S.FAILED), "step_moves.RESOLVABLE"),
)

# A step's current activation (``workflow_steps.act_state``): begun by ``activate``, ended once; an
# operator's RETRY_STEP copies it to ``workflow_activations`` and begins the next.
ACTIVATION_MOVES: tuple[Move, ...] = (
    Move("step_moves.activate", (), (_S.ACTIVE, _S.WAITING)),
    Move("step_moves.succeed", _OPEN_STEP, (_S.SUCCEEDED,), "step_moves.OPEN"),
    Move("wait_moves.try_fire_due", _OPEN_STEP, (_S.SUCCEEDED,), "step_moves.OPEN"),
    Move("task_moves.complete_closing_step", _OPEN_STEP, (_S.SUCCEEDED,), "states.STEP_OPEN"),
    Move("step_moves.fail", _OPEN_STEP, (_S.FAILED,), "step_moves.OPEN"),
    Move("step_moves.cancel", _OPEN_STEP, (_S.CANCELLED,), "step_moves.OPEN"),
    Move("step_moves.cancel_open", _OPEN_STEP, (_S.CANCELLED,), "step_moves.OPEN"),
    Move(
        "step_moves.end_activation_for_retry",
        _OPEN_STEP + (_S.NEEDS_REVIEW,),
        (_S.CANCELLED,),
        "CASE WHEN act_state IN ('SUCCEEDED', 'FAILED') THEN act_state ELSE 'CANCELLED' END",
    ),
    Move("step_moves.to_review", _OPEN_STEP, (_S.NEEDS_REVIEW,), "step_moves.OPEN"),
    Move("step_moves.close", _RESOLVABLE, (_S.SUCCEEDED, _S.FAILED), "step_moves.RESOLVABLE"),
)

TASK_MOVES: tuple[Move, ...] = (
    Move("task_moves.insert", (), (_T.PENDING,)),
    Move("task_moves.claim", (_T.PENDING, _T.CLAIMED), (_T.CLAIMED,)),
    Move("task_moves.return_expired", (_T.CLAIMED,), (_T.PENDING,)),
    Move("task_moves.complete", (_T.CLAIMED,), (_T.COMPLETED,)),
    Move("task_moves.complete_closing_step", (_T.CLAIMED,), (_T.COMPLETED,)),
    Move("task_moves.fail", (_T.CLAIMED,), (_T.FAILED,)),
    Move("task_moves.try_time_out", (_T.PENDING, _T.CLAIMED), (_T.TIMED_OUT,), "task_moves.OPEN"),
    Move("task_moves.cancel_open", (_T.PENDING, _T.CLAIMED), (_T.CANCELLED,), "task_moves.OPEN"),
)

WAIT_MOVES: tuple[Move, ...] = (
    Move("wait_moves.insert", (), (_W.WAITING,)),
    Move("wait_moves.try_fire_due", (_W.WAITING,), (_W.RESOLVED,)),
    Move("wait_moves.resolve_by_signal", (_W.WAITING,), (_W.RESOLVED,)),
    Move("wait_moves.resolve_open", (_W.WAITING,), (_W.RESOLVED,)),
    Move("wait_moves.try_expire_due", (_W.WAITING,), (_W.EXPIRED,)),
    Move("wait_moves.cancel_open", (_W.WAITING,), (_W.CANCELLED,)),
)

SIGNAL_MOVES: tuple[Move, ...] = (
    Move("signal_moves.insert", (), (_G.PENDING, _G.REJECTED)),
    Move("signal_moves.dispose", (_G.PENDING,), (_G.CONSUMED, _G.REJECTED)),
    Move("signal_moves.try_expire", (_G.PENDING,), (_G.EXPIRED,)),
    Move("signal_moves.close_pending", (_G.PENDING,), (_G.REJECTED,)),
)

# States no move enters yet (drawn apart, and the test knows them).
UNREACHED: dict[str, frozenset[str]] = {
    "step": frozenset({_S.SKIPPED}),
    "activation": frozenset({_S.SKIPPED}),
}
