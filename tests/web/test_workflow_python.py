"""Workflows written in Python against a live server (issue 44): the order example runs end to end
(both branches, the join once, a fan-out over the lines, the compensation of a declined charge) with its functions registered by
``Workflow.register``; its JSON twin and the Python form publish one version (the same document); and
``ledgerflow definitions publish MODULE:ATTRIBUTE`` publishes it idempotently, with one-line errors."""

from __future__ import annotations

import ast
import importlib
import json
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.auth import Scope, create_credential
from app.db import transaction
from ledgerflow.cli import main as cli_main
from ledgerflow.client import Client
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ENGINE_WORKER_ENV

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def token() -> str:
    with transaction() as conn:
        return create_credential(
            conn,
            namespace="py-" + uuid.uuid4().hex[:8],
            name="me",
            scopes=[
                Scope.DEFINITIONS_READ,
                Scope.DEFINITIONS_PUBLISH,
                Scope.WORKFLOWS_READ,
                Scope.WORKFLOWS_START,
                Scope.WORKFLOWS_SIGNAL,
                Scope.TASKS_SUBMIT,
                Scope.TASKS_WORK,
            ],
        ).token


def test_the_order_example_runs_both_branches_and_compensates(
    wf_server,  # noqa: F811
    token,
    spawn_worker,
    monkeypatch,
    capsys,
) -> None:
    spawn_worker("advance", env=ENGINE_WORKER_ENV)  # the TIMER's job
    spawn_worker("outbound", env=ENGINE_WORKER_ENV)  # the compensation chain's jobs
    monkeypatch.setenv("LEDGERFLOW_URL", wf_server)
    monkeypatch.setenv("LEDGERFLOW_TOKEN", token)
    client = Client(wf_server, token)
    twin = json.loads((ROOT / "examples" / "order_flow.json").read_text())
    definition = client.ensure_definition("order_flow", twin)  # the JSON form first
    order_flow = importlib.import_module("examples.order_flow")
    assert order_flow.wf.publish(client)["id"] == definition["id"]  # the same document: the same version
    assert [v["version"] for v in client.get_definition(definition["id"])["versions"]] == ["v1"]

    order_flow.main()
    out = capsys.readouterr().out
    results = {
        line.split(":")[0]: line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("order ")
    }
    assert results["order A-1"].startswith("SUCCEEDED ") and ast.literal_eval(results["order A-1"][10:]) == {
        "approved_by": "rule",
        "reservations": ["R-pen", "R-ink"],
        "charged": 120,
    }
    assert results["order B-2"].startswith("SUCCEEDED ") and ast.literal_eval(results["order B-2"][10:]) == {
        "approved_by": "grace",
        "reservations": ["R-desk"],
        "charged": 5000,
    }
    assert "order DECLINED-3: FAILED" in out
    lines = out.splitlines()
    assert (
        lines[lines.index(next(x for x in lines if x.startswith("order A-1"))) + 1]
        == "  skipped: manual_approval"
    )
    assert (
        lines[lines.index(next(x for x in lines if x.startswith("order B-2"))) + 1]
        == "  skipped: auto_approve"
    )
    declined = next(w for w in client.list_workflows(limit=10).items if w.input["order_id"] == "DECLINED-3")
    steps = {s.key: s.state for s in client.get_workflow_steps(declined.id).steps}
    assert steps == {
        "check": "SUCCEEDED",
        "manual_approval": "SKIPPED",
        "auto_approve": "SUCCEEDED",
        "reserve": "SUCCEEDED",
        "hold": "SUCCEEDED",
        "cool_off": "SUCCEEDED",
        "charge": "FAILED",
    }
    release = [t for t in client.claim_tasks(["orders.release"])]  # the worker took it: none left
    assert release == []


def _cli(*args: str, env: dict[str, str]):
    return CliRunner().invoke(cli_main, list(args), env=env, prog_name="ledgerflow")


def test_publish_module_attribute_is_idempotent_and_its_errors_are_one_line(
    wf_server,  # noqa: F811
    token,
    tmp_path,
    monkeypatch,
) -> None:
    env = {"LEDGERFLOW_URL": wf_server, "LEDGERFLOW_TOKEN": token}
    first = _cli("definitions", "publish", "examples.order_flow:wf", env=env)
    assert first.exit_code == 0, first.output
    assert first.stdout.startswith("definition order_flow (") and "version v1 published" in first.stdout
    again = _cli("definitions", "publish", "examples.order_flow:wf", env=env)
    assert again.exit_code == 0 and "version v1 already published (the same document)" in again.stdout
    twin = _cli(
        "definitions", "publish", str(ROOT / "examples" / "order_flow.json"), "--name", "order_flow", env=env
    )
    assert twin.exit_code == 0 and "already published (the same document)" in twin.stdout

    (tmp_path / "broken_flow.py").write_text(
        "from ledgerflow.workflow import Workflow\n"
        "wf = Workflow('broken', version='v1', deadline_seconds=60)\n"
        "@wf.task('q')\n"
        "def reserve(task): ...\n"
        "@wf.task('q', input={'id': reserve.output['id']})\n"
        "def ship(task): ...\n"
    )
    monkeypatch.chdir(tmp_path)
    broken = _cli("definitions", "publish", "broken_flow:wf", env=env)
    assert broken.exit_code == 2
    assert broken.stderr.count("\n") == 1 and "step ship: input refers to reserve.output" in broken.stderr
    missing = _cli("definitions", "publish", "no_such_module:wf", env=env)
    assert missing.exit_code == 2 and missing.stderr.startswith("Error: cannot load no_such_module:wf")
    not_wf = _cli("definitions", "publish", "json:dumps", env=env)
    assert not_wf.exit_code == 2 and "is not a workflow" in not_wf.stderr
