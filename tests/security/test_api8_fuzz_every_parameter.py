"""Every route's every parameter, from the OpenAPI document, gets arbitrary strings and bytes:
no answer may be a server error. Hypothesis draws, per operation, which parameter to attack (a path
segment, a query parameter, a field of the JSON body, or the whole body) and what to send there: any
Unicode text (NUL, lone surrogates, other scripts' digits, controls) or any bytes (percent-encoded in a
URL; raw, or as a latin-1 string, in a body). The other path parameters name real rows of the caller's
namespace (an instance with events, a subscription, a rule, a schedule, a job), so the attack reaches
past the lookups. The credential holds every scope, platform-wide.

Bounded for ``make test`` (``LEDGERFLOW_FUZZ_EXAMPLES`` examples per operation, 6 by default, the same
ones each run: about 20 s); ``make fuzz`` runs it (and schemathesis) longer, with new examples each time
(``LEDGERFLOW_FUZZ_RANDOM``)."""

from __future__ import annotations

import json
import os
import uuid
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.auth import ALL_SCOPES, create_credential
from app.db import transaction
from web import create_app

EXAMPLES = int(os.environ.get("LEDGERFLOW_FUZZ_EXAMPLES") or 6)
RANDOM = bool(os.environ.get("LEDGERFLOW_FUZZ_RANDOM"))  # make fuzz: new examples each run
_app = create_app()
_client = _app.test_client()
_DOC = _client.get("/openapi.json").json
OPERATIONS = sorted((path, method) for path, ops in _DOC["paths"].items() for method in ops)
_world: dict[str, Any] = {}

# any text (surrogates and NUL included) and any bytes
TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
HOSTILE = st.one_of(
    TEXT,
    st.binary(max_size=40),
    st.sampled_from(
        ["\x00", "a\x00b", "\ud800", "５", "１２", "-1", "1e999999", "9" * 40, "%00", "..", "a.b", ""]
    ),
)


def _world_values() -> dict[str, Any]:
    """Real rows of one namespace, for the path parameters that are not under attack."""
    if _world:
        return _world
    from tests.security.hostile import sql

    with transaction() as conn:
        issued = create_credential(
            conn,
            namespace="fuzz-" + uuid.uuid4().hex[:6],
            name="fuzz",
            scopes=sorted(ALL_SCOPES),
            platform=True,
        )
    h = {"Authorization": f"Bearer {issued.token}"}

    def post(path: str, body: dict) -> dict:
        r = _client.post(path, json=body, headers={**h, "Idempotency-Key": uuid.uuid4().hex})
        assert r.status_code in (200, 201), (path, r.data)
        return r.json["data"]

    d = post("/v1/workflow-definitions", {"name": "fuzz"})["definition"]["id"]
    post(
        f"/v1/workflow-definitions/{d}/versions",
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 600,
            "steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 600}],
        },
    )
    wid = post("/v1/workflows", {"definition_id": d, "version": "v1", "input": {}})["instance"]["id"]
    rule = post(
        "/v1/automation-rules",
        {
            "name": "r",
            "event_type": "workflow.started",
            "action": {"kind": "start_workflow", "definition_id": d, "version": "v1", "input": {}},
        },
    )["id"]
    sched = post(
        "/v1/schedules",
        {
            "name": "s",
            "definition_id": d,
            "version": "v1",
            "input": {},
            "interval_seconds": 3600,
            "paused": True,
        },
    )["id"]
    job, trace = sql("SELECT id, trace_id FROM workflow_jobs WHERE instance_id = :i LIMIT 1", i=wid)[0]
    _world.update(
        headers=h,
        values={
            "instance_id": wid,
            "definition_id": d,
            "rule_id": rule,
            "schedule_id": sched,
            "id": str(job),
            "traceId": trace,
            "key": "t",
            "version": "v1",
            "sid": uuid.uuid4().hex,
        },
    )
    return _world


def _targets(path: str, method: str) -> list[tuple[str, str]]:
    op = _DOC["paths"][path][method]
    out = [(p["in"], p["name"]) for p in op.get("parameters", []) if p["in"] in ("path", "query")]
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
    if body is not None:
        ref = body.get("$ref", "").rsplit("/", 1)[-1]
        props = _DOC["components"]["schemas"].get(ref, body).get("properties", {})
        out += [("body", name) for name in props] + [("body", "")]
    return out or [("path", "")]


def _url_part(value: str | bytes) -> str:
    raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
    return quote(raw, safe="")


@pytest.mark.parametrize(("path", "method"), OPERATIONS)
@settings(
    max_examples=EXAMPLES, deadline=None, derandomize=not RANDOM, suppress_health_check=list(HealthCheck)
)
@given(data=st.data())
def test_no_parameter_value_is_a_server_error(path: str, method: str, data: st.DataObject) -> None:
    # the task claim's long poll never waits here: ``wait_seconds`` is absent (0) or a hostile string
    world = _world_values()
    where, name = data.draw(st.sampled_from(_targets(path, method)), label="target")
    value = data.draw(HOSTILE, label="value")
    url = path
    for p in [p["name"] for p in _DOC["paths"][path][method].get("parameters", []) if p["in"] == "path"]:
        chosen = value if (where, name) == ("path", p) else world["values"].get(p, uuid.uuid4().hex)
        url = url.replace("{" + p + "}", _url_part(chosen) or "x")
    if where == "query":
        url += f"?{quote(name)}={_url_part(value)}"
    headers = {**world["headers"], "Idempotency-Key": uuid.uuid4().hex}
    body: bytes | None = None
    if method in ("post", "patch", "put", "delete"):
        headers["Content-Type"] = "application/json"
        payload: Any = {}
        if where == "body" and name:
            payload = {name: value.decode("latin-1") if isinstance(value, bytes) else value}
        elif where == "body":
            body = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
        body = body if body is not None else json.dumps(payload).encode()
    resp = _client.open(url, method=method.upper(), headers=headers, data=body)
    assert resp.status_code < 500, (method, url, body, resp.status_code, resp.data[:300])
