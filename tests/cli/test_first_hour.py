"""The wrong turns of a newcomer's first hour, each fixed: one CLI error format, a credential
command that can run again, the job types and --priority told as the code does them, the first workflow
from the shell (publish, start, watch) through a live API, a changed document under a published version
refused, DELETE without a body, and a definition typo named as such."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner
from sqlalchemy import text

from app.auth import Scope, create_credential
from app.db import transaction
from app.ledger import nodes
from ledgerflow.cli import main
from ledgerflow.client import Client, StateConflict
from tests.web.wf_live import author_token, wf_server  # noqa: F401
from tests.web.wf_ops import ENGINE_WORKER_ENV

ROOT = Path(__file__).resolve().parents[2]
FIRST = ROOT / "docs" / "examples" / "first_definition.json"


def cli(*args: str, env: dict[str, str] | None = None, input: str | None = None):
    return CliRunner().invoke(main, list(args), env=env, input=input, prog_name="ledgerflow")


@pytest.fixture
def clean_credentials(engine):
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE operation_audit, idempotency_receipts, credentials, namespaces CASCADE"))


# --------------------------------------------------------------------------- one error format
def test_usage_errors_are_one_line_with_exit_2():
    r = cli("jobs", "list", "--bogus")
    assert (
        r.exit_code == 2
        and r.stderr == "Error: No such option '--bogus' (see `ledgerflow jobs list --help`)\n"
    )
    r = cli("nope")
    assert r.exit_code == 2 and r.stderr == "Error: No such command 'nope' (see `ledgerflow --help`)\n"
    r = cli("workflows", "start")
    assert (
        r.exit_code == 2
        and r.stderr.startswith("Error: Missing argument 'DEFINITION'")
        and r.stderr.count("\n") == 1
    )


def test_an_invalid_argument_is_said_once(clean_credentials):
    with transaction() as conn:
        token = create_credential(conn, namespace="n", name="r", scopes=[Scope.WORKFLOWS_READ]).token
    r = cli("workflows", "list", "--state", "BOGUS", env={"LEDGERFLOW_TOKEN": token})
    assert r.exit_code == 2 and r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    message = r.stderr.removeprefix("Error: ").strip()
    assert message.count("state") >= 1 and message.count(message.split(":")[-1].strip()) == 1, message


# --------------------------------------------------------------------------- credentials
def test_the_credential_command_can_run_again_with_replace(clean_credentials, engine):
    args = ("credentials", "create", "--namespace", "demo", "--name", "me", "--task-worker", "--token-only")
    first = cli(*args)
    assert first.exit_code == 0 and first.stdout.startswith("lf_")
    again = cli(
        *args
    )  # a new shell, the README's command again: an error, never an empty token with status 0
    assert again.exit_code == 1 and again.stdout == "" and "--replace" in again.stderr
    replaced = cli(*args, "--replace")
    assert replaced.exit_code == 0 and replaced.stdout.startswith("lf_") and replaced.stdout != first.stdout
    with engine.connect() as conn:
        rows = (
            conn.execute(text("SELECT revoked_at IS NULL FROM credentials ORDER BY created_at"))
            .scalars()
            .all()
        )
        audit = conn.execute(text("SELECT action FROM operation_audit ORDER BY created_at")).scalars().all()
    assert rows == [False, True]  # the first one revoked, the new one live
    assert audit == ["credential.issue", "credential.revoke", "credential.issue"]


# --------------------------------------------------------------------------- job types, priority
def test_enqueue_help_tells_the_pools_and_the_priority_order():
    help_text = cli("enqueue", "--help").stdout
    flat = " ".join(help_text.split())
    assert "needs a handler module" not in flat and "no built-in handler" not in flat
    assert "Every type has a built-in handler" in flat
    assert "schedule_launch      advance: one fire of a schedule" in help_text  # a verbatim block
    assert "the SMALLER number runs first" in flat


# --------------------------------------------------------------------------- the first workflow from the shell
@pytest.fixture
def shell(wf_server, spawn_worker):  # noqa: F811
    """A second terminal: LEDGERFLOW_URL / LEDGERFLOW_TOKEN of a fresh namespace, and an advance worker
    (the TIMER steps)."""
    token = author_token("sh")
    spawn_worker("advance", env=ENGINE_WORKER_ENV)
    return {"LEDGERFLOW_URL": wf_server, "LEDGERFLOW_TOKEN": token}


def test_publish_start_and_watch_the_first_workflow_from_the_shell(shell, tmp_path):
    published = cli("definitions", "publish", str(FIRST), env=shell)
    assert published.exit_code == 0, published.output
    assert published.stdout.startswith("definition first_definition (")
    assert "version v1 published" in published.stdout
    assert """workflows start first_definition --input '{"name": "..."}'""" in published.stdout
    again = cli("definitions", "publish", str(FIRST), env=shell)
    assert again.exit_code == 0 and "already published (the same document)" in again.stdout

    started = cli("workflows", "start", "first_definition", "--input", '{"name": "Ada"}', env=shell)
    assert started.exit_code == 0, started.output
    wid = started.stdout.split()[2]
    assert f"workflows watch {wid}" in started.stdout
    watched = cli("workflows", "watch", wid, "--timeout", "60", env=shell)
    assert watched.exit_code == 0, watched.output
    lines = watched.stdout.splitlines()
    assert lines[0].startswith("revision ") and "wait=" in lines[0]  # one line per change (not a terminal)
    assert any("wait=SUCCEEDED, then=SUCCEEDED" in line for line in lines)  # graph order
    assert lines[-1] == 'SUCCEEDED: output {"greeting": "Ada"}'
    assert "│ wait │ TIMER │ SUCCEEDED │" in watched.stdout  # the final step table

    # `workflows show`: the same step table, read from the database (not truncated raw JSON)
    shown = cli("workflows", "show", wid, env=shell)
    assert shown.exit_code == 0, shown.output
    assert "│ then │ TIMER │ SUCCEEDED │" in shown.stdout and '{"id"' not in shown.stdout

    # the input contract and a name that does not exist: one line each (the last: the in-process test server
    # logs to the same stderr), 2 for the bad input
    bad = cli("workflows", "start", "first_definition", "--input", '{"nam": "Ada"}', env=shell)
    assert bad.exit_code == 2 and _errors(bad) == [
        """Error: input does not satisfy the pinned version's input contract (input: "name" is a required property)"""
    ]
    missing = cli("workflows", "start", "nothere", env=shell)
    assert missing.exit_code == 1 and "no definition named 'nothere'" in _errors(missing)[0]
    # a changed document under the same version: refused, naming the version
    changed = json.loads(FIRST.read_text())
    changed["steps"][0]["delay_seconds"] = 2
    (tmp_path / "first_definition.json").write_text(json.dumps(changed))
    refused = cli("definitions", "publish", str(tmp_path / "first_definition.json"), env=shell)
    [line] = _errors(refused)
    assert (
        refused.exit_code == 1
        and "already has version 'v1' with a different document" in line
        and "'v2'" in line
    )


def _errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("Error")]


def test_ensure_definition_refuses_a_changed_document_under_a_published_version(shell):
    client = Client(shell["LEDGERFLOW_URL"], shell["LEDGERFLOW_TOKEN"])
    doc = json.loads(FIRST.read_text())
    first = client.ensure_definition("ensure", doc)
    assert (
        client.ensure_definition("ensure", json.loads(FIRST.read_text()))["id"] == first["id"]
    )  # same: fine
    doc["steps"][1]["delay_seconds"] = 1.0  # the same value written otherwise: the same document
    assert client.ensure_definition("ensure", doc)["id"] == first["id"]
    doc["output"] = {"hello": "$.input.name"}
    with pytest.raises(
        StateConflict, match=r"'ensure' already has version 'v1' with a different document.*'v2'"
    ):
        client.ensure_definition("ensure", doc)


def test_jobs_status_is_tables_and_counts_only_live_nodes(db, clean_credentials):
    with transaction() as conn:
        token = create_credential(
            conn, namespace="ops", name="m", scopes=[Scope.ENGINE_MONITOR], platform=True
        ).token
        for node, status in (("a" * 16, "active"), ("b" * 16, "stopped"), ("c" * 16, "stopped")):
            nodes.register_node(conn, node, roles=["worker"], pools=["workflow-ledger"], slot_capacity=4)
            nodes.heartbeat(conn, node, slots_in_use=0, status=status)
    r = cli("jobs", "status", env={"LEDGERFLOW_TOKEN": token})
    assert r.exit_code == 0, r.output
    assert "{'" not in r.stdout and "live worker processes" in r.stdout
    assert "1 live worker node(s), 0 not live; 2 stopped cleanly in the last day (not listed)" in r.stdout
    assert "a" * 16 in r.stdout and "b" * 16 not in r.stdout


# --------------------------------------------------------------------------- DELETE without a body
def test_delete_without_a_body_is_accepted_and_openapi_declares_none(wf_server, monkeypatch):  # noqa: F811
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")
    with transaction() as conn:
        token = create_credential(
            conn,
            namespace="del-" + uuid.uuid4().hex[:8],
            name="me",
            scopes=[
                Scope.DEFINITIONS_READ,
                Scope.DEFINITIONS_PUBLISH,
                Scope.WORKFLOWS_READ,
                Scope.WORKFLOWS_START,
                Scope.INTEGRATIONS_MANAGE,
            ],
        ).token
    client = Client(wf_server, token)
    d = client.ensure_definition("del", json.loads(FIRST.read_text()))
    schedule = client.create_schedule("s", d["id"], "v1", {"name": "x"}, interval_seconds=3600)
    sub = client.create_subscription("http://127.0.0.1:9/hook", ["workflow.*"])
    headers = {"Authorization": f"Bearer {token}"}
    for path in (f"/v1/schedules/{schedule['id']}", f"/v1/event-subscriptions/{sub['id']}"):
        r = httpx.delete(wf_server + path, headers={**headers, "Idempotency-Key": uuid.uuid4().hex})
        assert r.status_code == 200, (path, r.text)
        assert r.json()["data"]["deleted"] is True
    spec = httpx.get(wf_server + "/openapi.json").json()["paths"]
    for path in ("/v1/schedules/{schedule_id}", "/v1/event-subscriptions/{sid}"):
        assert "requestBody" not in spec[path]["delete"], path
        assert "415" not in spec[path]["delete"]["responses"], path
