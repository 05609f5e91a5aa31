"""Signals with identity (W-SIG): where an accepted signal goes, and whether it wins its wait."""

from __future__ import annotations

from typing import Any

from app.engine.decide.model import Consume, Refuse, Reject, Step
from app.engine.states import STEP_OPEN, StepKind, WaitState

PENDING_NOW = "PENDING_NOW"  # for the current activation: offered to its wait at once
PENDING_EARLY = "PENDING_EARLY"  # for activation 1 before it exists: waits (until it expires)
STALE = "STALE_ACTIVATION"


def accepts(spec: dict[str, Any], name: str, payload_version: str) -> bool:
    """The step waits for this signal contract (a SIGNAL step, or a POLL's final signal)."""
    if spec["kind"] == StepKind.SIGNAL:
        return (spec["signal"], spec["payload_version"]) == (name, payload_version)
    fs = spec.get("final_signal") if spec["kind"] == StepKind.POLL else None
    if not fs:
        return False
    return (fs["signal"], fs["payload_version"]) == (name, payload_version)


def target(step_key: str, sequence: int, current: int) -> str | Refuse:
    """A signal for activation ``sequence`` of a step now at activation ``current`` (0: never activated)."""
    if sequence > max(current, 1):
        return Refuse(
            f"activation {sequence} of step {step_key!r} does not exist (current: {current}); "
            "read activation_sequence from the step"
        )
    if sequence < current:
        return STALE
    return PENDING_NOW if current and sequence == current else PENDING_EARLY


def offer(step: Step, wait: dict[str, Any] | None, signal: dict[str, Any]) -> Consume | Reject:
    """A PENDING signal offered to the wait of its (current) activation: the first event wins (W-SIG-5)."""
    if (
        wait is None
        or wait["kind"] != "SIGNAL"
        or wait["state"] != WaitState.WAITING
        or step.state not in STEP_OPEN
    ):
        return Reject("WAIT_CLOSED")
    if (wait["name"], wait["payload_version"]) != (signal["name"], signal["payload_version"]):
        return Reject("CONTRACT_MISMATCH")
    if wait["correlation_key"] is not None and wait["correlation_key"] != signal["correlation_key"]:
        return Reject("CORRELATION_MISMATCH")
    return Consume()
