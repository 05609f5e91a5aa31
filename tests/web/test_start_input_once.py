"""A start's input kept once (issue 50, migration 0040): the response of a start whose input is long is kept
on its batch without that input (``commit_batch.stored_response``); a resent start answers the whole
response again and the audit's ``workflow.start`` entry shows the whole instance, both with the input read
from the instance row."""

from __future__ import annotations

import json
import uuid
from typing import Any

from sqlalchemy import text

from app.auth import ensure_namespace
from app.db import transaction
from tests.db.old_schemas import migration_module
from tests.engine.helpers import publish
from tests.ledger_helpers import scalar

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [{"key": "a", "kind": "TASK", "queue": "io.q"}],
}
SCOPES = ("workflows:start", "workflows:read", "workflows:audit:read", "tasks:submit")
# long, with numbers a float would not keep, and keys in an order jsonb does not keep
LONG = {"zz": "é" * 300, "n": 9007199254740993, "f": 1.10, "a": [1, {"y": None, "b": True}]}


def _start(client, token, clean, input_: Any) -> tuple[str, dict[str, str], str, Any]:
    """A keyed start: (workflow id, headers, the raw request, the first response)."""
    name = "io-" + uuid.uuid4().hex[:8]
    bearer = token(*SCOPES, namespace=name)
    with transaction(clean) as conn:
        ns = ensure_namespace(conn, name)
    h = {"Authorization": f"Bearer {bearer}", "Idempotency-Key": "k-" + uuid.uuid4().hex}
    raw = json.dumps({"definition_id": publish(clean, ns, DOC), "version": "v1", "input": input_})
    raw = raw.replace("1.1,", "1.10,")  # the exact number as sent
    r = client.post("/v1/workflows", data=raw, content_type="application/json", headers=h)
    assert r.status_code == 201, r.get_data(as_text=True)
    return r.get_json()["data"]["instance"]["id"], h, raw, r


def _kept(clean, wid: str) -> str:
    sql = "SELECT start_response FROM workflow_event_batches WHERE instance_id = :w AND start_response IS NOT NULL"
    return scalar(clean, sql, w=wid)


def _start_entry(client, wid: str, h: dict[str, str]) -> dict:
    ops = client.get(f"/v1/workflows/{wid}/operations?limit=100", headers=h).get_json()["data"]["items"]
    start = next(o for o in ops if o["action"] == "workflow.start")
    return client.get(f"/v1/workflows/{wid}/operations/{start['id']}", headers=h).get_json()["data"]


def test_a_long_input_is_kept_once_and_a_resent_start_and_the_audit_answer_it_whole(client, token, clean):
    wid, h, raw, first = _start(client, token, clean, LONG)
    instance = first.get_json()["data"]["instance"]
    assert instance["input"]["n"] == 9007199254740993 and '"f":1.10' in first.get_data(as_text=True)
    kept = _kept(clean, wid)
    assert "é" * 300 not in kept and '"input_on_instance":true' in kept  # once: on the instance row
    assert len(kept) < len(first.get_data(as_text=True)) - 300
    again = client.post("/v1/workflows", data=raw, content_type="application/json", headers=h)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    body = again.get_json()
    assert body["data"]["instance"] == instance and body["data"]["deduplicated"] is True
    # the replay's text: the first one's, with this request's id and deduplicated true
    replayed = json.loads(first.get_data(as_text=True))
    replayed["request_id"], replayed["data"]["deduplicated"] = body["request_id"], True
    assert again.get_data(as_text=True) == json.dumps(
        replayed, separators=(",", ":"), ensure_ascii=False
    ).replace('"f":1.1,', '"f":1.10,')
    entry = _start_entry(client, wid, h)
    assert entry["after"] == instance


def test_a_short_input_keeps_the_whole_response(client, token, clean):
    wid, h, _, first = _start(client, token, clean, {"i": 18})
    assert _kept(clean, wid) == first.get_data(as_text=True)
    assert _start_entry(client, wid, h)["after"] == first.get_json()["data"]["instance"]


def test_the_downgrade_writes_the_whole_response_back(client, token, clean):
    """Migration 0040's downgrade: a release before it reads the response whole (the text jsonb renders:
    the same values)."""
    wid, h, raw, first = _start(client, token, clean, LONG)
    with clean.begin() as conn:
        conn.execute(text(migration_module("0040_start_input_once").WHOLE))
    kept = _kept(clean, wid)
    assert "input_on_instance" not in kept
    assert json.loads(kept) == json.loads(first.get_data(as_text=True))
    again = client.post("/v1/workflows", data=raw, content_type="application/json", headers=h)
    assert (
        again.status_code == 200
        and again.get_json()["data"]["instance"] == first.get_json()["data"]["instance"]
    )
