"""OWASP API1:2023 Broken Object Level Authorization, second round: a rule's
``definition_id`` filter accepted another namespace's definition id or any string (a subscription's is
refused with 400), and ``/metrics`` gave a namespace-scoped monitor the engine-wide figures of every
tenant while the runtime status refused it with 403."""

from __future__ import annotations

import uuid

import httpx

from app.auth import Scope, create_credential
from app.db import transaction
from tests.security.hostile import author
from tests.web.wf_live import make_namespace


def _rule(url: str, headers: dict, definition_id: str) -> httpx.Response:
    return httpx.post(
        url + "/v1/automation-rules",
        timeout=10,
        json={
            "name": "r",
            "event_type": "workflow.started",
            "definition_id": definition_id,
            "action": {
                "kind": "signal",
                "workflow_id": "$.event.workflow_id",
                "name": "n",
                "payload_version": "v1",
                "target_step_key": "t",
            },
        },
        headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
    )


def test_a_rules_definition_filter_must_name_a_definition_of_the_namespace(ops, wf_server):
    mine = ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 60}]})
    theirs_ns = make_namespace(wf_server)
    theirs = theirs_ns.client().create_definition("d-" + uuid.uuid4().hex[:8])["id"]
    who = author(ops.ns.name).headers
    for bad in (theirs, "not-a-definition", uuid.uuid4().hex):
        resp = _rule(ops.ns.url, who, bad)
        assert resp.status_code == 400, (bad, resp.text)
        assert [e["field"] for e in resp.json()["errors"]] == ["definition_id"]
    assert _rule(ops.ns.url, who, mine).status_code == 201


def test_metrics_are_a_platform_view_like_the_runtime_status(wf_server):
    namespace = "tenant-" + uuid.uuid4().hex[:6]
    with transaction() as conn:
        scoped = create_credential(conn, namespace=namespace, name="mon", scopes=[Scope.ENGINE_MONITOR])
        platform = create_credential(
            conn, namespace=namespace, name="plat", scopes=[Scope.ENGINE_MONITOR], platform=True
        )

    def get(path: str, token: str) -> httpx.Response:
        return httpx.get(wf_server + path, headers={"Authorization": f"Bearer {token}"}, timeout=10)

    assert get("/api/workflows/engine/jobs/runtime-status", scoped.token).status_code == 403
    assert get("/metrics", scoped.token).status_code == 403
    assert get("/metrics", platform.token).status_code == 200
