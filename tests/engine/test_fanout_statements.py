"""What a fan-out sends to PostgreSQL (issue 44, the fanout bench shape): the elements that start together
are inserted by ONE statement (``task_moves.TASK_INSERT_ELEMENTS``), each with its ``task.created`` event;
an element's end settles progress on the instance row and the step rows read under the lock (no second
read of either). The outcome is the one of the statements sent one by one: the fan-out tests through the
API (tests/web/test_workflow_fanout.py) cover it; these count statements and check the rows."""

from __future__ import annotations

from sqlalchemy import text

from app.ids import new_id
from tests.engine.helpers import claim_task, complete_task, definition, instance, publish, start, step
from tests.ledger_helpers import statements_sent

NS = "ns-" + new_id()[:8]
DOC = definition(
    {"key": "s1", "kind": "TASK", "queue": "fs.q"},
    {
        "key": "each",
        "kind": "TASK",
        "queue": "fs.el",
        "after": ["s1"],
        "for_each": {"items": "$.steps.s1.output.items", "max_parallel": 40},
        "input": {"sku": "$.item.sku", "n": "$.index"},
    },
    {"key": "s2", "kind": "TASK", "queue": "fs.q", "after": ["each"]},
)
ITEMS = [{"sku": f"A-{i}"} for i in range(45)]


def _counted(monkeypatch, fn) -> list[str]:
    sent = statements_sent(monkeypatch)
    try:
        fn()
    finally:
        monkeypatch.undo()
    return [s for s in sent if s != ";"]  # the pool's ping at checkout (app.db)


def _element_tasks(eng, iid: str) -> list[tuple]:
    with eng.connect() as conn:
        return conn.execute(
            text(
                "SELECT element, input, state, attempt, queue, deadline_at > now() AS due_later "
                "FROM workflow_tasks WHERE instance_id = :i AND element IS NOT NULL ORDER BY element"
            ),
            {"i": iid},
        ).all()


def _created_events(eng, iid: str) -> list[str]:
    with eng.connect() as conn:
        return list(
            conn.execute(
                text(
                    "SELECT body->>'task_id' FROM workflow_events WHERE instance_id = :i AND type = 'task.created' "
                    "AND body->>'step_key' = 'each' ORDER BY seq"
                ),
                {"i": iid},
            ).scalars()
        )


def test_the_first_elements_are_one_insert_each_with_its_input_and_event(eng, monkeypatch):
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    s1 = claim_task(eng, NS, "fs.q")
    sent = _counted(monkeypatch, lambda: complete_task(eng, NS, s1, {"items": ITEMS}))
    inserts = [s for s in sent if "instance_created_at, element)" in s]  # element tasks
    assert len(inserts) == 1 and "unnest(" in inserts[0], inserts  # 40 elements, one statement
    assert len(sent) <= 12, sent  # was 40 more: a statement per element
    tasks = _element_tasks(eng, iid)
    assert [t.element for t in tasks] == list(range(40))  # max_parallel
    assert [t.input for t in tasks] == [{"sku": f"A-{i}", "n": i} for i in range(40)]
    assert {(t.state, t.attempt, t.queue, t.due_later) for t in tasks} == {("PENDING", 1, "fs.el", True)}
    assert len(_created_events(eng, iid)) == 40
    view = step(eng, NS, iid, "each")
    assert view["fan_out"]["pending"] == 5 and view["fan_out"]["running"] == 40


def test_an_element_end_reads_neither_the_instance_nor_the_steps_again(eng, monkeypatch):
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    complete_task(eng, NS, claim_task(eng, NS, "fs.q"), {"items": ITEMS})
    el = claim_task(eng, NS, "fs.el")
    sent = _counted(monkeypatch, lambda: complete_task(eng, NS, el, {"done": el["input"]["n"]}))
    instance_reads = [s for s in sent if s.startswith("SELECT") and "FROM workflow_instances" in s]
    assert len(instance_reads) == 1, sent  # the lock; settling progress reuses the row it read
    assert not [s for s in sent if s.startswith("SELECT") and "FROM workflow_steps" in s], sent
    inserts = [s for s in sent if "instance_created_at, element)" in s]
    assert len(inserts) == 1, sent  # the element that took the freed place (element 40)
    assert len(sent) <= 9, sent
    assert [t.element for t in _element_tasks(eng, iid)] == list(range(41))
    assert instance(eng, iid)["state"] == "RUNNING"


def test_a_fanout_whose_elements_start_in_batches_ends_in_element_order(eng):
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    complete_task(eng, NS, claim_task(eng, NS, "fs.q"), {"items": ITEMS})
    for _ in ITEMS:
        el = claim_task(eng, NS, "fs.el")
        complete_task(eng, NS, el, {"n": el["input"]["n"]})
    assert step(eng, NS, iid, "each")["output"] == [{"n": i} for i in range(len(ITEMS))]
    assert len(set(_created_events(eng, iid))) == len(ITEMS)  # one event per element task, none twice
    s2 = claim_task(eng, NS, "fs.q")
    assert s2["step_key"] == "s2"
    complete_task(eng, NS, s2, {})
    assert instance(eng, iid)["state"] == "SUCCEEDED"
