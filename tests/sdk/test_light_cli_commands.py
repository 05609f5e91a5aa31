"""The SDK's `ledgerflow` command (ledgerflow.light_cli), in this process against the live test server:
every top-level command of the server's `ledgerflow` is either in it (through the API) or named as
server-only; its credential switches are the server's; tasks, schedules and subscriptions go through
the API and print JSON."""

from __future__ import annotations

import json

import pytest

from app.auth import SWITCHES, Scope
from ledgerflow import light_cli
from ledgerflow.cli import main as server_main
from tests.web.wf_live import author_token

DOC = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 600,
    "steps": [{"key": "review", "kind": "TASK", "queue": "lc45.review"}],
    "output": {"ok": "$.steps.review.output.ok"},
}


def test_every_server_command_is_in_the_sdk_command_or_said_to_be_server_only():
    parser = light_cli.build_parser()
    [groups] = [a for a in parser._actions if a.dest == "group"]
    assert set(server_main.commands) <= set(groups.choices)
    assert set(light_cli.SERVER_ONLY) == set(server_main.commands) - {
        "credentials", "definitions", "workflows", "schedules", "subscriptions",
    }  # fmt: skip
    assert light_cli.SWITCHES == tuple(SWITCHES)


def _run(capsys, *args: str) -> str:
    light_cli.main(list(args))
    return capsys.readouterr().out


def test_tasks_schedules_and_subscriptions_through_the_api(wf_server, capsys, tmp_path):
    token = author_token("lc", Scope.TASKS_WORK, Scope.INTEGRATIONS_MANAGE)
    api = ["--url", wf_server, "--token", token]
    (tmp_path / "review.json").write_text(json.dumps(DOC))
    _run(capsys, "definitions", "publish", str(tmp_path / "review.json"), *api)
    wid = _run(capsys, "workflows", "start", "review", *api).split()[2]

    # a person does the task by hand: claim, then complete with the epoch of the claim
    [task] = json.loads(_run(capsys, "tasks", "claim", "--queue", "lc45.review", *api))
    assert task["workflow_id"] == wid
    shown = json.loads(_run(capsys, "tasks", "show", task["id"], *api))
    assert shown["state"] == "CLAIMED"
    _run(
        capsys,
        "tasks",
        "complete",
        task["id"],
        "--epoch",
        str(task["epoch"]),
        "--output",
        '{"ok": true}',
        *api,
    )
    assert (
        json.loads(_run(capsys, "workflows", "show", wid, "--json", *api))["instance"]["state"] == "SUCCEEDED"
    )

    created = json.loads(
        _run(capsys, "schedules", "create", "--name", "nightly", "--definition", "review", "--cron", "0 3 * * *",
             "--paused", *api)
    )  # fmt: skip
    sid = created["id"]
    assert created["version"] == "v1" and created["paused"] is True
    assert [s["id"] for s in json.loads(_run(capsys, "schedules", "list", *api))["items"]] == [sid]
    assert json.loads(_run(capsys, "schedules", "resume", sid, *api))["schedule"]["paused"] is False
    _run(capsys, "schedules", "delete", sid, "--yes", *api)
    assert json.loads(_run(capsys, "schedules", "list", *api))["items"] == []
    assert json.loads(_run(capsys, "subscriptions", "list", *api))["items"] == []

    with pytest.raises(SystemExit) as exc:  # a bad id: the API's 404, one line, exit 1
        light_cli.main(["schedules", "show", "0" * 32, *api])
    err = capsys.readouterr().err
    assert exc.value.code == 1 and err.startswith("Error: ") and err.count("\n") == 1
