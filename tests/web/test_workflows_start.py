"""W-START on a live server: field rules, exact numbers and null, snapshot replay, idempotency
conflicts, concurrent duplicates, the namespace limit; X-DEF publishing errors."""

from __future__ import annotations

import threading
import uuid
from decimal import Decimal

import httpx
import pytest

from ledgerflow.client import IdempotencyConflict, InvalidArgument, LimitExceeded, NotFound, PermissionDenied
from tests.web.wf_live import wf_ns, wf_server  # noqa: F401

SIMPLE = {
    "version": "v1",
    "input_schema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}},
    "deadline_seconds": 3600,
    "steps": [{"key": "wait", "kind": "TIMER", "delay_seconds": 3600}],
    "output": {"n": "$.input.n"},
}


def _definition(client, doc=SIMPLE) -> str:
    d = client.create_definition("d-" + uuid.uuid4().hex[:8])
    client.publish_version(d["id"], doc)
    return d["id"]


def _raw(ns, method, path, body=None, key=None, who="all", **headers):
    h = {"Authorization": f"Bearer {ns.tokens[who]}", **headers}
    if key is not None:
        h["Idempotency-Key"] = key
    content = body if isinstance(body, str | bytes) or body is None else None
    if content is None and body is not None:
        from ledgerflow.client import _dumps

        content = _dumps(body)
    if content is not None:
        h.setdefault("Content-Type", "application/json")
    return httpx.request(method, ns.url + path, content=content, headers=h, timeout=30)


def test_start_fields_and_exact_round_trip(wf_ns):  # noqa: F811
    c = wf_ns.client()
    def_id = _definition(c)
    body = (
        '{"definition_id": "' + def_id + '", "version": "v1", '
        '"input": {"n": 9007199254740993, "x": null, "f": 1.10}, "business_key": "operation-001 "}'
    )
    r = _raw(wf_ns, "POST", "/v1/workflows", body, key="k1")
    assert r.status_code == 201, r.text
    assert '"n":9007199254740993' in r.text and '"x":null' in r.text and '"f":1.10' in r.text
    inst = r.json()["data"]["instance"]
    assert r.json()["data"]["deduplicated"] is False
    assert inst["business_key"] == "operation-001 "
    assert inst["revision"].isdigit() and inst["control_revision"] == "1" and inst["paused"] is False
    assert inst["state"] == "WAITING"
    for absent in ("output", "cancel_requested_at", "stop_kind", "stop_requested_at", "completed_at"):
        assert absent not in inst
    assert inst["created_at"].endswith("Z") and inst["deadline_at"].endswith("Z")
    got = _raw(wf_ns, "GET", f"/v1/workflows/{inst['id']}")
    assert '"n":9007199254740993' in got.text and '"x":null' in got.text and '"f":1.10' in got.text
    sdk = c.get_workflow(inst["id"])
    assert sdk.input == {"n": 9007199254740993, "x": None, "f": Decimal("1.10")} and isinstance(
        sdk.revision, int
    )


@pytest.mark.parametrize(
    "change, field",
    [
        ({"version": "latest"}, "version"),
        ({"version": "_v1"}, "version"),
        ({"version": "v" * 65}, "version"),
        ({"definition_id": "ABC"}, "definition_id"),
        ({"business_key": "x" * 192}, "business_key"),
        ({"business_key": 5}, "business_key"),
        ({"input": {"n": "not-int"}}, "input.n"),
        ({"input": {}}, "input"),
        ({"input": None}, "input"),
        ({"extra": 1}, "extra"),
        ({"Input": {}}, "Input"),
    ],
)
def test_start_field_rules(wf_ns, change, field):  # noqa: F811
    def_id = _definition(wf_ns.client())
    body = {"definition_id": def_id, "version": "v1", "input": {"n": 1}, **change}
    r = _raw(wf_ns, "POST", "/v1/workflows", body, key=uuid.uuid4().hex)
    assert r.status_code == 400, r.text
    p = r.json()
    assert r.headers["content-type"].startswith("application/problem+json")
    assert p["code"] == "INVALID_ARGUMENT" and any(e["field"].startswith(field) for e in p["errors"]), p


def test_start_missing_input_and_sizes(wf_ns):  # noqa: F811
    c = wf_ns.client()
    def_id = _definition(c, {**SIMPLE, "input_schema": {}})
    r = _raw(wf_ns, "POST", "/v1/workflows", {"definition_id": def_id, "version": "v1"}, key="a")
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "input"
    ok_null = _raw(
        wf_ns, "POST", "/v1/workflows", {"definition_id": def_id, "version": "v1", "input": None}, key="b"
    )
    assert ok_null.status_code == 201 and ok_null.json()["data"]["instance"]["input"] is None
    big = {"definition_id": def_id, "version": "v1", "input": {"s": "x" * (256 * 1024)}}
    r = _raw(wf_ns, "POST", "/v1/workflows", big, key="c")
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "input"
    bk = "é" * 191
    r = _raw(
        wf_ns,
        "POST",
        "/v1/workflows",
        {"definition_id": def_id, "version": "v1", "input": 1, "business_key": bk},
        key="d",
    )
    assert r.status_code == 201 and r.json()["data"]["instance"]["business_key"] == bk
    r = _raw(wf_ns, "POST", "/v1/workflows", {"definition_id": def_id, "version": "v9", "input": 1}, key="e")
    assert r.status_code == 404
    r = _raw(wf_ns, "POST", "/v1/workflows", "{}", key="f", **{"Content-Type": "text/plain"})
    assert r.status_code == 415
    r = _raw(wf_ns, "POST", "/v1/workflows", {"definition_id": def_id, "version": "v1", "input": 1})
    assert r.status_code == 400  # no Idempotency-Key


def test_snapshot_replay_conflict_and_permissions(wf_ns):  # noqa: F811
    c = wf_ns.client()
    def_id = _definition(c)
    first = c.start_workflow(def_id, "v1", {"n": 1}, idempotency_key="same")
    assert not first.deduplicated
    again = _raw(
        wf_ns,
        "POST",
        "/v1/workflows",
        {"definition_id": def_id, "version": "v1", "input": {"n": 1}},
        key="same",
    )
    assert again.status_code == 200 and again.json()["data"]["deduplicated"] is True
    assert again.json()["data"]["instance"]["revision"] == str(first.instance.revision)
    assert again.json()["data"]["instance"]["updated_at"] == first.instance.updated_at.isoformat().replace(
        "+00:00", "Z"
    )
    with pytest.raises(IdempotencyConflict) as e:
        c.start_workflow(def_id, "v1", {"n": 2}, idempotency_key="same")
    assert e.value.code == "IDEMPOTENCY_CONFLICT" and e.value.status == 409
    # tasks:submit is required when the definition uses task queues
    task_def = _definition(
        c, {**SIMPLE, "steps": [{"key": "t", "kind": "TASK", "queue": "q1"}], "output": None}
    )
    with pytest.raises(PermissionDenied):
        wf_ns.client("start_only").start_workflow(task_def, "v1", {"n": 1})
    with pytest.raises(NotFound):
        wf_ns.client("start_only").get_workflow("0" * 32)


def test_concurrent_duplicates_create_one_instance(wf_ns):  # noqa: F811
    c = wf_ns.client()
    def_id = _definition(c)
    results, errors = [], []

    def go() -> None:
        try:
            results.append(wf_ns.client().start_workflow(def_id, "v1", {"n": 7}, idempotency_key="dup"))
        except IdempotencyConflict as exc:  # in flight: 409 with Retry-After
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = {r.instance.id for r in results}
    assert len(ids) == 1 and len(results) + len(errors) == 6
    assert sum(not r.deduplicated for r in results) <= 1
    page = c.list_workflows(definition_id=def_id)
    assert [i.id for i in page.items] == list(ids)


def test_namespace_instance_limit(wf_ns, monkeypatch):  # noqa: F811
    monkeypatch.setenv("LEDGERFLOW_INSTANCE_LIMIT", "2")
    c = wf_ns.client()
    def_id = _definition(c)
    c.start_workflow(def_id, "v1", {"n": 1}, idempotency_key="l1")
    c.start_workflow(def_id, "v1", {"n": 2}, idempotency_key="l2")
    with pytest.raises(LimitExceeded) as e:
        c.start_workflow(def_id, "v1", {"n": 3}, idempotency_key="l3")
    assert e.value.code == "WORKFLOW_INSTANCE_LIMIT" and e.value.status == 409
    replay = c.start_workflow(def_id, "v1", {"n": 1}, idempotency_key="l1")
    assert replay.deduplicated


def test_publish_errors_name_the_field(wf_ns):  # noqa: F811
    c = wf_ns.client()
    d = c.create_definition("graph-" + uuid.uuid4().hex[:6])
    bad = {
        "version": "v1",
        "input_schema": {"type": "nope"},
        "deadline_seconds": 60,
        "signals": [{"name": "done", "payload_version": "v1", "schema": {"type": "object"}}],
        "steps": [
            {"key": "a", "kind": "TASK", "queue": "q", "after": ["c"]},
            {
                "key": "b",
                "kind": "TASK",
                "queue": "q",
                "after": ["ghost"],
                "input": {"x": "$.steps.zz.output"},
            },
            {"key": "c", "kind": "TASK", "queue": "q", "after": ["a"]},
            {
                "key": "d",
                "kind": "SIGNAL",
                "signal": "other",
                "payload_version": "v1",
                "correlation": "$.input.id",
            },
            {"key": "e", "kind": "TIMER", "delay_seconds": 1, "colour": "red"},
        ],
    }
    with pytest.raises(InvalidArgument) as e:
        c.publish_version(d["id"], bad)
    fields = {x["field"] for x in e.value.errors}
    assert {
        "input_schema.type",
        "steps[1].after[0]",
        "steps[1].input",
        "steps[3].signal",
        "steps[4].colour",
    } <= fields
    assert any(f.endswith(".after") and "cycle" in x["message"] for x in e.value.errors for f in [x["field"]])
    many = {**SIMPLE, "steps": [{"key": f"s{i}", "kind": "TIMER", "delay_seconds": 1} for i in range(129)]}
    with pytest.raises(InvalidArgument) as e:
        c.publish_version(d["id"], many)
    assert e.value.errors[0]["field"] == "steps"
    v = c.publish_version(d["id"], {**SIMPLE, "signals": bad["signals"]})
    contract = c.get_contract(d["id"], "v1")
    assert contract["input_schema"] == SIMPLE["input_schema"] and contract["signals"][0]["name"] == "done"
    assert v["version"] == "v1"
    r = _raw(wf_ns, "POST", f"/v1/workflow-definitions/{d['id']}/versions", SIMPLE, key=uuid.uuid4().hex)
    assert r.status_code == 409 and r.json()["code"] == "STATE_CONFLICT"  # versions are immutable


def test_start_input_with_a_lone_surrogate_is_refused_not_a_server_error(wf_ns):  # noqa: F811
    """Regression: ``"\\ud800"`` in the input made the size check raise UnicodeEncodeError (500)."""
    def_id = _definition(wf_ns.client(), {**SIMPLE, "input_schema": {}})
    body = '{"definition_id": "' + def_id + '", "version": "v1", "input": {"s": "\\ud800"}}'
    r = _raw(wf_ns, "POST", "/v1/workflows", body, key=uuid.uuid4().hex)
    assert r.status_code == 400, r.text
    assert r.json()["errors"] == [{"field": "input.s", "message": "string contains a lone UTF-16 surrogate"}]
