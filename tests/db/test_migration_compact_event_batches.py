"""Migration 0031_compact_event_batches: the downgrade writes compact batch rows back in the whole form,
which the previous release's views read as this release's views read the compact rows; after the upgrade
again both kinds of rows read the same, and new rows are compact again."""

from __future__ import annotations

from typing import Any

from alembic import command
from sqlalchemy import Engine, text

from app.auth import Principal
from app.engine import audit_entries, instances, start_keys
from app.idempotency import Key
from app.migrate import alembic_config, upgrade
from tests.engine.helpers import claim_task, complete_task, publish

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "a", "kind": "TASK", "queue": "mig31-q"},
        {"key": "b", "kind": "TASK", "queue": "mig31-q", "after": ["a"]},
    ],
}
EVENTS = (
    "SELECT id, seq, type, definition_id, body::text FROM workflow_events WHERE instance_id = :w ORDER BY seq"
)
AUDIT = (
    "SELECT id, actor_id, actor_name, action, target_type, target_id, operation_id, request_id, before::text, "
    "after::text, created_at FROM workflow_operations WHERE workflow_id = :w ORDER BY id"
)


def _start(eng: Engine, ns: str, def_id: str, key: str) -> str:
    who = Principal("c" * 32, "the starter", ns, ns, frozenset(), None)
    k = Key(scope=ns, route="POST /v1/workflows", key=key, fp="fp")

    def work(conn, key: Key) -> tuple[str, Any]:
        inst = instances.start_workflow(
            conn,
            ns,
            {"definition_id": def_id, "version": "v1", "input": {"n": 1.50}, "business_key": "bk"},
            on_created=lambda c, created: audit_entries.started(
                c, who, created["id"], instances.instance_view(created), request_id="req-1"
            ),
            start_key=(key.key, key.fp),
        )
        return inst["id"], {"request_id": "req-1", "data": {"instance": instances.instance_view(inst)}}

    return start_keys.execute_start(k, work, engine=eng).json()["data"]["instance"]["id"]


def _read(eng: Engine, wid: str) -> tuple[list[tuple], list[tuple]]:
    with eng.connect() as conn:
        return (
            [tuple(r) for r in conn.execute(text(EVENTS), {"w": wid})],
            [tuple(r) for r in conn.execute(text(AUDIT), {"w": wid})],
        )


def _compact(eng: Engine, wid: str) -> list[bool]:
    with eng.connect() as conn:
        return [
            r[0] == ""
            for r in conn.execute(
                text("SELECT definition_id FROM workflow_event_batches WHERE instance_id = :w"), {"w": wid}
            )
        ]


def test_downgrade_writes_the_whole_form_that_reads_the_same_and_upgrade_again(scratch) -> None:
    url, eng = scratch
    upgrade(url)
    ns = "ns-mig31"
    def_id = publish(eng, ns, DOC)
    wid = _start(eng, ns, def_id, "k-1")
    for _ in range(2):
        complete_task(eng, ns, claim_task(eng, ns, "mig31-q"), {"ok": True})
    before = _read(eng, wid)
    assert len(before[0]) == 10 and len(before[1]) == 6 and all(_compact(eng, wid))

    command.downgrade(alembic_config(url), "0031_fanout_children")
    assert not any(_compact(eng, wid))
    assert _read(eng, wid) == before  # the previous release's views over the whole form

    upgrade(url)
    assert _read(eng, wid) == before  # this release's views over rows of the whole form
    other = _start(eng, ns, def_id, "k-2")
    assert all(_compact(eng, other))
    events, audit = _read(eng, other)
    assert [e[2] for e in events] == ["workflow.started", "task.created", "step.activated"]
    assert sorted(a[3] for a in audit) == ["workflow.start", "workflow.step.activated"]
