"""What one element of a child fan-out costs the parent, in statements sent to PostgreSQL, beside what a
plain SUBWORKFLOW child costs it: a plain child is a spawn job (which starts the child) and a join job
(which completes the step); a fan-out element is its child's join job, which counts the activation's
children and starts the next element's child. The children's own statements (their start) are the same
in both."""

from __future__ import annotations

from app.ids import new_id
from tests.engine.helpers import claim_task, complete_task, definition, instance, publish, run_jobs, start
from tests.ledger_helpers import statements_sent

NS = "ns-" + new_id()[:8]
CHILD = definition({"key": "work", "kind": "TASK", "queue": "kidq"})


def _sent(monkeypatch, fn) -> list[str]:
    sent = statements_sent(monkeypatch)
    fn()
    monkeypatch.undo()
    return [s for s in sent if s != ";"]


def test_a_fan_out_elements_join_costs_no_more_than_a_plain_childs_spawn_and_join(eng, monkeypatch):
    child = publish(eng, NS, CHILD)
    plain = publish(
        eng, NS, definition({"key": "c", "kind": "SUBWORKFLOW", "definition_id": child, "version": "v1"})
    )
    fan = publish(
        eng,
        NS,
        definition(
            {
                "key": "c",
                "kind": "SUBWORKFLOW",
                "definition_id": child,
                "version": "v1",
                "for_each": {"items": "$.input.xs", "max_parallel": 1},
            }
        ),
    )
    # a plain child: its spawn (which starts it) and its join (which completes the step)
    pid = start(eng, NS, plain, {})["id"]
    spawn = _sent(monkeypatch, lambda: run_jobs(eng))
    complete_task(eng, NS, claim_task(eng, NS, "kidq"), {"ok": 1})
    join = _sent(monkeypatch, lambda: run_jobs(eng))
    assert instance(eng, pid)["state"] == "SUCCEEDED"
    # a fan-out of 3 elements, one at a time: element 0's join starts element 1's child
    fid = start(eng, NS, fan, {"xs": [1, 2, 3]})["id"]
    run_jobs(eng)
    complete_task(eng, NS, claim_task(eng, NS, "kidq"), {"ok": 0})
    element = _sent(monkeypatch, lambda: run_jobs(eng))
    assert any("INSERT INTO workflow_instances" in s for s in element)  # it started the next child
    for n in (1, 2):
        complete_task(eng, NS, claim_task(eng, NS, "kidq"), {"ok": n})
        run_jobs(eng)
    assert instance(eng, fid)["state"] == "SUCCEEDED"
    print(f"plain child: spawn {len(spawn)} + join {len(join)} statements; fan-out element: {len(element)}")
    assert len(element) <= len(spawn) + len(join)
