"""TRIGGER steps (X-DEF; a step kind of our own): one outbound call per activation through a ``trigger_dispatch`` job.

- before the call: send only while the instance is not finished or stopping and the step is ACTIVE
  on this very activation (L-PAUSE-4: triggers are gated by the instance and the step, not cleared);
- the answer: a 2xx completes the step with ``{"status", "body"}``; any other definite answer
  (3xx: redirects are never followed, 4xx) fails it with ``TRIGGER_REJECTED``. An unknown outcome
  (no response, 408, 429, 5xx, executor lost) is not decided here: the job goes to the dead letter
  and the step and instance to NEEDS_REVIEW (``stopping.to_review``, L-EFFECT-4).
"""

from __future__ import annotations

from typing import Any

from app.engine.decide.model import CompleteStep, FailStep, Ignore, Inst, Step
from app.engine.states import TERMINAL, StepKind, StepState


def may_send(inst: Inst, step: Step | None, activation_id: str) -> Ignore | None:
    """None when the call may go out; otherwise why not (the job is skipped, nothing is sent)."""
    if inst.state in TERMINAL:
        return Ignore(f"workflow is {inst.state}")
    if inst.cancel_requested or inst.stop_requested:
        return Ignore("the workflow is stopping")
    if step is None or step.kind != StepKind.TRIGGER or step.activation_id != activation_id:
        return Ignore("the activation is no longer current")
    if step.state != StepState.ACTIVE:
        return Ignore(f"the step is {step.state}")
    return None


def answered(
    inst: Inst, step: Step | None, activation_id: str, status: int, output: dict[str, Any]
) -> Ignore | CompleteStep | FailStep:
    """A definite answer of the receiver (the call is made; the step follows it if still current)."""
    gate = may_send(inst, step, activation_id)
    if gate is not None:
        return gate
    if 200 <= status < 300:
        return CompleteStep(output)
    return FailStep({"code": "TRIGGER_REJECTED", "status": status, "response": output})
