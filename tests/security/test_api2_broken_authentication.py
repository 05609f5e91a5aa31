"""OWASP API2:2023 Broken Authentication: tokens may expire, issuing and revoking are audited, and
the audit cannot be rewritten (a database trigger), like finished job attempts."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy.exc import DBAPIError

from ledgerflow.credentials_cli import credentials
from tests.web.wf_ops import sql


def _cli(*args: str):
    return CliRunner().invoke(credentials, list(args), catch_exceptions=False)


def test_expiring_platform_credential_is_shown_audited_and_stops_working(wf_server):
    ns = "auth-" + uuid.uuid4().hex[:6]
    r = _cli(
        "create",
        "--namespace",
        ns,
        "--name",
        "ops",
        "--engine-monitor",
        "--platform",
        "--expires-in",
        "2h",
        "--json",
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["platform"] is True and doc["expires_at"]
    listing = _cli("list", "--namespace", ns).output
    assert "PLATFORM-WIDE" in listing and "expires" in listing
    headers = {"Authorization": "Bearer " + doc["token"]}
    assert httpx.get(wf_server + "/api/workflows/engine/jobs/summary", headers=headers).status_code == 200
    sql(
        "UPDATE credentials SET expires_at = now() - interval '1 second' WHERE id = :i",
        i=doc["credential_id"],
    )
    assert httpx.get(wf_server + "/api/workflows/engine/jobs/summary", headers=headers).status_code == 401
    assert _cli("revoke", doc["credential_id"]).exit_code == 0
    actions = sql(
        "SELECT action, actor_name, after::text FROM operation_audit WHERE target_id = :i "
        "ORDER BY created_at",
        i=doc["credential_id"],
    )
    assert [a[0] for a in actions] == ["credential.issue", "credential.revoke"]
    assert all(a[1].startswith("cli") for a in actions)
    assert doc["token"] not in "".join(a[2] for a in actions)


@pytest.mark.parametrize("bad", ["0", "-5", "soon", "99999999999d"])
def test_expires_in_must_be_a_positive_duration(bad):
    r = _cli("create", "--namespace", "x", "--name", "n", "--engine-monitor", "--expires-in", bad)
    assert r.exit_code == 2


def test_platform_without_an_operator_switch_is_refused():
    r = _cli("create", "--namespace", "x", "--name", "n", "--task-worker", "--platform")
    assert r.exit_code == 2 and "--platform" in r.output


def test_the_operation_audit_is_append_only(wf_server):
    _cli("create", "--namespace", "audit-" + uuid.uuid4().hex[:6], "--name", "n", "--task-worker")
    with pytest.raises(DBAPIError, match="append-only"):
        sql("UPDATE operation_audit SET reason = 'rewritten'")
    with pytest.raises(DBAPIError, match="append-only"):
        sql("DELETE FROM operation_audit")
