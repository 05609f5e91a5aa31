"""Migration 0021_start_writes: a start keeps its Idempotency-Key on the instance row and its response on
its event batch, its ``workflow.start`` audit entry in that batch. The downgrade gives a recent start its
``idempotency_receipts`` row back and keeps the start entry readable; after the upgrade again the start is
still replayed (from that row) and its audit entry reads the same. The batch that keeps a start's response
outlives its key's retention whatever the retention policies say."""

from __future__ import annotations

from typing import Any

import pytest
from alembic import command
from sqlalchemy import Engine, text

from app import audit, idempotency
from app.auth import Principal
from app.engine import audit_entries, instances, retention, start_keys
from app.errors import IdempotencyConflict
from app.ledger.retention import RetentionPolicy
from app.migrate import alembic_config, upgrade
from tests.engine.helpers import claim_task, complete_task, publish

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [{"key": "t", "kind": "TASK", "queue": "mig21-q"}],
}


def _start(eng: Engine, ns: str, def_id: str, key: str, fp: str) -> idempotency.StoredResponse:
    who = Principal("c" * 32, "the starter", ns, ns, frozenset(), None)
    k = idempotency.Key(scope=ns, route="POST /v1/workflows", key=key, fp=fp)

    def work(conn, key: idempotency.Key) -> tuple[str, Any]:
        inst = instances.start_workflow(
            conn,
            ns,
            {"definition_id": def_id, "version": "v1", "input": {"n": 1}},
            on_created=lambda c, created: audit_entries.started(
                c, who, created["id"], instances.instance_view(created), request_id="req-1"
            ),
            start_key=(key.key, key.fp),
        )
        return inst["id"], {"request_id": "req-1", "data": {"instance": instances.instance_view(inst)}}

    return start_keys.execute_start(k, work, engine=eng)


def _start_entry(eng: Engine, ns: str, wid: str) -> dict:
    with eng.connect() as conn:
        [entry] = [
            e
            for e in audit.list_entries(conn, ns, workflow_id=wid, limit=10).items
            if e["action"] == "workflow.start"
        ]
    return entry


def test_downgrade_keeps_a_recent_start_replayable_and_its_audit_entry_and_upgrade_again(scratch):
    url, eng = scratch
    upgrade(url)
    ns = "ns-mig21"
    def_id = publish(eng, ns, DOC)
    first = _start(eng, ns, def_id, "k-1", "fp-1")
    wid = first.json()["data"]["instance"]["id"]
    entry = _start_entry(eng, ns, wid)
    assert (entry["actor_id"], entry["actor_name"], entry["request_id"]) == ("c" * 32, "the starter", "req-1")

    command.downgrade(alembic_config(url), "0021_wait_receipt")
    with eng.connect() as conn:
        receipt = conn.execute(
            text(
                "SELECT scope, route, fingerprint, status_code, response FROM idempotency_receipts WHERE key = 'k-1'"
            )
        ).one()
        columns = conn.execute(
            text(
                "SELECT count(*) FROM information_schema.columns WHERE column_name IN "
                "('start_key', 'start_fingerprint', 'start_response')"
            )
        ).scalar_one()
    assert tuple(receipt) == (ns, "POST /v1/workflows", "fp-1", 201, first.body) and columns == 0
    assert _start_entry(eng, ns, wid) == entry  # the previous release reads the same audit

    upgrade(url)
    again = _start(eng, ns, def_id, "k-1", "fp-1")
    assert again.replayed and again.body == first.body
    with pytest.raises(IdempotencyConflict):
        _start(eng, ns, def_id, "k-1", "fp-2")
    assert _start_entry(eng, ns, wid) == entry
    with eng.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM workflow_instances")).scalar_one()
    assert n == 1


def test_a_start_batch_outlives_its_keys_retention_only(engine):
    ns = "ns-keep-" + idempotency.fingerprint("x", "/", None)[:6]
    def_id = publish(engine, ns, DOC)
    first = _start(engine, ns, def_id, "keep", "fp-1")
    wid = first.json()["data"]["instance"]["id"]
    complete_task(engine, ns, claim_task(engine, ns, "mig21-q"), {"ok": True})  # finished
    policy = RetentionPolicy(jobs_days=0.01, audit_days=0.01)

    def batches() -> list[bool]:
        with engine.begin() as conn:
            retention.prune_events(conn, 1000, policy=policy)
            return [
                r.start_response is not None
                for r in conn.execute(
                    text("SELECT start_response FROM workflow_event_batches WHERE instance_id = :w"),
                    {"w": wid},
                )
            ]

    def age(hours: float) -> None:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "UPDATE workflow_event_batches SET created_at = now() - make_interval(hours => :h) "
                    "WHERE instance_id = :w"
                ),
                {"h": hours, "w": wid},
            )

    age(2)  # past both retentions (14.4 minutes), within the key's
    assert batches() == [True]  # the others are gone, the start's stays
    assert _start(engine, ns, def_id, "keep", "fp-1").body == first.body
    age(idempotency.RETENTION_HOURS + 1)
    assert batches() == []
