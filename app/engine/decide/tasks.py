"""What a task's end does to its step (X-TASK, W-STEP-3, W-CTL-3): complete, retry (now or after a
backoff), fail; for a POLL step the round bookkeeping; during a cancel, only a record."""

from __future__ import annotations

from typing import Any

from app.engine.decide.model import (
    Collect,
    CompleteStep,
    FailStep,
    Ignore,
    Inst,
    Poll,
    PollFail,
    PollNextRound,
    PollRetry,
    RetryTask,
    Step,
)
from app.engine.states import STEP_OPEN, TERMINAL, StepKind, StepState

DEFAULT_BACKOFF_SECONDS = 30
DEFAULT_MAX_BACKOFF_SECONDS = 900
COMPLETED = "completed"
FAILED = "failed"


def retry_delay_seconds(policy: dict[str, Any], failed_attempt: int) -> int:
    """A TASK step's retry backoff (like the ledger's L-STATE-3 curve): attempt n+1 starts
    ``backoff_seconds * 2^(n-1)`` after attempt n failed or timed out, one delay capped at
    ``max_backoff_seconds``; ``backoff_seconds: 0`` retries at once."""
    base: int = policy.get("backoff_seconds", DEFAULT_BACKOFF_SECONDS)
    cap: int = policy.get("max_backoff_seconds", DEFAULT_MAX_BACKOFF_SECONDS)
    if base <= 0:
        return 0
    # typed: int ** int is Any to mypy (a negative power gives a float)
    delay: int = base * 2 ** max(failed_attempt - 1, 0)
    return min(delay, max(cap, 0))


def poll_done(kind: str, value: Any) -> bool:
    return kind == COMPLETED and isinstance(value, dict) and value.get("done") is True


def completes_with_its_step(inst: Inst, task: dict[str, Any], spec: dict[str, Any]) -> bool:
    """Whether a task's completion, as the instance ``inst`` is, completes its step when that step's current
    activation is the task's, open, and not a POLL's: then ``task_ended`` answers ``CompleteStep`` whatever
    else the step says, so the completion's statement may close the step with the task
    (``task_moves.complete_closing_step``, guarded by those three, the step row's part of the rule). A
    step task (not a compensation's) of a step that is no fan-out, in an instance neither ended nor
    cancelling."""
    return (
        task.get("purpose") != "COMPENSATION"
        and "for_each" not in spec
        and inst.state not in TERMINAL
        and not inst.cancel_requested
    )


def task_ended(
    inst: Inst, step: Step | None, task: dict[str, Any], spec: dict[str, Any], kind: str, value: Any
) -> Ignore | Collect | CompleteStep | RetryTask | FailStep | str:
    """A step task (``task``: its ``id`` and ``activation_id``) ended (``kind`` completed / failed;
    ``value`` = output / error). Returns the effect, or ``"POLL"`` when the POLL decision
    (``poll_round``) takes over."""
    task_activation = task["activation_id"]
    if inst.state in TERMINAL:
        return Ignore(f"the workflow is {inst.state}")
    if inst.cancel_requested:
        if step is None or step.activation_id != task_activation or step.state not in STEP_OPEN:
            return Collect(None)  # nothing to record; the cancel may settle now
        succeeded = kind == COMPLETED and (step.kind != StepKind.POLL or poll_done(kind, value))
        if succeeded:
            return Collect(StepState.SUCCEEDED, value)
        return Collect(StepState.FAILED if kind == FAILED else StepState.CANCELLED, value)
    if step is None or step.activation_id != task_activation or step.state not in STEP_OPEN:
        return Ignore("the task does not belong to the step's current activation")
    if step.kind == StepKind.POLL:
        return "POLL"
    if kind == COMPLETED:
        return CompleteStep(value)
    policy = spec.get("retry", {})
    if value.get("retryable", True) and step.task_attempts < policy.get("max_attempts", 1):
        return RetryTask(step.task_attempts + 1, retry_delay_seconds(policy, step.task_attempts))
    code = "TASK_TIMEOUT" if value.get("code") == "TASK_TIMEOUT" else "TASK_FAILED"
    return FailStep({"code": code, "message": value.get("message", ""), "task_id": task["id"]})


def poll_round(
    poll: Poll, spec: dict[str, Any], kind: str, value: Any, *, next_round_late: bool
) -> CompleteStep | FailStep | PollRetry | PollNextRound | PollFail:
    """A POLL task ended. ``next_round_late``: the next round would start after the poll deadline."""
    if poll_done(kind, value):
        return CompleteStep(value)
    if kind == FAILED:
        if not value.get("retryable", True):
            return FailStep({"code": "TASK_FAILED", **value})
        if poll.round_attempts < spec["max_attempts_per_round"] and not poll.past_deadline:
            return PollRetry()
    used = poll.used_rounds + 1  # the round is used up (not done, or its attempts are exhausted)
    if used >= spec["max_rounds"]:
        return PollFail(used, {"code": "POLL_EXHAUSTED", "used_rounds": used})
    if next_round_late:
        return PollFail(used, {"code": "POLL_DEADLINE_EXCEEDED"})
    return PollNextRound(used, used + 1)
