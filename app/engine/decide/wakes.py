"""Timed events on a step (``delay_wake`` jobs) and a child's end: whether they still apply."""

from __future__ import annotations

from app.engine.decide.model import CompleteStep, FailStep, Ignore, Poll, Step
from app.engine.states import InstanceState, StepKind, StepState


def timer_due(step: Step | None) -> Ignore | None:
    """A TIMER's wake: None = go on (the wait is resolved if it is due)."""
    if step is None or step.state != StepState.WAITING:
        return Ignore("the timer's activation is no longer current")
    return None


def signal_timeout(step: Step | None) -> Ignore | None:
    if step is None or step.state != StepState.WAITING:
        return Ignore("the wait's activation is no longer current")
    return None


SIGNAL_TIMEOUT = {"code": "SIGNAL_TIMEOUT", "message": "no signal before the deadline"}


def poll_wake(step: Step | None, poll: Poll | None, round_no: int) -> Ignore | FailStep | None:
    """The interval passed: round ``round_no`` starts (None) if the step still waits for exactly it."""
    if step is None or poll is None:
        return Ignore("the poll's activation is no longer current")
    if step.state != StepState.WAITING or poll.current_task is not None or poll.used_rounds + 1 != round_no:
        return Ignore(f"round {round_no} is not due")
    if poll.past_deadline:
        return FailStep({"code": "POLL_DEADLINE_EXCEEDED"})
    return None


def task_retry(step: Step | None, attempt: int) -> Ignore | None:
    """A TASK step's backoff passed: attempt ``attempt`` starts (None) if it is still awaited."""
    if (
        step is None
        or step.kind != StepKind.TASK
        or step.state != StepState.WAITING
        or step.task_attempts + 1 != attempt
    ):
        return Ignore(f"attempt {attempt} is no longer awaited")
    return None


def child_ended(
    step: Step | None, child_id: str, step_child: str | None, child_state: str, child_output: object
) -> Ignore | CompleteStep | FailStep:
    """A SUBWORKFLOW child ended: the parent step follows it (W-STEP-4)."""
    if step is None or step.state != StepState.ACTIVE or step_child != child_id:
        return Ignore("the parent step no longer waits for this child")
    if child_state == InstanceState.SUCCEEDED:
        return CompleteStep(child_output)
    if child_state in (InstanceState.FAILED, InstanceState.CANCELLED):
        return FailStep({"code": "CHILD_FAILED", "child_workflow_id": child_id, "child_state": child_state})
    return Ignore("the child has not finished")
