"""Property tests: random workflows and random event sequences through the engine's pure decisions
(``tests/unit/engine_sim.py`` applies them in memory). Invariants: never more than one current
activation per step, no move out of a terminal state, an instance ends exactly once, compensations
run in reverse completion order, a paused instance starts nothing."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.engine.states import TERMINAL
from tests.unit.engine_sim import new_model

KINDS = ["TASK", "TASK", "TASK", "TIMER"]


@st.composite
def workflows(draw: st.DrawFn) -> list[dict]:
    n = draw(st.integers(1, 6))
    specs = []
    for i in range(n):
        kind = draw(st.sampled_from(KINDS))
        after = sorted(draw(st.sets(st.sampled_from([f"s{j}" for j in range(i)]), max_size=2))) if i else []
        spec: dict = {"key": f"s{i}", "kind": kind, "after": after}
        if kind == "TASK":
            spec["queue"] = "q"
            spec["retry"] = {
                "max_attempts": draw(st.integers(1, 3)),
                "backoff_seconds": draw(st.sampled_from([0, 5])),
            }
            if draw(st.booleans()):
                spec["compensation"] = {"queue": "undo"}
        specs.append(spec)
    return specs


EVENTS = st.one_of(
    st.tuples(st.just("claim"), st.integers(0, 5)),
    st.tuples(st.just("complete"), st.integers(0, 5)),
    st.tuples(st.just("fail"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("wake"), st.integers(0, 5)),
    st.tuples(st.just("control"), st.sampled_from(["PAUSE", "RESUME", "CANCEL"])),
    st.tuples(st.just("compensation"), st.booleans()),
    st.tuples(st.just("operator_continue")),
    st.tuples(st.just("deadline")),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workflows(), st.lists(EVENTS, max_size=40))
def test_random_event_sequences_keep_the_invariants(specs: list[dict], events: list[tuple]) -> None:
    m = new_model(specs)
    m.settle()
    m.check()
    keys = list(m.steps)
    for ev in events:
        terminal_before = m.inst.state if m.inst.state in TERMINAL else None
        kind = ev[0]
        key = keys[ev[1] % len(keys)] if len(ev) > 1 and isinstance(ev[1], int) else None
        if kind == "claim":
            m.claim(key)
        elif kind == "complete":
            m.task_result(key, completed=True)
        elif kind == "fail":
            m.task_result(key, completed=False, retryable=ev[2])
        elif kind == "wake":
            m.wake(key)
        elif kind == "control":
            m.control(ev[1])
        elif kind == "compensation":
            m.compensation_result(ev[1])
        elif kind == "operator_continue":
            m.operator_continue()
        else:
            m.deadline()
        m.check()
        if terminal_before is not None:
            assert m.inst.state == terminal_before, f"left terminal {terminal_before} on {ev}"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=6), st.data())
def test_compensations_run_newest_completion_first(compensable: list[bool], data: st.DataObject) -> None:
    """Independent TASK steps completed in a random order, then a failure: every compensable step is
    compensated exactly once, in reverse completion order, and the instance ends once."""
    specs = [{"key": f"s{i}", "kind": "TASK", "queue": "q"} for i in range(len(compensable))]
    for spec, comp in zip(specs, compensable, strict=True):
        if comp:
            spec["compensation"] = {"queue": "undo"}
    specs.append({"key": "last", "kind": "TASK", "queue": "q", "after": [s["key"] for s in specs]})
    m = new_model(specs)
    m.settle()
    order = data.draw(st.permutations([s["key"] for s in specs[:-1]]))
    for key in order:
        m.task_result(key, completed=True)
    m.task_result("last", completed=False, retryable=False)
    while m.inst.state not in TERMINAL:
        m.compensation_result(True)
        m.check()
    expected = [k for k in reversed(order) if compensable[int(k[1:])]]
    assert m.compensations_issued == expected
    assert m.ends == ["FAILED"]
