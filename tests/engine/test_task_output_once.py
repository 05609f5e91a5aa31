"""A task's output is kept once (issue 50, "JSON stored once where it is stored twice"): a completion that
closes its step (``task_moves.complete_closing_step``) writes the output on the step's activation only and
leaves the task's column SQL NULL; every reader of the task answers the activation's
(``task_moves.TASK_OUTPUT``). A failed attempt before it answers no output; a task whose completion does
not close its step (a fan-out's element) keeps its own."""

from __future__ import annotations

from sqlalchemy import text

from app.db import transaction
from app.engine import history, task_protocol
from app.engine.row_access import read_instance
from app.engine.transitions import step_moves
from app.ids import new_id
from app.sql import run
from tests.engine.helpers import claim_task, complete_task, definition, instance, publish, start, step
from tests.ledger_helpers import scalar

NS = "ns-" + new_id()[:8]
PAYLOAD = {"text": "x" * 3000, "n": 9007199254740993, "nested": {"b": [1, 2.5, None], "a": True}}


def _stored(eng, task_id: str) -> tuple:
    """(the task's own output column is NULL, its activation's output as JSON text)."""
    with eng.connect() as conn:
        return tuple(
            conn.execute(
                text(
                    "SELECT t.output IS NULL, o.output::text FROM workflow_tasks t "
                    "JOIN workflow_all_activations o ON o.id = t.activation_id WHERE t.id = :t"
                ),
                {"t": task_id},
            ).one()
        )


def _readers(eng, iid: str, task_id: str, key: str) -> list:
    """The task's output as each reader answers it: the task read (GET /v1/tasks/{id}), the step's rounds
    (GET .../steps/{key}/rounds) and the step's own output."""
    with eng.connect() as conn:
        task = task_protocol.task_view(task_protocol.read_task(conn, task_id, NS))
        rounds = history.rounds(conn, read_instance(conn, iid), key, 10, None)["items"]
    [mine] = [r for r in rounds if r["id"] == task_id]
    return [task.get("output", "absent"), mine.get("output", "absent")]


def test_a_completion_that_closes_its_step_keeps_the_output_once_and_every_reader_answers_it(eng):
    doc = definition(
        {"key": "a", "kind": "TASK", "queue": "once"},
        {"key": "b", "kind": "TASK", "queue": "once", "after": ["a"]},
    )
    iid = start(eng, NS, publish(eng, NS, doc), {})["id"]
    task = claim_task(eng, NS, "once")
    done = complete_task(eng, NS, task, PAYLOAD)
    assert done["state"] == "COMPLETED" and done["output"] == PAYLOAD  # the completion's own answer
    null, on_activation = _stored(eng, task["id"])
    assert null is True and on_activation is not None  # once: on the activation, not on the task
    assert _readers(eng, iid, task["id"], "a") == [PAYLOAD, PAYLOAD]
    assert step(eng, NS, iid, "a")["output"] == PAYLOAD
    # a resent completion answers the task as read: tests/web/test_task_claim_receipts.py
    nxt = claim_task(eng, NS, "once")
    complete_task(eng, NS, nxt, None)  # an explicit null output: kept as JSON null on the activation
    assert _stored(eng, nxt["id"]) == (True, "null")
    assert _readers(eng, iid, nxt["id"], "b") == [None, None]
    assert instance(eng, iid)["state"] == "SUCCEEDED"


def test_a_failed_attempt_answers_no_output_and_the_next_one_answers_its_own(eng):
    retry = {"max_attempts": 2, "backoff_seconds": 0}
    doc = definition({"key": "r", "kind": "TASK", "queue": "once-r", "retry": retry})
    iid = start(eng, NS, publish(eng, NS, doc), {})["id"]
    first = claim_task(eng, NS, "once-r")
    with transaction(eng) as conn:
        task_protocol.fail(conn, NS, first["id"], first["epoch"], {"message": "flaky", "retryable": True})
    second = claim_task(eng, NS, "once-r")
    assert second["activation_id"] == first["activation_id"]  # one activation, two tasks
    complete_task(eng, NS, second, {"ok": 2})
    assert _readers(eng, iid, first["id"], "r") == ["absent", "absent"]
    assert _readers(eng, iid, second["id"], "r") == [{"ok": 2}, {"ok": 2}]


def test_an_archived_activation_still_answers_its_tasks_output(eng):
    """The activation's row moves to ``workflow_activations`` when a new one replaces it
    (``step_moves.insert_activation``): the task reads it there."""
    doc = definition({"key": "a", "kind": "TASK", "queue": "once-x"})
    iid = start(eng, NS, publish(eng, NS, doc), {})["id"]
    task = claim_task(eng, NS, "once-x")
    complete_task(eng, NS, task, {"kept": True})
    with transaction(eng) as conn:
        s = conn.execute(
            text("SELECT id, activation_id FROM workflow_steps WHERE instance_id = :i AND key = 'a'"),
            {"i": iid},
        ).one()
        run(conn, step_moves.STEP_ARCHIVE_ACTIVATION, {"step": s.id, "a": s.activation_id})
        # as a new activation leaves the step's own columns (its activation's are now the archived row's)
        conn.execute(
            text("UPDATE workflow_steps SET activation_id = :n, act_output = NULL WHERE id = :s"),
            {"n": new_id(), "s": s.id},
        )
    assert _readers(eng, iid, task["id"], "a") == [{"kept": True}, {"kept": True}]


def test_a_completion_that_does_not_close_its_step_keeps_its_own_output(eng):
    """A fan-out's element tasks each keep their output (the step's is their collection)."""
    doc = definition(
        {"key": "f", "kind": "TASK", "queue": "once-f", "for_each": {"items": "$.input.xs"}},
    )
    iid = start(eng, NS, publish(eng, NS, doc), {"xs": [1, 2]})["id"]
    tasks = [claim_task(eng, NS, "once-f"), claim_task(eng, NS, "once-f")]
    for k, t in enumerate(tasks):
        complete_task(eng, NS, t, {"element": k})
    own = scalar(
        eng, "SELECT count(*) FROM workflow_tasks WHERE instance_id = :i AND output IS NOT NULL", i=iid
    )
    assert own == 2
    assert instance(eng, iid)["state"] == "SUCCEEDED"
