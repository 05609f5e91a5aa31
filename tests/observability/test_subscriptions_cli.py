"""``ledgerflow subscriptions ...`` through click's runner against the real database: the
integrations:manage switch, create (the secret printed once), list / show without the secret, disable
with the confirmation, the audit rows, redelivery arguments, and the destination policy's 400."""

from __future__ import annotations

import json
import uuid

from click.testing import CliRunner

from app.auth import SWITCHES, create_credential, scopes_from_switches
from app.db import transaction
from ledgerflow.subscriptions_cli import subscriptions
from tests.observability.conftest import scalar


def _token(engine, **switches: bool) -> str:
    with transaction(engine) as conn:
        return create_credential(
            conn, namespace="ops", name="op-" + uuid.uuid4().hex[:6], scopes=scopes_from_switches(**switches)
        ).token


def run(args: list[str], token: str, input: str | None = None):
    return CliRunner().invoke(
        subscriptions, args, env={"LEDGERFLOW_TOKEN": token}, input=input, catch_exceptions=False
    )


def test_subscriptions_from_the_shell(fresh, monkeypatch) -> None:
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")
    assert "integration_access" in SWITCHES
    denied = run(["list"], _token(fresh, engine_monitor=True))
    assert denied.exit_code == 1 and "integrations:manage" in denied.output
    token = _token(fresh, integration_access=True)
    refused = run(["create", "--url", "http://10.0.0.1/h", "--event", "*", "--json"], token)
    assert refused.exit_code == 2 and "INVALID_ARGUMENT" in refused.output
    made = run(
        ["create", "--url", "http://user:pw@127.0.0.1:5400/h?k=s", "--event", "workflow.*", "--json"], token
    )
    assert made.exit_code == 0, made.output
    sub = json.loads(made.output)
    assert sub["secret"].startswith("whsec_") and sub["url"] == "http://***@127.0.0.1:5400/h?k=***"
    listed = run(["list", "--json"], token)
    assert [s["id"] for s in json.loads(listed.output)["items"]] == [sub["id"]]
    assert "whsec_" not in listed.output and "whsec_" not in run(["show", sub["id"], "--json"], token).output
    aborted = run(["disable", sub["id"]], token, input="n\n")
    assert aborted.exit_code == 1 and json.loads(run(["show", sub["id"], "--json"], token).output)["enabled"]
    off = run(["disable", sub["id"], "--yes", "--json"], token)
    assert json.loads(off.output)["enabled"] is False
    assert scalar(fresh, "SELECT count(*) FROM operation_audit WHERE target_type = 'event_subscription'") == 2
    assert "whsec_" not in str(scalar(fresh, "SELECT string_agg(after::text, '') FROM operation_audit"))
    table = run(["deliveries", sub["id"]], token)
    assert table.exit_code == 0 and "deliveries" in table.output
    both = run(["redeliver", sub["id"]], token)
    assert both.exit_code == 2 and "exactly one" in both.output
    rotated = run(["rotate", sub["id"], "--yes", "--json"], token)
    assert json.loads(rotated.output)["secret"] != sub["secret"]
