"""Mappings read the outputs of succeeded steps from the step rows at hand: the rows read under the
instance's lock, and the output the step's own close returned (``step_moves.STEP_CLOSE ... RETURNING
act_output``, as ``jsonb`` stores it). A completion whose successor maps ``$.steps...`` sends no read of the
outputs of its own (``snapshot_step_outputs``: one statement per such completion before), and what the
mappings see is what that read would have answered."""

from __future__ import annotations

from decimal import Decimal

from sqlalchemy import text

from app.db import transaction
from app.engine import snapshot
from app.ids import new_id
from tests.engine.helpers import claim_task, complete_task, definition, instance, publish, start
from tests.ledger_helpers import statements_sent

NS = "ns-" + new_id()[:8]
DOC = {
    **definition(
        {"key": "a", "kind": "TASK", "queue": "mapq"},
        {
            "key": "b",
            "kind": "TASK",
            "queue": "mapq",
            "after": ["a"],
            "input": {"from_a": "$.steps.a.output"},
        },
        {
            "key": "c",
            "kind": "TASK",
            "queue": "mapq",
            "after": ["b"],
            "input": {"n": "$.steps.a.output.n", "b": "$.steps.b.output"},
        },
    ),
    "output": {"a": "$.steps.a.output", "c": "$.steps.c.output"},
}
# numbers jsonb writes otherwise than they came (1E+2 -> 100), keys it orders otherwise
OUT_A = {"z": 1, "n": Decimal("1E+2"), "f": Decimal("1.50"), "s": "x"}
OUTPUTS_READ = "act_output::text AS output FROM workflow_steps"


def _act_input(eng, iid: str, key: str) -> str:
    with eng.connect() as conn:
        return conn.execute(
            text("SELECT act_input::text FROM workflow_steps WHERE instance_id = :i AND key = :k"),
            {"i": iid, "k": key},
        ).scalar_one()


def test_a_completion_maps_the_stored_output_without_reading_the_outputs_again(eng, monkeypatch):
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    sent = statements_sent(monkeypatch)
    complete_task(eng, NS, claim_task(eng, NS, "mapq"), OUT_A)
    complete_task(eng, NS, claim_task(eng, NS, "mapq"), ["b", 2])
    monkeypatch.undo()
    assert not [s for s in sent if OUTPUTS_READ in s]
    # b's input is a's output as stored (jsonb's text of it), c's reads a's (an earlier transaction's) and b's
    assert _act_input(eng, iid, "b") == '{"from_a": {"f": 1.50, "n": 100, "s": "x", "z": 1}}'
    assert _act_input(eng, iid, "c") == '{"b": ["b", 2], "n": 100}'
    sent = statements_sent(monkeypatch)
    complete_task(eng, NS, claim_task(eng, NS, "mapq"), {"done": True})
    monkeypatch.undo()
    assert not [s for s in sent if OUTPUTS_READ in s]  # the workflow's output mapping: from the rows too
    done = instance(eng, iid)
    assert done["state"] == "SUCCEEDED"
    assert done["output"] == {"a": {"f": Decimal("1.50"), "n": 100, "s": "x", "z": 1}, "c": {"done": True}}


def test_the_outputs_of_the_rows_are_the_ones_a_read_answers(eng):
    """``mapping_context`` with the rows (every succeeded step's ``act_output`` as read) and without (the
    lazy read of ``snapshot_step_outputs``) answer the same, value for value."""
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    complete_task(eng, NS, claim_task(eng, NS, "mapq"), OUT_A)
    complete_task(eng, NS, claim_task(eng, NS, "mapq"), {"k": [1, Decimal("2.0"), None], "": {}})
    with transaction(eng) as conn:
        inst, _, rows = snapshot.load(conn, iid)
        from_rows = dict(snapshot.mapping_context(conn, inst, rows.values())["steps"])
        read = dict(snapshot.mapping_context(conn, inst)["steps"])
    assert sorted(from_rows) == ["a", "b"]
    assert from_rows == read
    assert repr(from_rows["a"]) == repr(read["a"]) and repr(from_rows["b"]) == repr(read["b"])
