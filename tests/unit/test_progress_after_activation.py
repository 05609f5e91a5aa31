"""The instance's move that follows an ``Activate`` round, decided before the round's statements
(``decide.progress.progress_after_activation``): what ``driver.make_progress`` writes with the round's last
activation, and checks against the decision it then makes from the rows."""

from __future__ import annotations

from app.engine.decide.model import Inst, Snapshot, Step
from app.engine.decide.progress import progress_after_activation


def _snap(state: str, *steps: tuple[str, str, tuple[str, ...]]) -> Snapshot:
    return Snapshot(
        inst=Inst(id="i", state=state),
        steps=tuple(Step(key=k, kind="TASK", state=s, after=a) for k, s, a in steps),
    )


def test_a_timer_alone_leaves_the_instance_waiting_and_a_task_running() -> None:
    snap = _snap("RUNNING", ("a", "SUCCEEDED", ()), ("t", "BLOCKED", ("a",)))
    assert progress_after_activation(snap, {"t": "WAITING"}) == "WAITING"
    assert progress_after_activation(snap, {"t": "ACTIVE"}) == "RUNNING"
    waiting = _snap("WAITING", ("a", "SUCCEEDED", ()), ("t", "BLOCKED", ("a",)))
    assert progress_after_activation(waiting, {"t": "ACTIVE"}) == "RUNNING"


def test_another_open_step_keeps_it_running() -> None:
    snap = _snap("RUNNING", ("a", "ACTIVE", ()), ("s", "SUCCEEDED", ()), ("t", "BLOCKED", ("s",)))
    assert progress_after_activation(snap, {"t": "WAITING"}) == "RUNNING"


def test_no_move_when_the_next_decision_is_something_else() -> None:
    # a step left settled and BLOCKED: the next round activates it, no move follows this one
    snap = _snap("RUNNING", ("a", "SUCCEEDED", ()), ("b", "BLOCKED", ("a",)), ("c", "BLOCKED", ("a",)))
    assert progress_after_activation(snap, {"b": "ACTIVE"}) is None
    # an instance in review only counts a revision (``SetProgress(None)``)
    review = _snap("NEEDS_REVIEW", ("a", "SUCCEEDED", ()), ("t", "BLOCKED", ("a",)))
    assert progress_after_activation(review, {"t": "WAITING"}) is None
