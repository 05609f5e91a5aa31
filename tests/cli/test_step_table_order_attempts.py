"""`workflows show` / `watch` (issue 45): the steps in the definition's graph order (not alphabetical), the
attempts a TASK step took (2 for a step that failed once), and the last failed attempt's error — in the
server's command (from the database and through the API) and in the SDK's (through the API)."""

from __future__ import annotations

import re

from click.testing import CliRunner

from app.auth import Scope
from ledgerflow import light_cli, step_table
from ledgerflow.cli import main
from ledgerflow.client import Client, Task, TaskWorker
from tests.web.wf_live import author_token, wf_server  # noqa: F401
from tests.web.wf_ops import ENGINE_WORKER_ENV

DOC = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 600,
    "steps": [  # alphabetically "charge" < "prepare"; in the graph "prepare" comes first
        {
            "key": "prepare",
            "kind": "TASK",
            "queue": "t45.prepare",
            "retry": {"max_attempts": 3, "backoff_seconds": 0},
        },
        {"key": "charge", "kind": "TASK", "queue": "t45.charge", "after": ["prepare"]},
    ],
}


def _rows_in(text: str) -> list[str]:
    return [k for line in text.splitlines() for k in ("prepare", "charge") if f" {k} " in f" {line} "]


def test_steps_in_graph_order_with_attempts_and_the_failed_attempts_error(wf_server, spawn_worker, capsys):  # noqa: F811
    spawn_worker("advance", env=ENGINE_WORKER_ENV)
    token = author_token("st", Scope.TASKS_WORK)
    client = Client(wf_server, token)
    d = client.ensure_definition("t45", DOC)
    failures = []
    worker = TaskWorker(client, wait_seconds=1)

    @worker.task("t45.prepare")
    def prepare(task: Task) -> dict:
        if not failures:
            failures.append(task.id)
            raise RuntimeError("the ledger was locked")
        return {"prepared": True}

    @worker.task("t45.charge")
    def charge(task: Task) -> dict:
        return {"charged": 42}

    wid = client.start_workflow(d["id"], "v1", {}).instance.id
    with worker.in_background():
        assert client.wait_for_workflow(wid, timeout=60).state == "SUCCEEDED"

    env = {"LEDGERFLOW_URL": wf_server, "LEDGERFLOW_TOKEN": token, "COLUMNS": "250"}  # no wrapped cells
    watched = CliRunner().invoke(main, ["workflows", "watch", wid, "--timeout", "30"], env=env)
    shown = CliRunner().invoke(main, ["workflows", "show", wid], env=env)
    assert "prepare=SUCCEEDED, charge=SUCCEEDED" in watched.stdout  # a watch's lines: graph order too
    for result in (watched, shown):
        assert result.exit_code == 0, result.output
        table = result.stdout[result.stdout.index("attempts") :]
        assert _rows_in(table) == ["prepare", "charge"]
        prepare_row = next(line for line in table.splitlines() if " prepare " in line)
        assert re.search(r"│ SUCCEEDED │ 2 +│", prepare_row), prepare_row  # the attempts column: 2
        assert "the ledger was locked" in table and "attempt 1 failed" in table

    # the SDK's command, through the API: the same rows as plain text
    light_cli.main(["workflows", "show", wid, "--url", wf_server, "--token", token])
    out = capsys.readouterr().out
    table = out[out.index("attempts") :]
    assert _rows_in(table) == ["prepare", "charge"]
    [prepare_row] = [
        r for r in step_table.rows(light_cli.step_views(client, wid, {})[1]) if r[0] == "prepare"
    ]
    assert (
        prepare_row[3] == "2"
        and "attempt 1 failed" in prepare_row[5]
        and "the ledger was locked" in prepare_row[5]
    )
