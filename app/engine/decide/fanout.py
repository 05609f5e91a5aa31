"""Fan-out over data (a TASK or SUBWORKFLOW step with ``for_each``; docs/reference.md "Fan-out"): one
task (or one child workflow) per element of an array, at most ``max_parallel`` in flight, each task
element retried by the step's retry policy; the step's output is the array of the elements' outputs in
element order.

- an element's task completed (its child succeeded): the element is done;
- its task failed: another attempt of the element (retryable, attempts left; after the step's retry
  backoff, ``retry_delay``), or the element failed for good; a child that failed or was cancelled is an
  element failed for good (a SUBWORKFLOW step has no retry policy);
- more than ``tolerance`` elements failed for good: no element starts any more, and once the elements in
  flight have ended the step fails with the first failed element's index and error
  (``FANOUT_ELEMENT_FAILED``);
- else the free places start the next elements in order; when every element ended the step succeeds
  (an element that failed within the tolerance has ``null`` as its output).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.engine.decide.model import Collect, CompleteStep, FailStep, Ignore, Inst, Step
from app.engine.decide.tasks import retry_delay_seconds
from app.engine.states import STEP_OPEN, TERMINAL

# elements per step (default, and the platform's maximum a step may set), elements in flight
FANOUT_DEFAULT_ITEMS = 1000
FANOUT_MAX_ITEMS = 10_000
FANOUT_DEFAULT_PARALLEL = 10
FANOUT_MAX_PARALLEL = 1000
TOO_LARGE = "FANOUT_TOO_LARGE"
NOT_AN_ARRAY = "FANOUT_NOT_AN_ARRAY"
ELEMENT_FAILED = "FANOUT_ELEMENT_FAILED"


@dataclass(frozen=True)
class Element:
    """The latest task of one started element."""

    index: int
    state: str  # a TaskState
    attempt: int
    task_id: str
    error: Any = None


@dataclass(frozen=True)
class Progress:
    """What the elements of one activation have done: ``started`` elements (each has a task), of which
    ``running`` have an open task and ``done`` a completed one; the others failed for good (an
    element's retry is created in the transaction of its failure)."""

    total: int
    started: int = 0
    running: int = 0
    done: int = 0

    @property
    def failed(self) -> int:
        return self.started - self.running - self.done

    def by_state(self) -> dict[str, int]:
        return {
            "pending": self.total - self.started,
            "running": self.running,
            "done": self.done,
            "failed": self.failed,
        }


@dataclass(frozen=True)
class RetryElement:
    index: int
    attempt: int


@dataclass(frozen=True)
class StartElements:
    """Start these elements (each its first attempt); empty: nothing to do until another element ends."""

    indexes: tuple[int, ...] = field(default_factory=tuple)


def gate(inst: Inst, step: Step | None, task: dict[str, Any]) -> Ignore | Collect | None:
    """Whether an element's task end moves its step (None), is only recorded by a settling cancel
    (``Collect(None)``: one element never settles the whole step; the cancel closes it when nothing is in
    flight), or is ignored (the workflow ended, the task is of an older activation)."""
    if inst.state in TERMINAL:
        return Ignore(f"the workflow is {inst.state}")
    if inst.cancel_requested:
        return Collect(None)
    if step is None or step.activation_id != task["activation_id"] or step.state not in STEP_OPEN:
        return Ignore("the task does not belong to the step's current activation")
    return None


def plan(
    spec: dict[str, Any], progress: Progress, ended: Element | None
) -> RetryElement | StartElements | CompleteStep | FailStep:
    """What follows the end of element ``ended``'s latest task (None: the activation just began, or the
    task is not its element's latest). A ``FailStep`` names no element yet: the driver adds the first
    failed element's index, task and error (read once, when the step fails)."""
    fe = spec["for_each"]
    policy = spec.get("retry", {})
    if ended is not None and ended.state in ("FAILED", "TIMED_OUT"):
        err = ended.error if isinstance(ended.error, dict) else {}
        if err.get("retryable", True) and ended.attempt < policy.get("max_attempts", 1):
            return RetryElement(ended.index, ended.attempt + 1)
    if progress.failed > fe.get("tolerance", 0):
        if progress.running:
            return StartElements()
        return FailStep({"code": ELEMENT_FAILED, "failed_elements": progress.failed})
    if progress.started < progress.total:
        room = fe.get("max_parallel", FANOUT_DEFAULT_PARALLEL) - progress.running
        end = min(progress.total, progress.started + max(room, 0))
        return StartElements(tuple(range(progress.started, end)))
    if progress.running:
        return StartElements()
    return CompleteStep(None)  # the driver reads the outputs in element order


def retry_delay(spec: dict[str, Any], retry: RetryElement) -> int:
    """Seconds before attempt ``retry.attempt`` of an element starts: the backoff a plain task of the
    step waits before the same attempt (``decide.tasks.retry_delay_seconds``; 0: at once)."""
    return retry_delay_seconds(spec.get("retry", {}), retry.attempt - 1)


def child_state(instance_state: str) -> str:
    """A fan-out child's state as the task state ``Element`` speaks of: open (``CLAIMED``), ``COMPLETED``
    (it succeeded), or its end without success (``FAILED`` / ``CANCELLED``)."""
    if instance_state == "SUCCEEDED":
        return "COMPLETED"
    if instance_state in TERMINAL:
        return instance_state
    return "CLAIMED"


def first_failure(elements: list[Element]) -> dict[str, Any]:
    """The failed element of lowest index among every element's latest task, for the step's error."""
    failed = [e for e in elements if e.state not in ("PENDING", "CLAIMED", "COMPLETED")]
    if not failed:
        return {}
    first = min(failed, key=lambda e: e.index)
    err = first.error if isinstance(first.error, dict) else {}
    return {
        "message": f"element {first.index} failed: {err.get('message', first.state)}",
        "element": first.index,
        "task_id": first.task_id,
        "error": err,
    }
