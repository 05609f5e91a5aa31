"""OWASP API3:2023 Broken Object Property Level Authorization, secrets shown where they should not be:
a rule's http action URL showed its password and query values in the create answer, GET,
the list and the audit row (subscriptions redacted theirs); and replaying a subscription create with the
same Idempotency-Key from another credential of the namespace returned the webhook secret again."""

from __future__ import annotations

import uuid

import httpx
import pytest

from app.auth import Scope
from tests.security.hostile import Author, author, sql
from tests.web.wf_ops import Ops

SECRET_URL = "http://alice:hunter2@127.0.0.1:1/hook?token=abc123&tenant=acme"
SHOWN = "http://***@127.0.0.1:1/hook?token=***&tenant=***"


@pytest.fixture(autouse=True)
def _loopback_receivers(monkeypatch):  # the live server runs in this process
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")


def _post(ops: Ops, who: Author, path: str, body: dict, key: str | None = None) -> httpx.Response:
    headers = {**who.headers, "Idempotency-Key": key or uuid.uuid4().hex}
    return httpx.post(ops.ns.url + path, json=body, headers=headers, timeout=10)


def test_a_rules_http_url_is_redacted_in_every_view_and_the_audit(ops):
    who = author(ops.ns.name, [Scope.INTEGRATIONS_MANAGE])
    created = _post(
        ops,
        who,
        "/v1/automation-rules",
        {"name": "notify", "event_type": "workflow.started", "action": {"kind": "http", "url": SECRET_URL}},
    )
    assert created.status_code == 201, created.text
    rule = created.json()["data"]
    shown = [rule["action"]["url"]]
    shown.append(
        httpx.get(f"{ops.ns.url}/v1/automation-rules/{rule['id']}", headers=who.headers).json()["data"][
            "action"
        ]["url"]
    )
    shown += [
        r["action"]["url"]
        for r in httpx.get(f"{ops.ns.url}/v1/automation-rules", headers=who.headers).json()["data"]["items"]
    ]
    [(audit,)] = sql(
        "SELECT after::text FROM operation_audit WHERE target_id = :r AND action = 'automation_rule.create'",
        r=rule["id"],
    )
    assert shown == [SHOWN, SHOWN, SHOWN]
    assert "hunter2" not in audit and "abc123" not in audit and SHOWN in audit
    # the rule itself still calls the URL it was given
    assert sql("SELECT action->>'url' FROM automation_rules WHERE id = :r", r=rule["id"])[0][0] == SECRET_URL


def test_a_subscriptions_secret_is_never_replayed_to_another_credential(ops):
    alice = author(ops.ns.name, [Scope.INTEGRATIONS_MANAGE])
    bob = author(ops.ns.name, [Scope.INTEGRATIONS_MANAGE])
    body = {"url": "http://127.0.0.1:1/hook", "event_types": ["*"]}
    key = uuid.uuid4().hex
    first = _post(ops, alice, "/v1/event-subscriptions", body, key)
    assert first.status_code == 201, first.text
    secret = first.json()["data"]["secret"]
    # alice's own retry (her answer was lost) replays her answer, secret included
    again = _post(ops, alice, "/v1/event-subscriptions", body, key)
    assert again.headers.get("Idempotent-Replayed") == "true" and again.json()["data"]["secret"] == secret
    # bob's request with the same key is his own request: never alice's stored answer
    other = _post(ops, bob, "/v1/event-subscriptions", body, key)
    assert secret not in other.text
    rotated = _post(
        ops, alice, f"/v1/event-subscriptions/{first.json()['data']['id']}/rotate-secret", {}, key
    )
    assert rotated.status_code == 200, rotated.text
    new_secret = rotated.json()["data"]["secret"]
    replayed_to_bob = _post(
        ops, bob, f"/v1/event-subscriptions/{first.json()['data']['id']}/rotate-secret", {}, key
    )
    assert new_secret not in replayed_to_bob.text


def test_a_rules_signing_secret_is_never_replayed_to_another_credential(ops):
    alice = author(ops.ns.name, [Scope.INTEGRATIONS_MANAGE])
    bob = author(ops.ns.name, [Scope.INTEGRATIONS_MANAGE])
    body = {
        "name": "n",
        "event_type": "workflow.started",
        "action": {"kind": "http", "url": "http://127.0.0.1:1/h"},
    }
    key = uuid.uuid4().hex
    secret = _post(ops, alice, "/v1/automation-rules", body, key).json()["data"]["secret"]
    assert secret not in _post(ops, bob, "/v1/automation-rules", body, key).text
