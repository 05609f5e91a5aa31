"""Credentials through the operator API (issue 45): a credential with ``credentials:manage`` issues,
lists and revokes its namespace's credentials, each change with its own audit row whose actor is that
credential, and never grants more than it holds (scopes, platform reach, queues, namespace, lifetime)."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from app.auth import Scope, create_credential
from app.db import transaction
from ledgerflow.client import Client, NotFound, PermissionDenied, Unauthenticated

OPERATOR_SCOPES = [Scope.CREDENTIALS_MANAGE, Scope.WORKFLOWS_READ, Scope.WORKFLOWS_START, Scope.TASKS_SUBMIT]


def _issue(namespace: str, name: str, scopes: list[str], **kw) -> tuple[str, str]:
    with transaction() as conn:
        c = create_credential(conn, namespace=namespace, name=name, scopes=scopes, **kw)
    return c.token, c.credential_id


@pytest.fixture
def operator(wf_server):
    ns = "cred-" + uuid.uuid4().hex[:8]
    token, cid = _issue(ns, "operator", OPERATOR_SCOPES)
    return ns, cid, Client(wf_server, token)


def _audit(engine, credential_id: str) -> list[tuple[str, str]]:
    with engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                text("SELECT action, actor_id FROM operation_audit WHERE target_id = :t ORDER BY created_at"),
                {"t": credential_id},
            )
        ]


def test_an_operator_issues_lists_and_revokes_with_audit_rows(operator, wf_server, engine):
    ns, operator_id, client = operator
    issued = client.issue_credential("starter", switches=["workflow_run_access"])
    cred = issued["credential"]
    assert issued["token"].startswith("lf_") and cred["namespace"] == ns
    assert cred["scopes"] == sorted([Scope.WORKFLOWS_READ, Scope.WORKFLOWS_START, Scope.TASKS_SUBMIT])
    starter = Client(wf_server, issued["token"])
    assert starter.list_workflows().items == []  # the new token works

    listed = client.list_credentials().items
    assert [c["name"] for c in listed] == ["operator", "starter"]
    assert all("token" not in c and c["token_prefix"].startswith("lf_") for c in listed)

    revoked = client.revoke_credential(cred["id"], reason="left the team")
    assert revoked["id"] == cred["id"] and revoked["revoked_at"] is not None
    with pytest.raises(Unauthenticated):
        starter.list_workflows()
    assert _audit(engine, cred["id"]) == [
        ("credential.issue", operator_id),
        ("credential.revoke", operator_id),
    ]


def test_a_credential_never_issues_more_than_it_holds(operator, wf_server, engine):
    ns, operator_id, client = operator
    before = len(client.list_credentials().items)
    refusals = [
        dict(switches=["workflow_access"]),  # definitions:* it does not hold
        dict(scopes=[Scope.ENGINE_OPERATE]),
        dict(scopes=[Scope.WORKFLOWS_READ, Scope.ENGINE_MONITOR], platform=True),
    ]
    for kw in refusals:
        with pytest.raises(PermissionDenied) as exc:
            client.issue_credential("greedy", **kw)
        assert "does not hold" in exc.value.message or "platform-wide" in exc.value.message
    with pytest.raises(PermissionDenied, match="that namespace only"):
        client.request(
            "POST",
            "/api/workflows/engine/credentials",
            body={"name": "elsewhere", "scopes": [Scope.WORKFLOWS_READ], "namespace": "other-" + ns},
        )
    assert len(client.list_credentials().items) == before  # nothing was issued, nothing audited
    with engine.connect() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM operation_audit WHERE actor_id = :a"), {"a": operator_id}
        ).scalar()
    assert n == 0

    # what it issued can issue again only within that (a credential with credentials:manage alone)
    manager = Client(
        wf_server, client.issue_credential("manager", scopes=[Scope.CREDENTIALS_MANAGE])["token"]
    )
    with pytest.raises(PermissionDenied):
        manager.issue_credential("reader", scopes=[Scope.WORKFLOWS_READ])
    # a lesser credential cannot revoke a greater one; another namespace's is not found
    with pytest.raises(PermissionDenied, match="cannot revoke operator"):
        manager.revoke_credential(operator_id)
    _, foreign = _issue("other-" + ns, "x", [Scope.WORKFLOWS_READ])
    with pytest.raises(NotFound):
        client.revoke_credential(foreign)


def test_a_credential_without_the_scope_is_refused_and_an_expiring_one_issues_no_longer_lived(wf_server):
    ns = "cred-" + uuid.uuid4().hex[:8]
    plain, _ = _issue(ns, "reader", [Scope.WORKFLOWS_READ])
    with pytest.raises(PermissionDenied, match="credentials:manage"):
        Client(wf_server, plain).list_credentials()
    token, _ = _issue(ns, "temp-operator", OPERATOR_SCOPES, expires_in_seconds=3600)
    temp = Client(wf_server, token)
    with pytest.raises(PermissionDenied, match="cannot outlive it"):
        temp.issue_credential("longer", switches=["workflow_run_access"], expires_in_seconds=7200)
    issued = temp.issue_credential("shorter", switches=["workflow_run_access"])
    assert issued["credential"]["expires_at"] is not None  # at most the issuer's own lifetime
