"""The workflow page's pure parts: the graph order and depths (a Hypothesis property over random DAGs),
the SVG geometry of the graph and the timeline, relative times and durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from app.engine.overview import failure, graph_layers, graph_order
from web.console import diagrams
from web.console.common import duration, relative

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


@st.composite
def dags(draw) -> list[dict]:
    n = draw(st.integers(1, 30))
    steps = []
    for i in range(n):
        after = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=3)) if i else []
        steps.append({"key": f"s{i}", "after": [f"s{j}" for j in after]})
    return draw(st.permutations(steps))


@given(dags())
def test_every_step_comes_after_the_steps_it_waits_for(steps):
    order = graph_order(steps)
    assert sorted(order) == sorted(s["key"] for s in steps)
    pos = {k: i for i, k in enumerate(order)}
    depth = graph_layers(steps)
    for s in steps:
        for before in s["after"]:
            assert pos[before] < pos[s["key"]] and depth[before] < depth[s["key"]]


def test_document_order_breaks_ties_and_unknown_references_are_ignored():
    steps = [{"key": "b", "after": []}, {"key": "a", "after": []}, {"key": "z", "after": ["a", "ghost"]}]
    assert graph_order(steps) == ["b", "a", "z"]
    assert graph_layers([{"key": "x", "after": ["x"]}]) == {"x": 0}  # a cycle (refused at publish) ends


def test_graph_geometry_places_rows_by_depth_and_draws_every_edge():
    steps = [
        {"key": "a", "after": [], "state": "SUCCEEDED"},
        {"key": "b", "after": ["a"], "state": "FAILED"},
        {"key": "c", "after": ["a"], "state": "BLOCKED"},
        {"key": "d", "after": ["b", "c"], "state": "BLOCKED"},
    ]
    g = diagrams.graph(steps, graph_layers(steps))
    ys = {n["key"]: n["y"] for n in g["nodes"]}
    assert ys["a"] < ys["b"] == ys["c"] < ys["d"]
    assert len(g["edges"]) == 4 and all(e.startswith("M") for e in g["edges"])
    assert all(0 <= n["x"] and n["x"] + g["node_w"] <= g["width"] for n in g["nodes"])
    assert [n["state"] for n in g["nodes"]] == ["SUCCEEDED", "FAILED", "BLOCKED", "BLOCKED"]


def test_timeline_bars_stay_inside_and_open_ones_end_now():
    now = T0 + timedelta(minutes=10)
    acts = [
        {"key": "a", "sequence": 1, "state": "SUCCEEDED", "start": T0, "end": T0 + timedelta(minutes=2)},
        {"key": "b", "sequence": 1, "state": "ACTIVE", "start": T0 + timedelta(minutes=2), "end": None},
    ]
    tries = [
        {
            "key": "a",
            "attempt": 1,
            "purpose": "STEP",
            "state": "FAILED",
            "start": T0,
            "end": T0 + timedelta(minutes=1),
        },
        {
            "key": "a",
            "attempt": 2,
            "purpose": "STEP",
            "state": "COMPLETED",
            "start": T0 + timedelta(minutes=1),
            "end": T0 + timedelta(minutes=2),
        },
    ]
    tl = diagrams.timeline(["a", "b"], acts, tries, now)
    assert len(tl["bars"]) == 4 and [r["key"] for r in tl["rows"]] == ["a", "b"]
    for b in tl["bars"]:
        assert tl["left"] <= b["x"] and b["x"] + b["w"] <= tl["right"] + 2.01
    open_bar = next(b for b in tl["bars"] if "ACTIVE" in b["cls"])
    assert abs(open_bar["x"] + open_bar["w"] - tl["right"]) < 0.2 and tl["now_x"] == tl["right"]
    assert tl["ticks"][-1]["label"] == "+10.0 min"


def test_failure_names_the_step_it_came_from():
    steps = [
        {"key": "a", "state": "SUCCEEDED"},
        {"key": "b", "state": "FAILED", "error": {"code": "X", "message": "m"}},
    ]
    inst = {"state": "FAILED", "error": {"step_key": "b", "code": "TASK_FAILED", "message": "card declined"}}
    assert failure(inst, steps) == {
        "code": "TASK_FAILED",
        "message": "card declined",
        "step_key": "b",
        "detail": {},
    }
    review = failure({"state": "NEEDS_REVIEW", "error": None}, [{**steps[1], "state": "NEEDS_REVIEW"}])
    assert review["step_key"] == "b" and review["code"] == "X"
    assert failure({"state": "RUNNING", "error": None}, steps) is None


def test_relative_times_and_durations():
    assert relative(T0 - timedelta(seconds=30), T0) == "30 s ago"
    assert relative(T0 + timedelta(minutes=59, seconds=59), T0) == "in 59 min"
    assert relative(T0 - timedelta(hours=3), T0) == "3 h ago" and relative(T0, T0) == "now"
    assert relative(T0 - timedelta(days=90), T0) == "3 mo ago"
    assert [duration(x) for x in (0.25, 12.4, 185, 7500)] == ["250 ms", "12.4 s", "3 min 5 s", "2 h 5 min"]
