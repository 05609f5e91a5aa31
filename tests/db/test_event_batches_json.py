"""A batch row keeps its events and audit entries as the JSON text the engine wrote (``json``, migration
0038; ``jsonb`` before): fewer bytes, the same reads, and retention tells a row without audit entries in
either form."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.engine import events
from app.engine import retention as engine_retention
from app.ledger.retention import RetentionPolicy
from tests.db.old_schemas import migration_module
from tests.engine.helpers import publish, start

POLICY = RetentionPolicy(jobs_days=7, dead_days=30, audit_days=400, batch=100)
TIMER = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 60,
    "steps": [{"key": "w", "kind": "TIMER", "delay_seconds": 3600}],
}


def _finished_with_an_unaudited_batch(db, ns: str) -> str:
    """A finished workflow with two batches: its start's (with the engine's audit entry of its first step's
    activation) and one of an event alone."""
    iid = start(db, ns, publish(db, ns, TIMER), {"n": 1})["id"]
    with db.connect() as conn:
        with conn.begin():
            events.emit(conn, iid, "workflow.paused")  # events, no audit entry
        with conn.begin():
            conn.execute(
                text("UPDATE workflow_instances SET state = 'SUCCEEDED', completed_at = now() WHERE id = :i"),
                {"i": iid},
            )
    return iid


def _read(db, iid: str) -> tuple:
    with db.connect() as conn:
        evs = conn.execute(
            text("SELECT id, seq, type, body FROM workflow_events WHERE instance_id = :i ORDER BY seq"),
            {"i": iid},
        ).all()
        ops = conn.execute(
            text(
                "SELECT id, action, target_type, target_id, request_id, before, after FROM workflow_operations "
                "WHERE workflow_id = :i ORDER BY id"
            ),
            {"i": iid},
        ).all()
    return [tuple(r) for r in evs], [tuple(r) for r in ops]


def test_a_batch_is_stored_as_compact_json_text_and_reads_as_a_jsonb_row_does(db) -> None:
    ns = "ns-" + uuid.uuid4().hex[:8]
    iid = _finished_with_an_unaudited_batch(db, ns)
    with db.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT events IS NULL AND audit IS NULL AS no_jsonb, events_json::text AS ev, "
                "audit_json::text AS au, pg_column_size(events_json) + COALESCE(pg_column_size(audit_json), 0) "
                "AS stored, pg_column_size(CAST(events_json AS jsonb)) "
                "+ COALESCE(pg_column_size(CAST(audit_json AS jsonb)), 0) AS as_jsonb "
                "FROM workflow_event_batches WHERE instance_id = :i ORDER BY last_seq"
            ),
            {"i": iid},
        ).all()
    assert len(rows) == 2 and all(r.no_jsonb for r in rows)
    assert rows[0].au is not None and rows[1].au is None  # an empty list is NULL
    assert all(", " not in r.ev and '": ' not in r.ev for r in rows)
    assert all(r.stored < r.as_jsonb for r in rows), [(r.stored, r.as_jsonb) for r in rows]
    got = _read(db, iid)
    # started, step.activated, waiting (the start's batch), paused; the engine's audit entry of the activation
    assert [e[2] for e in got[0]] == [
        "workflow.started",
        "step.activated",
        "workflow.waiting",
        "workflow.paused",
    ]
    assert [o[1] for o in got[1]] == ["workflow.step.activated"]
    with db.begin() as conn:  # the same rows as a release before migration 0038 wrote them
        conn.execute(
            text(migration_module("0038_event_batches_json").AS_JSONB + " AND instance_id = :i"), {"i": iid}
        )
    assert _read(db, iid) == got


@pytest.mark.parametrize("form", ["json", "jsonb"])
def test_retention_removes_a_batch_without_audit_entries_and_keeps_one_with_them(db, form: str) -> None:
    """Past the job retention a finished workflow's batch without audit entries goes; one with them stays
    for the audit's retention: a row of either form (``events_json`` NULL for none; ``audit`` '[]')."""
    ns = "ns-" + uuid.uuid4().hex[:8]
    iid = _finished_with_an_unaudited_batch(db, ns)
    with db.begin() as conn:
        if form == "jsonb":
            conn.execute(
                text(migration_module("0038_event_batches_json").AS_JSONB + " AND instance_id = :i"),
                {"i": iid},
            )
        conn.execute(
            text(
                "UPDATE workflow_event_batches SET created_at = now() - interval '8 days' WHERE instance_id = :i"
            ),
            {"i": iid},
        )
        assert engine_retention.prune_events(conn, 100, policy=replace(POLICY)) == 1
        left = conn.execute(
            text(
                "SELECT first_seq, COALESCE(audit_json::text, audit::text) AS audit FROM workflow_event_batches "
                "WHERE instance_id = :i"
            ),
            {"i": iid},
        ).all()
    assert len(left) == 1 and left[0].first_seq == 1 and '"ev"' in left[0].audit  # the start's batch


def test_a_nul_character_is_refused_at_the_write_and_its_escape_as_text_is_kept(db) -> None:
    """The views read the lists as ``jsonb``, which cannot hold ``\\u0000``: a batch that holds a NUL
    character must fail its transaction (as the ``jsonb`` columns did), never a later read. It does:
    ``json_to_recordset`` turns each list into text for its ``json`` column, and refuses the escape there.
    The text ``\\u0000`` (a backslash and five characters) is no NUL and is kept."""
    ns = "ns-" + uuid.uuid4().hex[:8]
    iid = start(db, ns, publish(db, ns, TIMER), {"n": 1})["id"]
    before = _read(db, iid)
    with pytest.raises(DBAPIError, match="Unicode escape"), db.connect() as conn, conn.begin():
        events.emit(conn, iid, "workflow.paused", note="a\x00b")
    assert _read(db, iid) == before
    with db.connect() as conn, conn.begin():
        events.emit(conn, iid, "workflow.paused", note="a\\u0000b")
    got = _read(db, iid)[0]
    assert got[-1][2] == "workflow.paused" and got[-1][3]["note"] == "a\\u0000b"
