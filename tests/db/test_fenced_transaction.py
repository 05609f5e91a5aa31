"""``JobContext.transaction``: a job's business transaction locks its job row (generation, lease token,
deadline) before the caller's writes and commits only while the execution deadline has not passed
(L-CLAIM-5). The check after the writes is made from the seconds left that the job row's lock answered,
without a statement of its own."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from app.db import transaction
from app.ledger.context import JobAborted
from tests.ledger_helpers import add_job, claim_one, context_for, scalar, statements_sent


@pytest.fixture
def notes(db):
    with transaction(db) as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS fenced_notes (id serial PRIMARY KEY, note text)"))
        conn.execute(text("TRUNCATE fenced_notes RESTART IDENTITY"))
    yield
    with transaction(db) as conn:  # keep the schema equal to the models (tests/db/test_schema.py)
        conn.execute(text("DROP TABLE fenced_notes"))


def _write(conn, note: str) -> None:
    conn.execute(text("INSERT INTO fenced_notes (note) VALUES (:n)"), {"n": note})


def test_a_fenced_transaction_sends_no_statement_after_the_writes(db, notes, monkeypatch):
    """The job's lock, the caller's write, the commit: the deadline check after the write used to be a
    statement of its own (``SELECT clock_timestamp() < :d``)."""
    add_job(db, "delay_wake", {})
    ctx = context_for(claim_one(db), db)
    sent = statements_sent(monkeypatch)
    with ctx.transaction() as conn:
        _write(conn, "in time")
    monkeypatch.undo()
    sent = [s for s in sent if s != ";"]  # the pool's ping at checkout (app.db), not the transaction's
    assert [s.split()[0] for s in sent] == ["SELECT", "INSERT"], sent
    assert "FOR UPDATE" in sent[0] and "workflow_jobs" in sent[0]
    assert scalar(db, "SELECT count(*) FROM fenced_notes") == 1


def test_writes_past_the_execution_deadline_roll_back(db, notes):
    """The deadline passes while the transaction writes (the database's clock says so before the
    transaction ends): the job aborts and nothing of it commits."""
    job_id = add_job(db, "delay_wake", {}, execution_timeout_ms=3000)
    ctx = context_for(claim_one(db), db)
    with pytest.raises(JobAborted, match="execution deadline passed"), ctx.transaction() as conn:
        _write(conn, "too late")
        while not scalar(
            db, "SELECT execution_deadline <= clock_timestamp() FROM workflow_jobs WHERE id = :id", id=job_id
        ):
            time.sleep(0.05)
    assert scalar(db, "SELECT count(*) FROM fenced_notes") == 0
    assert ctx.aborted and ctx.abort_reason == "execution deadline passed"


def test_a_transaction_of_a_job_past_its_deadline_writes_nothing(db, notes):
    """The deadline passed before the transaction began: the job row's lock refuses it (no seconds
    left), before the caller writes anything."""
    job_id = add_job(db, "delay_wake", {}, execution_timeout_ms=1000)
    ctx = context_for(claim_one(db), db)
    ctx.deadline_monotonic = float("inf")  # only the database's clock decides here
    while not scalar(
        db, "SELECT execution_deadline <= clock_timestamp() FROM workflow_jobs WHERE id = :id", id=job_id
    ):
        time.sleep(0.05)
    with pytest.raises(JobAborted), ctx.transaction() as conn:
        _write(conn, "never")
    assert scalar(db, "SELECT count(*) FROM fenced_notes") == 0
