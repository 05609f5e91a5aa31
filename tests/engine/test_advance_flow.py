"""The step engine end to end in one process: start -> tasks/timers/children/polls via inline jobs."""

from __future__ import annotations

from app.ids import new_id
from tests.engine.helpers import claim_task, complete_task, instance, make_due, publish, run_jobs, start, step

NS = "ns-" + new_id()[:8]


def child_doc() -> dict:
    return {
        "version": "v1",
        "input_schema": {"type": "object", "required": ["n"]},
        "deadline_seconds": 3600,
        "steps": [{"key": "work", "kind": "TASK", "queue": "child-q", "input": {"n": "$.input.n"}}],
        "output": {"child_result": "$.steps.work.output.r"},
    }


def parent_doc(child_id: str) -> dict:
    return {
        "version": "v1",
        "input_schema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}},
        "deadline_seconds": 3600,
        "steps": [
            {
                "key": "a_task",
                "kind": "TASK",
                "queue": "q1",
                "input": {"n": "$.input.n", "nothing": "$.input.zz"},
                "retry": {"max_attempts": 2},
                "timeout_seconds": 60,
            },
            {"key": "b_timer", "kind": "TIMER", "after": ["a_task"], "delay_seconds": 1},
            {
                "key": "c_child",
                "kind": "SUBWORKFLOW",
                "after": ["b_timer"],
                "definition_id": child_id,
                "version": "v1",
                "input": {"n": "$.steps.a_task.output.big"},
            },
            {
                "key": "d_poll",
                "kind": "POLL",
                "after": ["c_child"],
                "queue": "q2",
                "interval_ms": 10,
                "max_rounds": 3,
                "max_attempts_per_round": 2,
            },
        ],
        "output": {
            "a": "$.steps.a_task.output",
            "child": "$.steps.c_child.output",
            "poll": "$.steps.d_poll.output",
        },
    }


def test_task_timer_subworkflow_poll(eng):
    child_id = publish(eng, NS, child_doc())
    def_id = publish(eng, NS, parent_doc(child_id))
    inst = start(eng, NS, def_id, {"n": 9007199254740993, "z": None}, business_key="k ")
    assert inst["state"] == "RUNNING" and inst["revision"] >= 2
    view = instance(eng, inst["id"])
    assert view["input"] == {"n": 9007199254740993, "z": None} and view["business_key"] == "k "
    assert "output" not in view and "completed_at" not in view

    s = step(eng, NS, inst["id"], "a_task")
    assert s["step"]["state"] == "ACTIVE" and s["step"]["activation_sequence"] == 1
    assert s["input"] == {"n": 9007199254740993}  # absent reference left out
    t = claim_task(eng, NS, "q1")
    assert t["epoch"] == 1 and t["input"] == {"n": 9007199254740993}
    complete_task(eng, NS, t, {"big": 9007199254740993, "x": None})
    assert step(eng, NS, inst["id"], "a_task")["output"] == {"big": 9007199254740993, "x": None}
    tv = step(eng, NS, inst["id"], "b_timer")
    assert tv["step"]["state"] == "WAITING" and tv["wait"]["kind"] == "TIMER" and "name" not in tv["wait"]
    assert instance(eng, inst["id"])["state"] == "WAITING"

    make_due(eng)
    run_jobs(eng)
    assert step(eng, NS, inst["id"], "b_timer")["step"]["state"] == "SUCCEEDED"
    cs = step(eng, NS, inst["id"], "c_child")
    assert cs["step"]["state"] == "ACTIVE" and cs["child_workflow_id"]
    ct = claim_task(eng, NS, "child-q")
    assert ct["input"] == {"n": 9007199254740993}
    complete_task(eng, NS, ct, {"r": "ok"})
    run_jobs(eng)  # subprocess_join
    assert step(eng, NS, inst["id"], "c_child")["output"] == {"child_result": "ok"}

    p = step(eng, NS, inst["id"], "d_poll")
    assert p["poll"]["used_rounds"] == 0 and p["poll"]["current_task_id"]
    pt = claim_task(eng, NS, "q2")
    complete_task(eng, NS, pt, {"done": False})
    p = step(eng, NS, inst["id"], "d_poll")
    assert p["step"]["state"] == "WAITING" and p["poll"]["used_rounds"] == 1 and "next_poll_at" in p["poll"]
    make_due(eng)
    run_jobs(eng)
    pt2 = claim_task(eng, NS, "q2")
    assert pt2["poll_round"] == 2
    complete_task(eng, NS, pt2, {"done": True, "v": 1.10})
    final = instance(eng, inst["id"])
    assert final["state"] == "SUCCEEDED", final
    assert final["output"]["poll"] == {"done": True, "v": __import__("decimal").Decimal("1.10")}
    assert final["output"]["a"]["big"] == 9007199254740993
    p = step(eng, NS, inst["id"], "d_poll")
    assert (
        p["poll"]["used_rounds"] == 2
        and "resolved_at" in p["poll"]
        and p["poll"]["last_task_id"] == pt2["id"]
    )


def test_integral_decimals_and_remote_refs(eng):
    from decimal import Decimal

    import pytest

    from app.engine.documents import validate_document
    from app.errors import InvalidArgument

    doc, _ = validate_document(
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": Decimal("60.0"),
            "steps": [
                {
                    "key": "p",
                    "kind": "POLL",
                    "queue": "q",
                    "interval_ms": Decimal("200.0"),
                    "max_rounds": 2,
                    "max_attempts_per_round": 1,
                }
            ],
        }
    )
    assert doc["deadline_seconds"] == 60 and type(doc["steps"][0]["interval_ms"]) is int
    with pytest.raises(InvalidArgument) as e:
        validate_document(
            {
                "version": "v1",
                "input_schema": {"$ref": "https://example.com/s.json"},
                "deadline_seconds": 5,
                "steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 1}],
            }
        )
    assert e.value.field_errors[0].field == "input_schema.$ref"
