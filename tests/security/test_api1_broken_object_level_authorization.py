"""OWASP API1:2023 Broken Object Level Authorization: a ledger operator credential of one namespace
reaches only its namespace's jobs; a platform-wide one (``--platform``) reaches every namespace's,
and what it does to another namespace's job shows in that namespace's audit too."""

from __future__ import annotations

import uuid

import httpx
import pytest

from app.auth import Scope, create_credential
from app.db import transaction
from tests.web.wf_ops import sql

PREFIX = "/api/workflows/engine"
OPERATOR = [Scope.ENGINE_MONITOR, Scope.ENGINE_OPERATE]


def _operator(namespace: str, *, platform: bool) -> dict[str, str]:
    with transaction() as conn:
        issued = create_credential(
            conn, namespace=namespace, name="op-" + uuid.uuid4().hex[:6], scopes=OPERATOR, platform=platform
        )
    return {"Authorization": f"Bearer {issued.token}"}


def _timer_job(ops) -> tuple[str, int]:
    wid = ops.start(ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]}))
    job_id = sql(
        "SELECT id FROM workflow_jobs WHERE instance_id = :i AND type = 'delay_wake' "
        "AND payload->>'wake' = 'timer'",
        i=wid,
    )[0][0]
    return wid, job_id


def _get(ops, headers: dict, path: str) -> httpx.Response:
    return httpx.get(ops.ns.url + PREFIX + path, headers=headers, timeout=10)


def _skip(ops, headers: dict, job_id: int) -> httpx.Response:
    return httpx.post(
        f"{ops.ns.url}{PREFIX}/jobs/{job_id}/skip",
        json={"reason": "probe"},
        headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
        timeout=10,
    )


def test_a_namespace_operator_cannot_read_or_touch_another_namespaces_jobs(ops):
    wid, job_id = _timer_job(ops)
    other = _operator("other-" + uuid.uuid4().hex[:6], platform=False)
    assert _get(ops, other, f"/jobs/{job_id}").status_code == 404
    assert _get(ops, other, f"/jobs?instance_id={wid}").json()["data"]["items"] == []
    assert _get(ops, other, "/jobs/summary").json()["data"]["total"] == 0
    trace = sql("SELECT trace_id FROM workflow_jobs WHERE id = :i", i=job_id)[0][0]
    assert _get(ops, other, f"/jobs/chain/{trace}").status_code == 404
    assert _get(ops, other, "/jobs/runtime-status").status_code == 403
    assert _skip(ops, other, job_id).status_code == 404
    assert sql("SELECT status FROM workflow_jobs WHERE id = :i", i=job_id)[0][0] == "pending"


def test_a_namespace_operator_reaches_its_own_namespaces_jobs(ops):
    wid, job_id = _timer_job(ops)
    mine = _operator(ops.ns.name, platform=False)
    assert _get(ops, mine, f"/jobs/{job_id}").json()["data"]["instance_id"] == wid
    items = _get(ops, mine, f"/jobs?instance_id={wid}").json()["data"]["items"]
    assert str(job_id) in [j["id"] for j in items] and {j["instance_id"] for j in items} == {wid}


def test_a_platform_operator_acts_everywhere_and_is_audited_in_the_jobs_namespace(ops):
    wid, job_id = _timer_job(ops)
    platform = _operator("platform-ops-" + uuid.uuid4().hex[:6], platform=True)
    assert _get(ops, platform, f"/jobs/{job_id}").status_code == 200
    assert _get(ops, platform, "/jobs/runtime-status").status_code == 200
    assert _skip(ops, platform, job_id).status_code == 200
    rows = sql(
        "SELECT n.name FROM operation_audit a JOIN namespaces n ON n.id = a.namespace_id "
        "WHERE a.action = 'job.skip' AND a.target_id = :j ORDER BY n.name",
        j=str(job_id),
    )
    names = sorted(r[0] for r in rows)
    assert len(names) == 2 and ops.ns.name in names


def test_platform_needs_an_operator_switch():
    with pytest.raises(Exception, match="--platform"), transaction() as conn:
        create_credential(conn, namespace="x", name="w", scopes=[Scope.WORKFLOWS_READ], platform=True)


def test_the_operator_cli_applies_the_same_scope(ops):
    import json

    from click.testing import CliRunner

    from ledgerflow.ops_cli import jobs

    wid, job_id = _timer_job(ops)

    def listed(headers: dict[str, str]) -> list[str]:
        token = headers["Authorization"].split()[1]
        r = CliRunner().invoke(
            jobs, ["list", "--json", "--instance-id", wid], env={"LEDGERFLOW_TOKEN": token}
        )
        assert r.exit_code == 0, r.output
        return [j["id"] for j in json.loads(r.stdout)["items"]]

    assert listed(_operator("other-" + uuid.uuid4().hex[:6], platform=False)) == []
    assert str(job_id) in listed(_operator(ops.ns.name, platform=False))
