"""Schemathesis against the live app and its own OpenAPI document: every operation, a bounded number of
generated examples each (valid and invalid), with a credential holding every scope. No request may
produce a server error (5xx), and every documented response must be problem+json or JSON."""

from __future__ import annotations

import atexit
import os
import time
import uuid
from collections import Counter

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from app.auth import ALL_SCOPES, create_credential
from app.db import get_engine, transaction
from web import create_app

MAX_EXAMPLES = int(os.environ.get("LEDGERFLOW_SCHEMATHESIS_EXAMPLES") or 20)  # `make fuzz`: more
_app = create_app()
schema = schemathesis.openapi.from_wsgi("/openapi.json", _app)
_state: dict[str, str] = {}
STATS: Counter[str] = Counter()


def _auth() -> dict[str, str]:
    if "token" not in _state:
        with transaction(get_engine()) as conn:
            issued = create_credential(
                conn, namespace="fuzz", name="fuzz-" + uuid.uuid4().hex[:8], scopes=sorted(ALL_SCOPES)
            )
        _state["token"] = issued.token
    return {"Authorization": "Bearer " + _state["token"]}


def test_openapi_document_shape():
    doc = _app.test_client().get("/openapi.json").json
    assert doc["openapi"].startswith("3.1")
    assert "bearerAuth" in doc["components"]["securitySchemes"]
    assert {"/healthz", "/readyz", "/api/workflows/engine/jobs/{id}/retry"} <= set(doc["paths"])
    retry = doc["paths"]["/api/workflows/engine/jobs/{id}/retry"]["post"]
    body = retry["requestBody"]["content"]["application/json"]["schema"]
    ref = body["$ref"].rsplit("/", 1)[-1]
    assert doc["components"]["schemas"][ref]["additionalProperties"] is False
    assert any(p["name"] == "Idempotency-Key" and p["required"] for p in retry["parameters"])
    assert retry["security"] == [{"bearerAuth": ["workflow:engine:operate"]}]


@schema.parametrize()
@settings(
    max_examples=MAX_EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_no_server_errors(case):
    body = case.body if isinstance(case.body, dict) else {}
    wait = body.get("wait_seconds")
    if case.operation.path == "/v1/tasks/claim" and type(wait) is int and wait > 1:
        # the typed claim schema makes valid long polls (up to 30 s by design) common: keep them short
        body["wait_seconds"] = 1
    started = time.monotonic()
    response = case.call(headers=_auth())
    case.validate_response(response, checks=[not_a_server_error])
    STATS[f"{case.operation.method.upper()} {case.operation.path} {response.status_code}"] += 1
    content_type = (response.headers.get("content-type") or [""])[0]
    plain_ok = case.operation.path == "/metrics" and response.status_code == 200  # Prometheus text format
    assert (
        response.status_code == 204
        or plain_ok
        or content_type.split(";")[0]
        in (
            "application/json",
            "application/problem+json",
        )
    ), response.headers
    assert time.monotonic() - started < 10


if os.environ.get("LEDGERFLOW_FUZZ_STATS"):
    atexit.register(
        lambda: print(
            "\n".join(f"{n:5d} {k}" for k, n in sorted(STATS.items())), "\ntotal", sum(STATS.values())
        )
    )
