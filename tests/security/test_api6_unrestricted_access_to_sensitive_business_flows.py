"""OWASP API6:2023 Unrestricted Access to Sensitive Business Flows: one Idempotency-Key starts one
workflow, whether the path is written ``/v1/workflows`` or ``/v1/workflows/`` (before the fix the two
spellings were two idempotency scopes and the same key started two instances)."""

from __future__ import annotations

import uuid

import httpx

from tests.web.wf_ops import sql


def test_one_key_one_instance_with_or_without_a_trailing_slash(ops):
    def_id = ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]})
    key = uuid.uuid4().hex
    body = {"definition_id": def_id, "version": "v1", "input": {}}
    headers = {"Authorization": f"Bearer {ops.ns.tokens['all']}", "Idempotency-Key": key}
    first = httpx.post(ops.ns.url + "/v1/workflows", json=body, headers=headers)
    second = httpx.post(ops.ns.url + "/v1/workflows/", json=body, headers=headers)
    assert first.status_code == 201, first.text
    assert second.status_code in (200, 201) and second.headers.get("Idempotent-Replayed") == "true"
    assert second.json()["data"]["instance"]["id"] == first.json()["data"]["instance"]["id"]
    assert sql("SELECT count(*) FROM workflow_instances WHERE definition_id = :d", d=def_id)[0][0] == 1
