"""OWASP API3:2023 Broken Object Property Level Authorization: a retry may not replace the payload
of the engine's own job types (it could point a wake at another instance); an integration job's
payload may change, but never the fields naming what it belongs to."""

from __future__ import annotations

import uuid

import httpx

from tests.security.test_api1_broken_object_level_authorization import PREFIX, _operator
from tests.web.wf_ops import sql


def _retry(ops, headers: dict, job_id: int, payload: dict) -> httpx.Response:
    return httpx.post(
        f"{ops.ns.url}{PREFIX}/jobs/{job_id}/retry",
        json={"payload": payload, "reason": "probe"},
        headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )


def test_engine_job_payload_cannot_be_pointed_at_another_instance(ops):
    victim = ops.start(ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]}))
    attacker = ops.start(ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]}))
    job_id, payload = sql(
        "SELECT id, payload FROM workflow_jobs WHERE instance_id = :i AND payload->>'wake' = 'timer'",
        i=attacker,
    )[0]
    sql("UPDATE workflow_jobs SET status = 'dead', finished_at = now() WHERE id = :i", i=job_id)
    headers = _operator(ops.ns.name, platform=False)
    r = _retry(ops, headers, job_id, {**payload, "instance_id": victim})
    assert r.status_code == 400 and r.json()["errors"][0]["field"] == "payload", r.text
    assert "engine's own" in r.json()["errors"][0]["message"]
    assert sql("SELECT status FROM workflow_jobs WHERE id = :i", i=job_id)[0][0] == "dead"
    # the same payload (no replacement) is still a plain retry
    assert _retry(ops, headers, job_id, payload).status_code == 200


def test_integration_payload_keeps_its_identity_fields(ops):
    wid = ops.start(ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]}))
    job_id = sql(
        "INSERT INTO workflow_jobs (type, queue, status, instance_id, max_attempts, operation_key, trace_id, "
        "payload, finished_at) VALUES ('external_dispatch', 'workflow-ledger-outbound', 'dead', :i, 3, :op, 't', "
        "CAST(:p AS jsonb), now()) RETURNING id",
        i=wid,
        op=uuid.uuid4().hex,
        p='{"instance_id": "' + wid + '", "amount": 1}',
    )[0][0]
    headers = _operator(ops.ns.name, platform=False)
    r = _retry(ops, headers, job_id, {"instance_id": "f" * 32, "amount": 1})
    assert r.status_code == 400 and "instance_id" in r.json()["errors"][0]["message"]
    assert _retry(ops, headers, job_id, {"instance_id": wid, "amount": 2}).status_code == 200
