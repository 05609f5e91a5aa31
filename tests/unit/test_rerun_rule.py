"""The rerun rule (issue 47, ``app.engine.rerun_rule``): what a rerun from a step copies, and when it is
refused. Pure: no database."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.engine.rerun_rule import NewStep, OldStep, Refused, ancestors, descendants, plan

# a -> b -> c, and d beside them (after a)
GRAPH = [
    NewStep("a", "TASK", ()),
    NewStep("b", "TASK", ("a",)),
    NewStep("c", "TASK", ("b",)),
    NewStep("d", "SIGNAL", ("a",)),
]


def old(**states: str) -> list[OldStep]:
    kinds = {s.key: s.kind for s in GRAPH}
    return [OldStep(k, kinds[k], v) for k, v in states.items()]


def test_from_the_start_copies_nothing():
    assert plan("FAILED", old(a="SUCCEEDED", b="FAILED"), [], GRAPH, None) == []


def test_from_a_middle_step_copies_what_succeeded_outside_it_and_after_it():
    got = plan("FAILED", old(a="SUCCEEDED", b="SUCCEEDED", c="FAILED", d="SUCCEEDED"), [], GRAPH, "b")
    assert got == ["a", "d"]  # b and c run again; d (a SIGNAL beside them) keeps its payload
    got = plan("CANCELLED", old(a="SUCCEEDED", b="SUCCEEDED", c="CANCELLED", d="WAITING"), [], GRAPH, "c")
    assert got == ["a", "b"]  # d did not succeed: it runs


def test_refusals():
    with pytest.raises(Refused, match="FAILED or CANCELLED"):
        plan("SUCCEEDED", old(a="SUCCEEDED"), [], GRAPH, None)
    with pytest.raises(Refused, match="not a step"):
        plan("FAILED", old(a="FAILED"), [], GRAPH, "zz")
    with pytest.raises(Refused, match="did not succeed"):
        plan("FAILED", old(a="SUCCEEDED", b="FAILED"), [], GRAPH, "c")
    with pytest.raises(Refused, match="compensated"):
        plan("FAILED", old(a="SUCCEEDED", b="SUCCEEDED", c="FAILED"), ["b"], GRAPH, "c")
    other = [NewStep("a", "TIMER", ()), *GRAPH[1:]]  # another version: a changed its kind
    with pytest.raises(Refused, match="TASK step in the old workflow and a TIMER step"):
        plan("FAILED", old(a="SUCCEEDED", b="FAILED"), [], other, "b")
    with pytest.raises(Refused, match="has no such step"):
        plan("FAILED", [OldStep("b", "TASK", "FAILED")], [], GRAPH, "b")


@st.composite
def dags(draw):
    n = draw(st.integers(1, 8))
    steps = [
        NewStep(
            f"s{i}",
            draw(st.sampled_from(["TASK", "SIGNAL"])),
            tuple(
                sorted(draw(st.sets(st.sampled_from([f"s{j}" for j in range(i)]), max_size=3)) if i else ())
            ),
        )
        for i in range(n)
    ]
    states = [
        OldStep(s.key, s.kind, draw(st.sampled_from(["SUCCEEDED", "FAILED", "BLOCKED", "CANCELLED"])))
        for s in steps
    ]
    compensated = draw(st.sets(st.sampled_from([s.key for s in steps])))
    return steps, states, compensated, draw(st.sampled_from([None, *[s.key for s in steps]]))


@given(dags())
def test_a_plan_copies_only_succeeded_steps_closed_under_dependencies(case):
    steps, states, compensated, start = case
    try:
        copied = plan("FAILED", states, compensated, steps, start)
    except Refused:
        assert start is not None  # from the start is never refused for a FAILED workflow
        return
    specs = {s.key: s for s in steps}
    old_state = {s.key: s.state for s in states}
    for k in copied:
        assert old_state[k] == "SUCCEEDED" and k not in compensated
        assert all(a in copied for a in specs[k].after)  # everything it depends on is copied too
    if start is not None:
        assert not (descendants(specs, start) & set(copied))  # the step and those after it run again
        assert ancestors(specs, start) <= set(copied)  # what it depends on is there
    else:
        assert copied == []
