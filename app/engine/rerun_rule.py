"""The rerun rule (issue 47), pure: which steps of a FAILED or CANCELLED workflow a rerun from a step copies,
and when a rerun is refused. ``app.engine.rerun`` applies it; ``docs/reference.md`` ("Rerun") states it.

- Only a FAILED or CANCELLED workflow is rerun; it stays as it ended (the rerun is a new workflow).
- From the start (no step): nothing is copied; every step runs.
- From step ``S`` (a step of the version the rerun runs): ``S`` and every step after it (its descendants
  through ``after``) run again. Every other step that SUCCEEDED in the old run, exists in the new version
  with the same key and kind, and whose own dependencies are all copied too, is copied: it is SUCCEEDED in
  the new workflow with the old output, never run (``copied_from``). Any other step runs as usual.
- ``S``'s ancestors must all be copied: otherwise the rerun is refused (the reason names the step).
- A step the old run compensated (any step of its compensation plan) is not copied: its effect was undone.
- Compensation: a copied step is never compensated by the new workflow (its effect belongs to the old run).
- Signals: no signal is copied; a SIGNAL step that is copied keeps the payload it received as its output.
- Children: a SUBWORKFLOW step that is copied keeps its output and names the old child; no child re-runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

RERUNNABLE = ("FAILED", "CANCELLED")


@dataclass(frozen=True)
class OldStep:
    key: str
    kind: str
    state: str


@dataclass(frozen=True)
class NewStep:
    key: str
    kind: str
    after: tuple[str, ...]


class Refused(Exception):
    """The rerun is not allowed; the message says why."""


def descendants(specs: Mapping[str, NewStep], key: str) -> set[str]:
    """``key`` and every step that depends on it, directly or not."""
    children: dict[str, set[str]] = {}
    for s in specs.values():
        for a in s.after:
            children.setdefault(a, set()).add(s.key)
    out, todo = {key}, [key]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in out:
                out.add(c)
                todo.append(c)
    return out


def ancestors(specs: Mapping[str, NewStep], key: str) -> set[str]:
    out: set[str] = set()
    todo = list(specs[key].after)
    while todo:
        k = todo.pop()
        if k not in out and k in specs:
            out.add(k)
            todo.extend(specs[k].after)
    return out


def plan(
    old_state: str,
    old_steps: Iterable[OldStep],
    compensated: Iterable[str],
    new_steps: Iterable[NewStep],
    from_step: str | None,
) -> list[str]:
    """The keys of the steps a rerun copies (sorted), or ``Refused``."""
    if old_state not in RERUNNABLE:
        raise Refused(f"only a FAILED or CANCELLED workflow can be rerun (this one is {old_state})")
    specs = {s.key: s for s in new_steps}
    if from_step is None:
        return []
    if from_step not in specs:
        raise Refused(f"step {from_step!r} is not a step of the version the rerun runs")
    old = {s.key: s for s in old_steps}
    undone = set(compensated)
    rerun = descendants(specs, from_step)
    candidates = {
        k
        for k, s in specs.items()
        if k not in rerun
        and k in old
        and old[k].state == "SUCCEEDED"
        and old[k].kind == s.kind
        and k not in undone
    }
    # a copied step's dependencies are all copied (a step succeeded only after its dependencies did, but an
    # operator's SUCCEED_STEP or another version's graph may say otherwise): drop until it holds
    changed = True
    while changed:
        changed = False
        for k in sorted(candidates):
            if any(a not in candidates for a in specs[k].after):
                candidates.discard(k)
                changed = True
    for a in sorted(ancestors(specs, from_step)):
        if a not in candidates:
            raise Refused(_why_not(a, old, specs, undone))
    return sorted(candidates)


def _why_not(key: str, old: Mapping[str, OldStep], specs: Mapping[str, NewStep], undone: set[str]) -> str:
    head = f"step {key!r} runs before the rerun's first step but cannot be copied: "
    if key not in old:
        return head + "the old workflow has no such step"
    if old[key].kind != specs[key].kind:
        return head + f"it is a {old[key].kind} step in the old workflow and a {specs[key].kind} step here"
    if key in undone:
        return head + "the old workflow compensated it"
    if old[key].state != "SUCCEEDED":
        return head + f"it did not succeed in the old workflow (it is {old[key].state})"
    return head + "a step it depends on cannot be copied"
