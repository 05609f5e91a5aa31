"""What a task's completion sends to PostgreSQL: the task's own move and the read of its instance's steps
are ONE statement (``store.write_reading_steps``), and the next step's first task and row are ONE
statement (``app.sql.absorbs``). The outcome is the one of the statements sent one by one: the tests of
the engine's moves cover it; these count statements."""

from __future__ import annotations

from app.ids import new_id
from tests.engine.helpers import claim_task, complete_task, definition, instance, publish, start, step
from tests.ledger_helpers import statements_sent

NS = "ns-" + new_id()[:8]
DOC = definition(
    {"key": "a", "kind": "TASK", "queue": "stq"}, {"key": "b", "kind": "TASK", "queue": "stq", "after": ["a"]}
)


def _verbs(sent: list[str]) -> list[str]:
    return [s.split()[0] + " " + s.split()[2] if s.startswith(("UPDATE", "SELECT")) else s[:40] for s in sent]


def test_a_completion_reads_the_steps_with_the_task_move_and_inserts_the_next_task_with_its_step(
    eng, monkeypatch
):
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    task = claim_task(eng, NS, "stq")
    sent = statements_sent(monkeypatch)
    complete_task(eng, NS, task, {"ok": 1})
    monkeypatch.undo()
    sent = [s for s in sent if s != ";"]  # the pool's ping at checkout (app.db)
    moves = [s for s in sent if "UPDATE workflow_tasks" in s]
    assert len(moves) == 1 and moves[0].startswith("WITH w AS (UPDATE workflow_tasks")
    assert "FROM workflow_instances i LEFT JOIN workflow_steps s" in moves[0]  # the steps, in its statement
    reads = [s for s in sent if s.startswith("SELECT") and "workflow_steps" in s]
    assert reads == [], _verbs(sent)  # no read of the steps of its own (there was one after the move)
    inserts = [s for s in sent if "INSERT INTO workflow_tasks" in s or "INSERT INTO workflow_steps" in s]
    assert len(inserts) == 1 and inserts[0].index("INSERT INTO workflow_tasks") < inserts[0].index(
        "INSERT INTO workflow_steps"
    ), _verbs(sent)
    assert step(eng, NS, iid, "a")["step"]["state"] == "SUCCEEDED"
    assert step(eng, NS, iid, "a")["output"] == {"ok": 1}
    assert step(eng, NS, iid, "b")["step"]["state"] == "ACTIVE"
    complete_task(eng, NS, claim_task(eng, NS, "stq"), {"ok": 2})
    assert instance(eng, iid)["state"] == "SUCCEEDED"
