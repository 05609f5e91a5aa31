"""Effect receipts (L-EFFECT-1): a business write and its receipt commit together, a retry reuses
the stored result, concurrent attempts of one operation produce one effect."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from app.db import transaction
from app.ledger import transitions
from tests.ledger_helpers import (
    add_job,
    claim_one,
    context_for,
    job,
    scalar,
    settle,
    settlement,
    statements_sent,
)


@pytest.fixture
def orders(db):
    with transaction(db) as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS effect_orders (id serial PRIMARY KEY, note text)"))
        conn.execute(text("TRUNCATE effect_orders RESTART IDENTITY"))
    yield "effect_orders"
    with transaction(db) as conn:  # keep the schema equal to the models (tests/db/test_schema.py)
        conn.execute(text("DROP TABLE effect_orders"))


def _count(engine, table="effect_orders"):
    return scalar(engine, f"SELECT count(*) FROM {table}")


class Writer:
    def __init__(self, note="x", fail=False, barrier=None):
        self.calls = 0
        self.note, self.fail, self.barrier = note, fail, barrier

    def __call__(self, conn):
        self.calls += 1
        new_id = conn.execute(
            text("INSERT INTO effect_orders (note) VALUES (:n) RETURNING id"), {"n": self.note}
        ).scalar()
        if self.barrier is not None:
            self.barrier.wait(10)
        if self.fail:
            raise RuntimeError("business rule violated after the insert")
        return {"order_id": new_id, "note": self.note}


def test_business_write_and_receipt_commit_together(db, orders):
    j = add_job(db, "delay_wake", {"order": 1})
    row = claim_one(db)
    ctx = context_for(row, db)
    result = ctx.effect("create-order", Writer("first"))
    assert result == {"order_id": 1, "note": "first"}
    assert _count(db) == 1
    with db.connect() as conn:
        receipt = conn.execute(text("SELECT * FROM workflow_job_effects")).one()
    assert (receipt.operation_key, receipt.step_key) == (job(db, j)["operation_key"], "create-order")
    assert (receipt.job_id, receipt.generation, receipt.result) == (j, 1, result)
    assert ctx.receipt("create-order") == (True, result)
    assert ctx.receipt("other-step") == (False, None)


def test_a_failing_write_leaves_neither_row_nor_receipt(db, orders):
    add_job(db, "delay_wake", {"order": 1})
    ctx = context_for(claim_one(db), db)
    with pytest.raises(RuntimeError):
        ctx.effect("create-order", Writer(fail=True))
    assert _count(db) == 0 and _count(db, "workflow_job_effects") == 0


def test_a_retry_returns_the_stored_result_without_writing_again(db, orders):
    j = add_job(db, "delay_wake", {"order": 1})
    first = claim_one(db)
    w1 = Writer("first")
    stored = context_for(first, db).effect("create-order", w1)
    # the attempt then fails after its receipt was committed; the retry runs the same step again
    assert settle(db, [settlement(first, "retry", error="later failure")], base=0) == {j: "pending"}
    second = claim_one(db)
    assert second["attempts"] == 2
    w2 = Writer("second")
    assert context_for(second, db).effect("create-order", w2) == stored
    assert (w1.calls, w2.calls, _count(db)) == (1, 0, 1)
    # a manual retry keeps the operation key (same input), so it reuses the receipt too
    assert settle(db, [settlement(second, "dead", error="x")]) == {j: "dead"}
    with transaction(db) as conn:
        transitions.retry_job(conn, j)
    third = claim_one(db)
    w3 = Writer("third")
    assert context_for(third, db).effect("create-order", w3) == stored and w3.calls == 0
    # an explicitly changed payload gets a new operation key: a new effect
    assert settle(db, [settlement(third, "dead", error="x")]) == {j: "dead"}
    with transaction(db) as conn:
        transitions.retry_job(conn, j, payload={"order": 2}, operation_key="op-changed")
    fourth = claim_one(db)
    w4 = Writer("fourth")
    assert context_for(fourth, db).effect("create-order", w4)["note"] == "fourth"
    assert (w4.calls, _count(db)) == (1, 2)


def test_concurrent_attempts_of_one_operation_produce_one_effect(db, orders):
    """Two jobs carrying the same operation key run the same step at the same moment: exactly one
    business write commits and both executions get its result."""
    for n in range(2):
        add_job(db, "delay_wake", {"copy": n}, operation_key="op-shared")
    rows = [claim_one(db), claim_one(db)]
    contexts = [context_for(r, db) for r in rows]
    both_wrote = threading.Barrier(2)
    writers = [Writer(f"w{i}", barrier=both_wrote) for i in range(2)]
    results: dict[int, object] = {}

    def run(i):
        try:
            results[i] = contexts[i].effect("create-order", writers[i])
        except BaseException as exc:  # reported by the assertions
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert writers[0].calls == writers[1].calls == 1  # both really raced into the write
    assert _count(db) == 1 and _count(db, "workflow_job_effects") == 1
    assert results[0] == results[1], results
    assert isinstance(results[0], dict)


def test_an_effect_reads_its_receipt_once_inside_its_transaction(db, orders, monkeypatch):
    """The receipt is read after the job's lock, in the effect's transaction, and not on a connection of
    its own before it as well: one read and one insert reach ``workflow_job_effects``."""
    add_job(db, "delay_wake", {"order": 1})
    ctx = context_for(claim_one(db), db)
    sent = statements_sent(monkeypatch)
    ctx.effect("create-order", Writer("first"))
    monkeypatch.undo()
    receipts = [s.split()[0] for s in sent if "workflow_job_effects" in s]
    assert receipts == ["SELECT", "INSERT"], sent
    assert sent.index(next(s for s in sent if "workflow_job_effects" in s)) > sent.index(
        next(s for s in sent if "FROM workflow_jobs" in s)
    )  # read under the job's lock


class OrderNote:
    """A ``RowReceipt`` of the test: the write moves one order's note and records the operation that
    did (``effect_orders.note`` = 'done by <operation key>')."""

    def __init__(self, order_id: int) -> None:
        self.order_id = order_id

    def read(self, conn, operation_key):
        note = conn.execute(
            text("SELECT note FROM effect_orders WHERE id = :id FOR UPDATE"), {"id": self.order_id}
        ).scalar()
        return (True, {"moved": self.order_id}) if note == f"done by {operation_key}" else (False, None)

    def moved(self, result):
        return "moved" in result


def test_a_row_receipt_keeps_the_receipt_on_the_moved_row(db, orders):
    """``effect(..., receipt=...)``: the write stamps the row it moves with its operation; no receipt
    row is inserted; a retry of the operation finds the row moved, writes nothing and answers from the
    row what the first execution answered; another operation's write finds the row moved and keeps its
    own answer."""
    with transaction(db) as conn:
        order = conn.execute(text("INSERT INTO effect_orders (note) VALUES ('open') RETURNING id")).scalar()
    calls: list[int] = []

    def run_effect(row):
        ctx = context_for(row, db)

        def write(conn):
            moved = conn.execute(
                text("UPDATE effect_orders SET note = :n WHERE id = :id AND note = 'open' RETURNING id"),
                {"n": f"done by {ctx.operation_key}", "id": order},
            ).first()
            if moved:
                calls.append(row["attempts"])
            return {"moved": order} if moved else {"skipped": "already moved"}

        return ctx.effect("move", write, receipt=OrderNote(order))

    j = add_job(db, "delay_wake", {"order": order})
    first = claim_one(db)
    assert run_effect(first) == {"moved": order}
    assert scalar(db, "SELECT note FROM effect_orders") == f"done by {first['operation_key']}"
    assert _count(db, "workflow_job_effects") == 0
    assert settle(db, [settlement(first, "retry", error="failed after the commit")], base=0) == {j: "pending"}
    second = claim_one(db)
    assert second["attempts"] == 2 and run_effect(second) == {"moved": order}
    assert calls == [1]  # the retry did not write
    add_job(db, "delay_wake", {"order": order}, operation_key="op-other")
    assert run_effect(claim_one(db)) == {"skipped": "already moved"}
    assert calls == [1] and _count(db, "workflow_job_effects") == 0  # it moved nothing
