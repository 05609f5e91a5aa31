"""OWASP API8:2023 Security Misconfiguration, the input side: strings PostgreSQL or the code
cannot hold reached them and came back as 500s. One input layer now refuses, with 400 naming the field,
NUL and lone surrogates in bodies, query values and path segments and non-ASCII digits in numeric
parameters; cursors are parsed defensively whatever key signed them; and a body over the limit is 413
however it is sent (chunked included)."""

from __future__ import annotations

import uuid
from decimal import Decimal

import httpx
import pytest

from app import cursor as cursors
from tests.security.hostile import author, sql
from tests.web.wf_ops import Ops

PREFIX = "/api/workflows/engine"


_TOKENS: dict[str, str] = {}


def _h(ops: Ops, **extra: str) -> dict[str, str]:
    """Every scope of the namespace (an operator of its own namespace's jobs, not a platform one)."""
    if ops.ns.name not in _TOKENS:
        _TOKENS[ops.ns.name] = author(ops.ns.name).token
    return {"Authorization": f"Bearer {_TOKENS[ops.ns.name]}", **extra}


def _get(ops: Ops, path: str, **params: str) -> httpx.Response:
    return httpx.get(ops.ns.url + path, params=params or None, headers=_h(ops), timeout=10)


def _post(ops: Ops, path: str, body: object) -> httpx.Response:
    return httpx.post(
        ops.ns.url + path, json=body, headers=_h(ops, **{"Idempotency-Key": uuid.uuid4().hex}), timeout=10
    )


def _refused(resp: httpx.Response, field: str) -> None:
    assert resp.status_code == 400, (resp.status_code, resp.text)
    problem = resp.json()
    fields = [e["field"] for e in problem["errors"]] or [problem.get("field")]
    assert any(field in (f or "") for f in fields), problem


@pytest.fixture
def world(ops, monkeypatch):
    """One of everything a list route pages over: an instance with events, signals and activations, a
    subscription, a rule."""
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")  # the server runs in this process
    def_id = ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]})
    wid = ops.start(def_id)
    sub = _post(ops, "/v1/event-subscriptions", {"url": "http://127.0.0.1:1/x", "event_types": ["*"]})
    rule = _post(
        ops,
        "/v1/automation-rules",
        {
            "name": "r",
            "event_type": "workflow.started",
            "action": {"kind": "start_workflow", "definition_id": def_id, "version": "v1", "input": {}},
        },
    )
    ns_id = sql("SELECT id FROM namespaces WHERE name = :n", n=ops.ns.name)[0][0]
    return {
        "def": def_id,
        "wid": wid,
        "ns": ns_id,
        "sub": sub.json()["data"]["id"],
        "rule": rule.json()["data"]["id"],
    }


LISTS = (
    "/v1/workflows",
    "/v1/workflow-definitions",
    "/v1/workflow-definitions/{def}/versions",
    "/v1/workflows/{wid}/events",
    "/v1/workflows/{wid}/signals",
    "/v1/workflows/{wid}/operations",
    "/v1/workflows/{wid}/signal-operations",
    "/v1/workflows/{wid}/steps/t/activations",
    "/v1/workflows/{wid}/steps/t/rounds",
    "/v1/schedules",
    "/v1/event-subscriptions",
    "/v1/event-subscriptions/{sub}/deliveries",
    "/v1/automation-rules",
    "/v1/automation-rules/{rule}/executions",
    PREFIX + "/jobs",
)


def test_a_non_ascii_cursor_is_a_400_on_every_list(ops, world):
    for path in LISTS:
        for bad in ("a.\u00e9", "\u00e9", "a.b.c", "x" * 2000, "a.\u0000"):
            _refused(_get(ops, path.format(**world), cursor=bad), "cursor")


def test_a_validly_signed_cursor_with_foreign_content_is_a_400(ops, world):
    """The built-in development key (``make run``, a Procfile deploy without LEDGERFLOW_ENV) is public:
    a cursor signed with it can carry anything."""
    bindings = {
        "/v1/workflows": {"ns": world["ns"], "filters": {}},
        "/v1/schedules": {"ns": world["ns"], "list": "schedules"},
        "/v1/automation-rules": {"ns": world["ns"], "k": "automation_rules"},
        f"/v1/workflows/{world['wid']}/events": {
            "ns": world["ns"],
            "wf": world["wid"],
            "k": "workflow_events",
        },
    }
    positions = [
        {"x": 1},
        {"c": "not a time", "i": "x", "t": "not a time", "s": "x"},
        {"c": Decimal("1e30"), "i": 1, "t": Decimal("1e30"), "s": Decimal("1e30")},
        {"c": "2026-01-01T00:00:00+00:00", "t": "2026-01-01T00:00:00+00:00", "i": "a\u0000b", "s": 2**70},
        {"c": ["x"], "t": {"a": 1}, "i": None, "s": -1},
    ]
    for path, binding in bindings.items():
        for pos in positions:
            _refused(_get(ops, path, cursor=cursors.encode(pos, binding)), "cursor")


def test_nul_in_a_path_segment_query_or_body_is_a_400_naming_it(ops, world):
    _refused(_get(ops, PREFIX + "/jobs/chain/a%00b"), "traceId")
    _refused(_get(ops, PREFIX + "/jobs/chain/a%00b/diagnostic-bundle"), "traceId")
    _refused(_get(ops, "/v1/workflows", business_key="a\u0000b"), "business_key")
    _refused(_post(ops, PREFIX + "/jobs/replay-preview", {"error_pattern": "a\u0000b"}), "error_pattern")
    _refused(
        _post(ops, PREFIX + "/jobs/replay-dead", {"reason": "x", "error_pattern": "a\u0000b"}),
        "error_pattern",
    )
    rule = {
        "name": "n",
        "event_type": "workflow.started",
        "action": {"kind": "start_workflow", "definition_id": world["def"], "version": "v1", "input": {}},
    }
    _refused(
        _post(
            ops,
            "/v1/automation-rules",
            {**rule, "conditions": [{"path": "data.instance.state", "op": "eq", "value": "a\u0000"}]},
        ),
        "conditions[0].value",
    )
    _refused(
        _post(ops, "/v1/automation-rules", {**rule, "action": {**rule["action"], "version": "v\u00001"}}),
        "action.version",
    )
    _refused(_post(ops, "/v1/automation-rules", {**rule, "definition_id": "a\u0000"}), "definition_id")
    _refused(
        _post(
            ops,
            "/v1/event-subscriptions",
            {"url": "https://hooks.example.com/x", "event_types": ["*"], "definition_id": "a\u0000"},
        ),
        "definition_id",
    )
    _refused(_get(ops, f"/v1/workflows/{world['wid']}/steps/a%00b"), "key")


def test_a_lone_surrogate_in_a_query_value_or_body_is_a_400(ops):
    raw = httpx.post(
        ops.ns.url + "/v1/automation-rules",
        content=b'{"name": "\\ud800"}',
        headers=_h(ops, **{"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"}),
        timeout=10,
    )
    _refused(raw, "name")


def _full_width(number: int) -> str:
    return "".join(chr(ord(c) + 0xFEE0) for c in str(number))


def test_non_ascii_digits_are_not_numbers(ops, world):
    _refused(_get(ops, "/v1/workflows", limit=_full_width(5)), "limit")
    _refused(_get(ops, PREFIX + "/jobs", limit=_full_width(5)), "limit")
    job_id = sql("SELECT id FROM workflow_jobs WHERE instance_id = :i ORDER BY id LIMIT 1", i=world["wid"])[
        0
    ][0]
    assert _get(ops, f"{PREFIX}/jobs/{job_id}").status_code == 200
    _refused(_get(ops, f"{PREFIX}/jobs/{_full_width(job_id)}"), "id")


def test_a_chunked_body_over_the_limit_is_413(ops):
    def chunks():  # no Content-Length: httpx sends Transfer-Encoding: chunked
        yield b'{"name": "'
        for _ in range(600):
            yield b"x" * 1024
        yield b'"}'

    resp = httpx.post(
        ops.ns.url + "/v1/automation-rules",
        content=chunks(),
        timeout=30,
        headers=_h(ops, **{"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"}),
    )
    assert resp.status_code == 413, resp.text
    small = httpx.post(
        ops.ns.url + "/v1/automation-rules",
        content=iter([b'{"name": 1}']),
        timeout=10,
        headers=_h(ops, **{"Idempotency-Key": uuid.uuid4().hex, "Content-Type": "application/json"}),
    )
    _refused(small, "name")  # a chunked body within the limit is read whole
