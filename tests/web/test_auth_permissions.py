"""Every route declares its scope; 401 / 403 matrix; credentials CLI (SPEC L-API-1, W-API-4, X-CRED)."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from app.auth import ALL_SCOPES, Scope
from tests.web.conftest import PREFIX, mutate
from web.meta import ATTR

PUBLIC = {"/healthz", "/readyz", "/openapi.json", "/docs/problems"}
MONITOR, OPERATE = Scope.ENGINE_MONITOR, Scope.ENGINE_OPERATE
LEDGER_ROUTES = [
    ("GET", "/jobs", MONITOR),
    ("GET", "/jobs/summary", MONITOR),
    ("GET", "/jobs/runtime-status", MONITOR),
    ("GET", "/jobs/1", MONITOR),
    ("GET", "/jobs/chain/t", MONITOR),
    ("GET", "/jobs/chain/t/diagnostic-bundle", MONITOR),
    ("GET", "/jobs/failure-clusters", MONITOR),
    ("POST", "/jobs/replay-preview", MONITOR),
    ("POST", "/jobs/1/retry", OPERATE),
    ("POST", "/jobs/1/skip", OPERATE),
    ("POST", "/jobs/batch-retry", OPERATE),
    ("POST", "/jobs/batch-skip", OPERATE),
    ("POST", "/jobs/replay-dead", OPERATE),
]


CONSOLE_SESSION = {"/console/", "/console/login", "/console/logout", "/console/search"}


def test_every_route_declares_scopes_or_is_public(app):
    missing = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint in ("static", "console.static"):
            continue
        meta = getattr(app.view_functions[rule.endpoint], ATTR, {})
        if meta.get("console_session"):  # the console's login, logout and index: no scope of their own
            assert rule.rule in CONSOLE_SESSION, f"{rule.rule} is session-only but not on the list"
        elif meta.get("public"):
            assert rule.rule in PUBLIC, f"{rule.rule} is public but not on the public list"
        elif not meta.get("scopes"):
            missing.append(rule.rule)
        else:
            assert set(meta["scopes"]) <= ALL_SCOPES, rule.rule
    assert missing == [], f"routes without a declared scope: {missing}"


def test_ledger_routes_are_exactly_the_thirteen(app):
    ours = sorted(
        (m, re.sub(r"<(\w+)>", r"{\1}", r.rule[len(PREFIX) :]))
        for r in app.url_map.iter_rules()
        if r.rule.startswith(PREFIX + "/jobs")  # the ledger's (the operator API also issues credentials)
        for m in r.methods - {"HEAD", "OPTIONS"}
    )
    assert len(ours) == 13
    assert ("GET", "/jobs/chain/{traceId}/diagnostic-bundle") in ours


def _call(client, method, path, headers):
    if method == "GET":
        return client.get(PREFIX + path, headers=headers)
    return mutate(client, path, headers, {"job_ids": ["1"]} if "batch" in path else {})


@pytest.mark.parametrize(("method", "path", "scope"), LEDGER_ROUTES)
def test_permission_matrix(client, token, method, path, scope):
    r = _call(client, method, path, {})
    assert r.status_code == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
    assert r.json["code"] == "UNAUTHENTICATED"
    assert _call(client, method, path, {"Authorization": "Bearer lf_unknown"}).status_code == 401
    assert _call(client, method, path, {"Authorization": "Basic abc"}).status_code == 401
    others = sorted(ALL_SCOPES - {scope})  # every other permission, but not this one
    r = _call(client, method, path, {"Authorization": "Bearer " + token(*others)})
    assert r.status_code == 403 and r.json["code"] == "PERMISSION_DENIED"
    r = _call(client, method, path, {"Authorization": "Bearer " + token(scope)})
    assert r.status_code not in (401, 403), r.json


def test_revoked_token_is_401(client, clean):
    from app.auth import create_credential, revoke_credential
    from app.db import transaction

    with transaction(clean) as conn:
        issued = create_credential(conn, namespace="ops", name="gone", scopes=[MONITOR])
    h = {"Authorization": f"Bearer {issued.token}"}
    assert client.get(f"{PREFIX}/jobs/summary", headers=h).status_code == 200
    with transaction(clean) as conn:
        revoke_credential(conn, issued.credential_id)
    assert client.get(f"{PREFIX}/jobs/summary", headers=h).status_code == 401


def test_tokens_are_stored_hashed(clean, token):
    raw = token(MONITOR)
    with clean.connect() as conn:
        stored = conn.execute(text("SELECT token_hash, token_prefix FROM credentials")).one()
    assert raw not in stored.token_hash and len(stored.token_hash) == 64


def _cli(*args: str):
    from ledgerflow.cli import main

    return CliRunner().invoke(main, ["credentials", *args], catch_exceptions=False)


def test_cli_create_list_revoke(client, clean):
    r = _cli(
        "create", "--namespace", "acme", "--name", "ops", "--engine-monitor", "--engine-operate", "--json"
    )
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["namespace"] == "acme" and len(doc["namespace_id"]) == 32
    assert doc["scopes"] == sorted([MONITOR, OPERATE]) and doc["token"].startswith("lf_")
    h = {"Authorization": "Bearer " + doc["token"]}
    assert client.get(f"{PREFIX}/jobs/summary", headers=h).status_code == 200
    r = _cli(
        "create", "--namespace", "acme", "--name", "w", "--task-worker", "--queue", "approvals", "--json"
    )
    assert json.loads(r.output)["queues"] == ["approvals"]
    r = _cli(
        "create",
        "--namespace",
        "acme",
        "--name",
        "run",
        "--workflow-run-access",
        "--workflow-access",
        "--json",
    )
    assert json.loads(r.output)["scopes"] == sorted(
        ["definitions:read", "definitions:publish", "workflows:read", "workflows:start", "tasks:submit"]
    )
    listing = _cli("list", "--namespace", "acme")
    assert "acme/ops" in listing.output and doc["token"] not in listing.output
    assert _cli("revoke", doc["credential_id"]).exit_code == 0
    assert client.get(f"{PREFIX}/jobs/summary", headers=h).status_code == 401


@pytest.mark.parametrize(
    "args",
    [
        [],  # empty permission set
        ["--queue", "q"],  # queue without --task-worker
        ["--engine-monitor", "--queue", "q"],
        ["--task-worker", "--engine-operate", "--queue", "q"],  # restricted worker with namespace-wide rights
    ],
)
def test_cli_refuses_empty_or_contradictory_sets(clean, args):
    r = _cli("create", "--namespace", "acme", "--name", "bad", *args)
    assert r.exit_code != 0
    with clean.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM credentials")).scalar() == 0
        assert conn.execute(text("SELECT count(*) FROM namespaces")).scalar() == 0


def test_worker_switch_grants_nothing_else(clean):
    doc = json.loads(_cli("create", "--namespace", "acme", "--name", "w", "--task-worker", "--json").output)
    assert doc["scopes"] == ["tasks:work"]


@pytest.mark.parametrize(
    ("switch", "action_scope"),
    [
        ("--workflow-control-access", "workflows:control"),
        ("--workflow-signal-access", "workflows:signal"),
        ("--workflow-recovery-access", "workflows:recovery"),
    ],
)
def test_management_switches_bundle_instance_read_as_the_seed_says(clean, switch, action_scope):
    """Seed 004 §1: control / signal / recovery access are "instance read + <action>"; audit access
    is audit read only, and none of them grants start, publish or task work."""
    doc = json.loads(_cli("create", "--namespace", "acme", "--name", "m", switch, "--json").output)
    assert doc["scopes"] == sorted([action_scope, "workflows:read"])


def test_audit_switch_grants_audit_read_only(clean):
    doc = json.loads(
        _cli("create", "--namespace", "acme", "--name", "a", "--workflow-audit-access", "--json").output
    )
    assert doc["scopes"] == ["workflows:audit:read"]
