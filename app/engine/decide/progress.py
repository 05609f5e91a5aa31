"""What happens after anything changed in an instance: which steps activate or are skipped, and the
instance's state.

The skip rule (docs/decisions/engine.md, "Conditions and SKIPPED"): a BLOCKED step is decided once,
when every step in its ``after`` has *settled* (SUCCEEDED or SKIPPED; a FAILED step fails the instance
before anything after it is decided):

1. it has dependencies and every one of them was SKIPPED -> SKIPPED (``DEPENDENCIES_SKIPPED``);
2. else it has a ``condition`` that is false -> SKIPPED (``CONDITION_FALSE``);
3. else it is activated.

So two exclusive branches join again (the join's dependencies settle once, one SUCCEEDED, one SKIPPED:
the join runs once), an optional step is skipped without failing anything (a step after it and after
something that ran still runs), and the steps that only follow a skipped branch are skipped with it. An
instance whose steps all SUCCEEDED or were SKIPPED succeeds. A document without conditions never skips
a step: the rule then is the old one (activate when every dependency SUCCEEDED)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from app.engine.decide import conditions as dc
from app.engine.decide.model import Activate, Finish, SetProgress, SettleCancel, Skip, Snapshot
from app.engine.states import ADVANCING, STEP_DONE, TERMINAL, InstanceState, StepState

Effect = Activate | Skip | Finish | SetProgress | SettleCancel
CONDITION_FALSE = "CONDITION_FALSE"
DEPENDENCIES_SKIPPED = "DEPENDENCIES_SKIPPED"
_NONE: Mapping[str, Any] = {}


def settled_steps(snap: Snapshot) -> tuple[str, ...]:
    """BLOCKED steps all of whose ``after`` steps settled (SUCCEEDED or SKIPPED)."""
    states = {s.key: s.state for s in snap.steps}
    return tuple(
        s.key
        for s in snap.steps
        if s.state == StepState.BLOCKED and all(states.get(d) in STEP_DONE for d in s.after)
    )


def skip_verdict(
    snap: Snapshot, key: str, condition: Any, ctx: Mapping[str, Any] | None
) -> tuple[str, str] | None:
    """For a settled BLOCKED step: ``(code, message)`` when it is skipped, None when it runs."""
    step = snap.step(key)
    assert step is not None
    states = {s.key: s.state for s in snap.steps}
    if step.after and all(states.get(d) == StepState.SKIPPED for d in step.after):
        return DEPENDENCIES_SKIPPED, "every dependency was skipped: " + ", ".join(step.after)
    if condition is not None and not dc.evaluate(condition, ctx if ctx is not None else _NONE):
        return CONDITION_FALSE, "condition is false: " + dc.describe(condition)
    return None


def progress(
    snap: Snapshot,
    conditions: Mapping[str, Any] | None = None,
    ctx: Mapping[str, Any] | None = None,
) -> Effect | None:
    """One decision of the driver's loop (``driver.make_progress``): ``Skip`` and ``Activate``
    continue the loop; ``Finish``, ``SettleCancel`` and ``SetProgress`` end it (each bumps the instance
    revision once). W-CTL: a paused, cancelling or reviewed instance grants no new activation and
    decides no skip. ``conditions``: the steps' conditions by key (read only for a settled step);
    ``ctx``: what they read (input, business key, outputs of the succeeded steps; read only when a
    condition names it)."""
    inst = snap.inst
    if inst.state in TERMINAL:
        return None
    if not inst.paused and inst.state in ADVANCING:
        settled = settled_steps(snap)
        if settled:
            conds = conditions if conditions is not None else _NONE
            skips, ready = [], []
            for key in settled:
                verdict = skip_verdict(snap, key, conds.get(key), ctx)
                if verdict is None:
                    ready.append(key)
                else:
                    skips.append((key, *verdict))
            if skips:
                return Skip(tuple(skips))
            return Activate(tuple(ready))
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


def progress_after_activation(
    snap: Snapshot,
    activated: Mapping[str, str],
    conditions: Mapping[str, Any] | None = None,
    ctx: Mapping[str, Any] | None = None,
) -> str | None:
    """The instance's next state (RUNNING / WAITING) when the decision after an ``Activate`` round of
    ``snap`` (``activated``: the state each activated step takes, and that moves nothing else) is a move of
    it, so that the round's last activation can write it in its statement (``driver.make_progress``);
    None when it is anything else (another activation, a skip, the end, a revision alone)."""
    steps = tuple(replace(s, state=activated.get(s.key, s.state)) for s in snap.steps)
    effect = progress(replace(snap, steps=steps), conditions, ctx)
    return effect.state if isinstance(effect, SetProgress) else None
