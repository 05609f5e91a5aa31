"""What a task's completion sends to PostgreSQL: the task's own move, its step's move to SUCCEEDED (when the
completion completes it: ``task_moves.complete_closing_step``) and the read of its instance's steps are ONE
statement (``row_access.write_reading_steps``), and the next step's first task and row are ONE
statement (``step_moves.STEP_ACTIVATE_FIRST``, written out by hand). The outcome is the one of the statements sent one by one: the tests of
the engine's moves cover it; these count statements."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine import task_protocol
from app.engine.transitions._guard import TransitionRefused
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
    assert len(moves) == 1 and moves[0].startswith("WITH c AS (UPDATE workflow_steps")
    assert "m AS (UPDATE workflow_tasks" in moves[0]
    assert "FROM workflow_instances i LEFT JOIN workflow_steps s" in moves[0]  # the steps, in its statement
    # the step's move is in the same statement: no step_close of its own
    assert "c AS (UPDATE workflow_steps SET state = 'SUCCEEDED'" in moves[0]
    assert [s for s in sent if s.startswith("UPDATE workflow_steps")] == [], _verbs(sent)
    reads = [s for s in sent if s.startswith("SELECT") and "workflow_steps" in s]
    assert reads == [], _verbs(sent)  # no read of the steps of its own (there was one after the move)
    inserts = [s for s in sent if "INSERT INTO workflow_tasks" in s or "INSERT INTO workflow_steps" in s]
    assert len(inserts) == 1 and inserts[0].index("INSERT INTO workflow_tasks") < inserts[0].index(
        "INSERT INTO workflow_steps"
    ), _verbs(sent)
    a = step(eng, NS, iid, "a")
    assert a["step"]["state"] == "SUCCEEDED" and a["output"] == {"ok": 1}
    with eng.connect() as conn:
        row = conn.execute(
            text(
                "SELECT act_state, revision, completed_at IS NOT NULL FROM workflow_steps WHERE instance_id = :i AND key = 'a'"
            ),
            {"i": iid},
        ).one()
        events = [
            r[0]
            for r in conn.execute(
                text("SELECT type FROM workflow_events WHERE instance_id = :i ORDER BY seq"), {"i": iid}
            )
        ]
    assert tuple(row) == (
        "SUCCEEDED",
        3,
        True,
    )  # inserted at 1, activated (2), closed (3): as step_close left it
    assert events[events.index("task.completed") :][:4] == [
        "task.completed",
        "step.succeeded",
        "task.created",
        "step.activated",
    ]
    assert step(eng, NS, iid, "b")["step"]["state"] == "ACTIVE"
    complete_task(eng, NS, claim_task(eng, NS, "stq"), {"ok": 2})
    assert instance(eng, iid)["state"] == "SUCCEEDED"


def test_the_task_row_comes_back_once_whatever_the_number_of_steps(eng):
    """The task's columns (its output may be 256 KiB) ride beside the first step row only, not once per
    step; a move that matched no row answers no row and no steps."""
    from app.engine import row_access
    from app.engine.transitions.task_moves import TASK_COLS
    from app.sql import query

    doc = definition(*({"key": f"s{i}", "kind": "TASK", "queue": "wide"} for i in range(6)))
    iid = start(eng, NS, publish(eng, NS, doc), {})["id"]
    task = claim_task(eng, NS, "wide")
    move = (
        "UPDATE workflow_tasks AS t SET updated_at = now() WHERE id = :id AND epoch = :epoch "
        f"RETURNING {TASK_COLS}"
    )
    with transaction(eng) as conn:
        rows = conn.execute(
            text(row_access._with_steps_sql(move)),
            {"id": task["id"], "epoch": task["epoch"], "steps_of_instance": iid},
        ).all()
        assert len(rows) == 6 and [r.id for r in rows].count(task["id"]) == 1 and rows[0].id == task["id"]
        touch = row_access.reading_steps(query("test_task_touch", move))
        row, steps = row_access.write_reading_steps(
            conn, touch, {"id": task["id"], "epoch": task["epoch"]}, iid
        )
        assert row.id == task["id"] and sorted(s["key"] for s in steps) == [f"s{i}" for i in range(6)]
        assert row_access.write_reading_steps(conn, touch, {"id": task["id"], "epoch": 99}, iid) == (None, [])


def test_a_claim_naming_its_worker_writes_the_task_row_once(eng, monkeypatch):
    """Issue 47's worker identity is kept by the claim's own UPDATE (it was a second UPDATE of every claimed
    task: one more row write per task); a claim without one keeps the worker an earlier claim recorded."""
    start(eng, NS, publish(eng, NS, DOC), {})
    who = {"host": "h1", "pid": 7, "sdk": "test"}
    sent = statements_sent(monkeypatch)
    with transaction(eng) as conn:
        got, replayed = task_protocol.claim_keyed(conn, NS, ["stq"], 1, 60, None, None, who)
    monkeypatch.undo()
    assert got and not replayed
    writes = [s for s in sent if "workflow_tasks" in s and ("UPDATE" in s)]
    assert len(writes) == 1, _verbs(sent)
    with eng.connect() as conn:
        row = conn.exec_driver_sql(
            "SELECT worker, epoch FROM workflow_tasks WHERE id = %(i)s", {"i": got[0]["id"]}
        ).one()
    assert row.worker == who and row.epoch == 1


def test_a_completion_whose_step_may_not_close_is_refused_and_leaves_the_task_claimed(eng):
    """The task's move and its step's go together: a step whose activation is in no open state (a row an
    operator or a bug left inconsistent; the step's own state still ACTIVE) refuses the completion, as
    ``step_close`` refused it after the task's move before: the transaction rolls back, the task stays
    CLAIMED and the step as it was."""
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    task = claim_task(eng, NS, "stq")
    with eng.begin() as conn:
        conn.execute(
            text("UPDATE workflow_steps SET act_state = 'FAILED' WHERE instance_id = :i AND key = 'a'"),
            {"i": iid},
        )
    with pytest.raises(TransitionRefused):
        complete_task(eng, NS, task, {"ok": 1})
    with eng.connect() as conn:
        assert conn.execute(
            text("SELECT state FROM workflow_tasks WHERE id = :t"), {"t": task["id"]}
        ).scalar() == ("CLAIMED")
        assert tuple(
            conn.execute(
                text("SELECT state, act_state FROM workflow_steps WHERE instance_id = :i AND key = 'a'"),
                {"i": iid},
            ).one()
        ) == ("ACTIVE", "FAILED")
