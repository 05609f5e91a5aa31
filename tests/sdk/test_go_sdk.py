"""The Go SDK (sdk/go): its own checks (`go vet`, `go test`: the wire forms against recorded answers)
and the SDK scenario the Python SDK's tests run, as a Go program against the live server: publish a
definition, start a workflow, serve its tasks with the Go TaskWorker, pause and resume, send a signal,
read the steps, the operations and one operation, and replay the start (the first snapshot again).
Without Go the tests fail with one line saying so: they are never skipped."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from app.auth import ALL_SCOPES, create_credential
from app.db import transaction
from ledgerflow.client import Client
from tests.sdk.go_toolchain import SDK, go_env, gofmt_of, require_go, run_go
from tests.web.wf_live import make_namespace


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("go")


def test_go_vet_and_the_unit_tests_pass(scratch):
    go = require_go()
    unformatted = subprocess.run(
        [gofmt_of(go), "-l", "."], cwd=SDK, capture_output=True, text=True, timeout=120
    )
    assert unformatted.returncode == 0 and unformatted.stdout == "", unformatted.stdout + unformatted.stderr
    vet = run_go(go, scratch, "vet", "./...")
    assert vet.returncode == 0, vet.stdout + vet.stderr
    unit = run_go(go, scratch, "test", "-count=1", "./...")
    assert unit.returncode == 0, unit.stdout + unit.stderr
    assert "ok" in unit.stdout


def _run_example(
    go: str, scratch: Path, server: str, example: str
) -> tuple[str, subprocess.CompletedProcess]:
    """Build ``sdk/go/examples/<example>`` and run it against ``server`` with a new namespace's
    credential of every scope; returns the token and the finished process."""
    binary = scratch / example
    build = run_go(go, scratch, "build", "-o", str(binary), f"./examples/{example}")
    assert build.returncode == 0, build.stdout + build.stderr
    ns = make_namespace(server)
    with transaction() as conn:
        token = create_credential(conn, namespace=ns.name, name="go-sdk", scopes=sorted(ALL_SCOPES)).token
    env = {**go_env(scratch), "LEDGERFLOW_URL": server, "LEDGERFLOW_TOKEN": token}
    ran = subprocess.run([str(binary)], env=env, capture_output=True, text=True, timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    return token, ran


def test_the_readmes_first_workflow_in_go_runs(scratch, wf_server):
    _, ran = _run_example(require_go(), scratch, wf_server, "first_workflow")
    last = ran.stdout.strip().splitlines()[-1]
    assert last.startswith("SUCCEEDED: ")
    assert json.loads(last.removeprefix("SUCCEEDED: ")) == {
        "greeting": "Hello, Ada!",
        "note": "Hello, Ada! Your first workflow ran.",
    }
    assert "hello.greet: task" in ran.stderr and "completed in" in ran.stderr


def test_the_go_scenario_runs_against_the_server(scratch, wf_server):
    token, ran = _run_example(require_go(), scratch, wf_server, "scenario")
    seen = json.loads(ran.stdout)

    assert seen["versions"] == 1 and seen["first_state"] == "RUNNING" and not seen["first_deduplicated"]
    assert seen["output_absent_at_start"]
    # pause and resume on the control revision read; a stale revision is refused
    assert seen["paused"] and seen["paused_control_revision"] == "2"
    assert not seen["resumed_paused"] and seen["resumed_control_revision"] == "3"
    assert seen["stale_control_code"] == "STATE_CONFLICT"
    # the signal was consumed; resent with its key it answers the first acceptance
    assert seen["signal_state"] == "CONSUMED" and seen["signal_replay_dedup"] and seen["signal_replay_id"]
    # the Go worker ran both tasks; the workflow succeeded with the exact numbers
    assert sorted(seen["handled"]) == ["prep", "ship"]
    assert seen["final_state"] == "SUCCEEDED" and seen["completed"]
    assert seen["steps"] == {"prep": "SUCCEEDED", "receipt": "SUCCEEDED", "ship": "SUCCEEDED"}
    assert "9007199254740993" in json.dumps(seen["output"])
    # the operation audit, and one operation with its reason
    assert {"workflow.control.pause", "workflow.control.resume"} <= set(seen["actions"])
    assert seen["pause_reason"] == "maintenance window" and seen["pause_has_after"]
    # the replayed start answers the first snapshot, not the current state; another body is a conflict
    assert seen["replay_deduplicated"] and seen["replay_state"] == "RUNNING"
    assert seen["replay_revision"] == seen["first_revision"] and seen["replay_updated_at"]
    assert seen["conflict_code"] == "IDEMPOTENCY_CONFLICT"
    assert seen["listed"] == 1

    # what the Go program saw is what the Python SDK reads
    with Client(wf_server, token) as c:
        wf = c.get_workflow(seen["workflow_id"])
        assert wf.state == "SUCCEEDED" and str(wf.revision) == seen["final_revision"]
        assert wf.output["prep"] == {"prepared": True, "n": 9007199254740993}
        assert wf.output["ship"]["receipt"] == {"ok": True, "big": 18446744073709551617}
        assert str(c.get_workflow_steps(seen["workflow_id"]).revision) == seen["steps_revision"]
        assert (
            c.get_workflow_operation(
                seen["workflow_id"],
                next(
                    o.id
                    for o in c.list_workflow_operations(seen["workflow_id"])
                    if o.action == "workflow.control.pause"
                ),
            ).actor_id
            == seen["pause_actor"]
        )

        # the Go worker's failures, read back through the API: the type, the stack and the worker
        who = seen["identity"]
        assert (
            who["pid"] > 0 and who["sdk"].startswith("ledgerflow-go/") and who["host"] == socket.gethostname()
        )
        assert seen["failed_states"] == {"error": "FAILED", "panic": "FAILED"}
        attempts = {
            mode: c.request("GET", f"/v1/workflows/{wid}/steps/charge/rounds")["data"]["items"]
            for mode, wid in seen["failing"].items()
        }
        [declined], [panicked] = attempts["error"], attempts["panic"]
        assert declined["worker"] == who and panicked["worker"] == who  # the claims named the worker
        failure = declined["failure"]
        assert failure["type"] == "payments.CardDeclined"
        assert failure["message"] == "charging: card declined (51)" and failure["worker"] == who
        assert "goroutine " in failure["stack"] and "(*run).call" in failure["stack"]
        failure = panicked["failure"]
        assert failure["type"] == "panic(runtime.boundsError)" and failure["worker"] == who
        assert failure["message"].startswith("panic: runtime error: index out of range")
        assert "main.chargeCard(" in failure["stack"] and len(failure["stack"]) <= 16 * 1024
