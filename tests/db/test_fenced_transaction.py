"""``JobContext.transaction``: a job's business transaction locks its job row (generation, lease token,
deadline) before the caller's writes and commits only while the execution deadline has not passed by the
database's clock (L-CLAIM-5, L-CLAIM-6), checked before and after the writes."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text

from app.db import transaction
from app.ledger.context import JobAborted
from tests.ledger_helpers import add_job, claim_one, context_for, scalar


@pytest.fixture
def notes(db):
    with transaction(db) as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS fenced_notes (id serial PRIMARY KEY, note text)"))
        conn.execute(text("TRUNCATE fenced_notes RESTART IDENTITY"))
    yield
    with transaction(db) as conn:  # keep the schema equal to the models (tests/db/test_schema.py)
        conn.execute(text("DROP TABLE fenced_notes"))


def _wait_past_deadline(db, job_id: int) -> None:
    """Until the job's execution deadline has passed by the database's clock."""
    while not scalar(
        db, "SELECT execution_deadline <= clock_timestamp() FROM workflow_jobs WHERE id = :id", id=job_id
    ):
        time.sleep(0.05)


def _write(conn, note: str) -> None:
    conn.execute(text("INSERT INTO fenced_notes (note) VALUES (:n)"), {"n": note})


def test_writes_past_the_execution_deadline_roll_back(db, notes):
    """The deadline passes while the transaction writes (the database's clock says so before the
    transaction ends): the job aborts and nothing of it commits."""
    job_id = add_job(db, "delay_wake", {}, execution_timeout_ms=3000)
    ctx = context_for(claim_one(db), db)
    with pytest.raises(JobAborted, match="execution deadline passed"), ctx.transaction() as conn:
        _write(conn, "too late")
        _wait_past_deadline(db, job_id)
    assert scalar(db, "SELECT count(*) FROM fenced_notes") == 0
    assert ctx.aborted and ctx.abort_reason == "execution deadline passed"


def test_a_transaction_of_a_job_past_its_deadline_writes_nothing(db, notes):
    """The deadline passed before the transaction began: the job row's lock refuses it (no seconds
    left), before the caller writes anything."""
    job_id = add_job(db, "delay_wake", {}, execution_timeout_ms=1000)
    ctx = context_for(claim_one(db), db)
    ctx.deadline_monotonic = float("inf")  # only the database's clock decides here
    _wait_past_deadline(db, job_id)
    with pytest.raises(JobAborted), ctx.transaction() as conn:
        _write(conn, "never")
    assert scalar(db, "SELECT count(*) FROM fenced_notes") == 0


def test_far_from_its_deadline_a_transaction_asks_the_database_once(db, notes, monkeypatch):
    """The fence statement says how long the attempt has left by database time; a transaction that ends
    well inside that (more than ``DEADLINE_MARGIN_SECONDS`` before it, by this process's clock since the
    fence was sent) commits without asking the database again (one statement less per job transaction).
    With the margin as wide as the deadline, the database is asked at the end, and the writes commit."""
    from app.ledger import context
    from app.sql import observing

    for margin, asked in ((context.DEADLINE_MARGIN_SECONDS, 0), (10_000.0, 1)):
        monkeypatch.setattr(context, "DEADLINE_MARGIN_SECONDS", margin)
        add_job(db, "delay_wake", {}, execution_timeout_ms=600_000)
        ctx = context_for(claim_one(db), db)
        names: list[str | None] = []
        with observing(lambda name, sql, params, seen=names: seen.append(name)), ctx.transaction() as conn:
            _write(conn, f"margin {margin}")
        assert names.count("job_lock_owned") == 1, names
        assert names.count("job_within_deadline") == asked, (margin, names)
        assert not ctx.aborted
    assert scalar(db, "SELECT count(*) FROM fenced_notes") == 2
