"""What happens after anything changed in an instance: which steps activate, and the instance's state."""

from __future__ import annotations

from app.engine.decide.model import Activate, Finish, SetProgress, SettleCancel, Snapshot
from app.engine.states import ADVANCING, STEP_DONE, TERMINAL, InstanceState, StepState

Effect = Activate | Finish | SetProgress | SettleCancel


def ready_steps(snap: Snapshot) -> tuple[str, ...]:
    """BLOCKED steps all of whose ``after`` steps SUCCEEDED."""
    states = {s.key: s.state for s in snap.steps}
    return tuple(
        s.key
        for s in snap.steps
        if s.state == StepState.BLOCKED and all(states.get(d) == StepState.SUCCEEDED for d in s.after)
    )


def progress(snap: Snapshot) -> Effect | None:
    """One decision of the driver's loop (``advance.settle_progress``): ``Activate`` continues the
    loop; ``Finish``, ``SettleCancel`` and ``SetProgress`` end it (each bumps the instance revision
    once). W-CTL: a paused, cancelling or reviewed instance grants no new activation."""
    inst = snap.inst
    if inst.state in TERMINAL:
        return None
    ready = ready_steps(snap)
    if ready and not inst.paused and inst.state in ADVANCING:
        return Activate(ready)
    if inst.state == InstanceState.CANCELLING:
        return SettleCancel()
    states = {s.state for s in snap.steps}
    if states <= STEP_DONE:
        return Finish()
    if inst.state not in ADVANCING:  # NEEDS_REVIEW stays until an operator resolves it
        return SetProgress(None)
    if StepState.ACTIVE in states or StepState.WAITING not in states:
        return SetProgress(InstanceState.RUNNING)
    return SetProgress(InstanceState.WAITING)
