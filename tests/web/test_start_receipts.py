"""A workflow start writes no ``idempotency_receipts`` row and no ``operation_audit`` row (issue 27): its
Idempotency-Key is kept on the instance row and its response on the start's event batch
(``app.engine.start_keys``), its ``workflow.start`` audit entry in that batch (``audit_entries.started``). Every
guarantee of W-START-7 / W-START-8 and W-AUDIT holds as it did with the rows."""

from __future__ import annotations

import json
import threading
import uuid
from typing import Any

from sqlalchemy import text

from app import idempotency
from app.auth import ensure_namespace
from app.db import transaction
from app.engine import instances, start_keys
from tests.engine.helpers import claim_task, complete_task, publish

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "a", "kind": "TASK", "queue": "sk.q"},
        {"key": "b", "kind": "TASK", "queue": "sk.q", "after": ["a"]},
    ],
}
SCOPES = ("workflows:start", "workflows:read", "workflows:audit:read", "tasks:submit")


def _setup(clean, token) -> tuple[str, str, dict[str, str]]:
    """A namespace of its own with the definition published: (namespace id, definition id, headers)."""
    name = "sk-" + uuid.uuid4().hex[:8]
    bearer = token(*SCOPES, namespace=name)
    with transaction(clean) as conn:
        ns = ensure_namespace(conn, name)
    return ns, publish(clean, ns, DOC), {"Authorization": f"Bearer {bearer}"}


def _start(client, headers: dict[str, str], body: dict, key: str):
    return client.post(
        "/v1/workflows",
        data=json.dumps(body),
        content_type="application/json",
        headers={**headers, "Idempotency-Key": key},
    )


def _count(clean, sql: str, **params: Any) -> int:
    with clean.connect() as conn:
        return int(conn.execute(text(sql), params).scalar_one())


def test_a_start_writes_neither_a_receipt_nor_an_audit_row_and_its_audit_entry_reads_as_the_row_did(
    client, token, clean
):
    ns, def_id, h = _setup(clean, token)
    r = _start(
        client,
        h,
        {"definition_id": def_id, "version": "v1", "input": {"url": "https://u:p@x.test/?a=1"}},
        "k1",
    )
    assert r.status_code == 201, r.get_data(as_text=True)
    first = r.get_json()
    wid = first["data"]["instance"]["id"]
    assert _count(clean, "SELECT count(*) FROM idempotency_receipts WHERE scope = :ns", ns=ns) == 0
    assert _count(clean, "SELECT count(*) FROM operation_audit WHERE namespace_id = :ns", ns=ns) == 0
    # the row audit.record wrote for a start, now read from the view of every audit reader
    with clean.connect() as conn:
        cred = conn.execute(
            text("SELECT id, name FROM credentials WHERE namespace_id = :ns"), {"ns": ns}
        ).one()
        row = (
            conn.execute(
                text(
                    "SELECT * FROM workflow_operations WHERE workflow_id = :w AND action = 'workflow.start'"
                ),
                {"w": wid},
            )
            .mappings()
            .one()
        )
        inserted = conn.execute(
            text("SELECT created_at FROM workflow_instances WHERE id = :w"), {"w": wid}
        ).scalar_one()
    assert (row["namespace_id"], row["actor_id"], row["actor_name"]) == (ns, cred.id, cred.name)
    assert (row["target_type"], row["target_id"], row["workflow_id"]) == ("workflow", wid, wid)
    assert row["request_id"] == first["request_id"] and row["request_id"]
    assert row["operation_id"] is None and row["reason"] is None and row["evidence_ref"] is None
    assert row["before"] is None and row["created_at"] == inserted
    # ``after``: the instance as inserted (RUNNING, before its first activations), a URL without user
    # info or query values as audit.record showed it
    after = row["after"]
    assert after["id"] == wid and after["state"] == "RUNNING" and after["revision"] == "2"
    assert "u:p@" not in json.dumps(after) and "a=1" not in json.dumps(after)
    # the API: the start is the oldest entry, before the engine's entry of its first activation
    listed = client.get(f"/v1/workflows/{wid}/operations", headers=h).get_json()["data"]["items"]
    oldest = listed[::-1]
    assert [o["action"] for o in oldest] == ["workflow.start", "workflow.step.activated"]
    assert oldest[0]["actor_id"] == cred.id and oldest[1]["actor_id"] == "system:engine"
    detail = client.get(f"/v1/workflows/{wid}/operations/{oldest[0]['id']}", headers=h).get_json()["data"]
    assert detail["after"] == after and detail["before"] is None and "reason" not in detail
    assert detail["operation_id"] == oldest[0]["id"] and detail["workflow_id"] == wid


def test_a_replay_answers_the_first_acceptance_byte_for_byte_after_the_instance_moved_on(
    client, token, clean
):
    ns, def_id, h = _setup(clean, token)
    body = {"definition_id": def_id, "version": "v1", "input": {"n": 9007199254740993, "f": 1.10}}
    raw = json.dumps(body).replace("1.1", "1.10")  # the exact number as sent
    r = client.post(
        "/v1/workflows", data=raw, content_type="application/json", headers={**h, "Idempotency-Key": "same"}
    )
    assert r.status_code == 201
    first = r.get_data(as_text=True)
    wid = r.get_json()["data"]["instance"]["id"]
    with clean.connect() as conn:
        kept = conn.execute(
            text(
                "SELECT start_response FROM workflow_event_batches WHERE instance_id = :w AND start_response IS NOT NULL"
            ),
            {"w": wid},
        ).scalar_one()
    assert kept == first
    complete_task(clean, ns, claim_task(clean, ns, "sk.q"), {"ok": True})  # the instance moves on
    now = client.get(f"/v1/workflows/{wid}", headers=h).get_json()["data"]
    assert now["revision"] != r.get_json()["data"]["instance"]["revision"]
    again = client.post(
        "/v1/workflows", data=raw, content_type="application/json", headers={**h, "Idempotency-Key": "same"}
    )
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    expected = first.replace(r.get_json()["request_id"], again.get_json()["request_id"]).replace(
        '"deduplicated":false', '"deduplicated":true'
    )
    assert again.get_data(as_text=True) == expected
    assert '"n":9007199254740993' in expected and '"f":1.10' in expected
    # another request with the key: 409, nothing started
    other = _start(client, h, {**body, "input": {"n": 2}}, "same")
    assert other.status_code == 409 and other.get_json()["code"] == "IDEMPOTENCY_CONFLICT"
    assert _count(clean, "SELECT count(*) FROM workflow_instances WHERE namespace_id = :ns", ns=ns) == 1
    # a trailing slash is the same route: the same key answers the same instance
    slash = client.post(
        "/v1/workflows/", data=raw, content_type="application/json", headers={**h, "Idempotency-Key": "same"}
    )
    assert slash.status_code == 200 and slash.get_json()["data"]["instance"]["id"] == wid


def test_a_stored_start_is_answered_when_the_namespace_is_full(client, token, clean, monkeypatch):
    ns, def_id, h = _setup(clean, token)
    body = {"definition_id": def_id, "version": "v1", "input": {}}
    assert _start(client, h, body, "l1").status_code == 201
    monkeypatch.setenv("LEDGERFLOW_INSTANCE_LIMIT", "1")
    full = _start(client, h, body, "l2")
    assert full.status_code == 409 and full.get_json()["code"] == "WORKFLOW_INSTANCE_LIMIT"
    replay = _start(client, h, body, "l1")
    assert replay.status_code == 200 and replay.get_json()["data"]["deduplicated"] is True


def test_a_key_older_than_its_retention_starts_a_new_instance_and_takes_the_key_over(client, token, clean):
    ns, def_id, h = _setup(clean, token)
    body = {"definition_id": def_id, "version": "v1", "input": {}}
    old = _start(client, h, body, "old").get_json()["data"]["instance"]["id"]
    with clean.begin() as conn:
        conn.execute(
            text(
                "UPDATE workflow_instances SET created_at = created_at - make_interval(hours => :h) WHERE id = :w"
            ),
            {"h": idempotency.RETENTION_HOURS + 1, "w": old},
        )
    # another request may use the key now, as after a receipt's expiry
    r = _start(client, h, {**body, "input": {"later": True}}, "old")
    assert r.status_code == 201, r.get_data(as_text=True)
    new = r.get_json()["data"]["instance"]["id"]
    assert new != old
    with clean.connect() as conn:
        keys = dict(
            conn.execute(
                text("SELECT id, start_key FROM workflow_instances WHERE id IN (:a, :b)"),
                {"a": old, "b": new},
            ).all()
        )
    assert keys == {old: None, new: "old"}
    again = _start(client, h, {**body, "input": {"later": True}}, "old")
    assert again.status_code == 200 and again.get_json()["data"]["instance"]["id"] == new


def test_a_start_receipt_stored_before_the_migration_still_replays(client, token, clean):
    ns, def_id, h = _setup(clean, token)
    body = {"definition_id": def_id, "version": "v1", "input": {"n": 1}}
    stored = json.dumps(
        {
            "request_id": "r-old",
            "data": {"instance": {"id": "f" * 32, "state": "RUNNING"}, "deduplicated": False},
        },
        separators=(",", ":"),
    )
    with clean.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO idempotency_receipts (scope, route, key, fingerprint, status_code, response) "
                "VALUES (:ns, 'POST /v1/workflows', 'before', :fp, 201, :body)"
            ),
            {"ns": ns, "fp": idempotency.fingerprint("POST", "/v1/workflows", body), "body": stored},
        )
    again = _start(client, h, body, "before")
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["data"] == {
        "instance": {"id": "f" * 32, "state": "RUNNING"},
        "deduplicated": True,
    }
    assert _start(client, h, {**body, "input": {"n": 2}}, "before").status_code == 409
    assert _count(clean, "SELECT count(*) FROM workflow_instances WHERE namespace_id = :ns", ns=ns) == 0


def test_two_concurrent_starts_with_one_key_start_one_instance(clean):
    """The second start waits on the key's lock while the first is in its transaction; its read was taken
    before the first committed, so its own instance INSERT fails on the key's unique index and it runs
    again, answering the first's instance (real threads, the key's real lock)."""
    ns = "sk-" + uuid.uuid4().hex[:8]
    def_id = publish(clean, ns, DOC)
    body = {"definition_id": def_id, "version": "v1", "input": {"n": 7}}
    k = idempotency.Key(scope=ns, route="POST /v1/workflows", key="dup", fp="fp-1")
    first_in, answers, tries = threading.Event(), [], []

    def work(conn, key: idempotency.Key, pause: bool) -> tuple[str, Any]:
        tries.append(pause)
        inst = instances.start_workflow(conn, ns, body, start_key=(key.key, key.fp))
        if pause:
            first_in.set()
            conn.execute(text("SELECT pg_sleep(1)"))  # the second waits on the key's lock meanwhile
        return inst["id"], {"instance": inst["id"]}

    def second() -> None:
        first_in.wait(10)
        answers.append(start_keys.execute_start(k, lambda c, key: work(c, key, False), engine=clean))

    t = threading.Thread(target=second)
    t.start()
    first = start_keys.execute_start(k, lambda c, key: work(c, key, True), engine=clean)
    t.join(20)
    assert not first.replayed and answers and answers[0].replayed and answers[0].body == first.body
    assert _count(clean, "SELECT count(*) FROM workflow_instances WHERE namespace_id = :ns", ns=ns) == 1
    # the second worked once: its first try, refused by the key's unique index and rolled back
    assert tries.count(False) == 1
