"""The SDK's `ledgerflow` command from a venv with only the light SDK (issue 45): with an operator's
token, issue a credential through the API, then publish, start with --watch, pause, resume, signal and
cancel, each as docs/sdk.md says; the commands that need the server's database say so; a credential
without credentials:manage is refused, a revoked one answers 401 — all through HTTP, no server module
installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from app.auth import Scope, create_credential
from app.db import transaction
from tests.web.wf_ops import ENGINE_WORKER_ENV

ROOT = Path(__file__).resolve().parents[2]
APPROVAL = ROOT / "docs" / "examples" / "approval_definition.json"


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """No PYTHONPATH (the repository must not be importable), pip's cache inside tmp."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "LEDGERFLOW_TOKEN")}
    return {**env, "PIP_CACHE_DIR": str(tmp / "pip-cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


@pytest.fixture(scope="module")
def sdk_venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("light-cli")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(ROOT / "sdk")],
        env=_env(tmp),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return venv


def test_the_sdk_command_runs_the_documented_session_through_the_api(
    sdk_venv,
    wf_server,
    spawn_worker,
    tmp_path,
):
    spawn_worker("advance", env=ENGINE_WORKER_ENV)
    with transaction() as conn:  # the namespace operator's token, issued on the server
        operator = create_credential(
            conn,
            namespace="lc-" + uuid.uuid4().hex[:8],
            name="operator",
            scopes=[
                Scope.CREDENTIALS_MANAGE,
                Scope.DEFINITIONS_READ,
                Scope.DEFINITIONS_PUBLISH,
                Scope.WORKFLOWS_READ,
                Scope.WORKFLOWS_START,
                Scope.TASKS_SUBMIT,
                Scope.WORKFLOWS_CONTROL,
                Scope.WORKFLOWS_SIGNAL,
            ],
        ).token
    ledgerflow = str(sdk_venv / "bin" / "ledgerflow")

    def run(*args: str, token: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        r = subprocess.run(
            [ledgerflow, *args],
            env=_env(tmp_path, LEDGERFLOW_URL=wf_server, LEDGERFLOW_TOKEN=token),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert r.returncode == 0, (args, r.stdout, r.stderr)
        return r

    # a team member's credential, issued through the API with the operator's token
    token = run(
        "credentials", "create", "--name", "ada",
        "--workflow-access", "--workflow-run-access", "--workflow-control-access", "--workflow-signal-access",
        "--token-only",
        token=operator,
    ).stdout.strip()  # fmt: skip
    assert token.startswith("lf_")
    refused = run("credentials", "create", "--name", "eve", "--workflow-access", token=token, check=False)
    assert refused.returncode == 1 and "credentials:manage" in refused.stderr
    assert refused.stderr.startswith("Error: ") and refused.stderr.count("\n") == 1

    published = run("definitions", "publish", str(APPROVAL), "--name", "approval", token=token)
    assert "version v1 published" in published.stdout
    assert 'workflows start approval --input \'{"order": "..."}\'' in published.stdout

    watcher = subprocess.Popen(
        [ledgerflow, "workflows", "start", "approval", "--input", '{"order": "A-1"}', "--watch"],
        env=_env(tmp_path, LEDGERFLOW_URL=wf_server, LEDGERFLOW_TOKEN=token),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first = watcher.stdout.readline()
        assert first.startswith("started workflow ") and "(approval v1)" in first, first
        wid = first.split()[2]
        paused = run("workflows", "pause", wid, "--reason", "checking", "--yes", token=token)
        assert paused.stdout.startswith(f"workflow {wid}: WAITING (paused)")
        resumed = run("workflows", "resume", wid, "--reason", "checked", "--yes", token=token)
        assert "(paused)" not in resumed.stdout and resumed.stdout.startswith(f"workflow {wid}: WAITING")
        shown = run("workflows", "show", wid, token=token)
        assert "approval  SIGNAL  WAITING" in shown.stdout and "signal approved (v1)" in shown.stdout
        signalled = run(
            "workflows", "signal", wid, "--name", "approved", "--payload-version", "v1", "--step", "approval",
            "--activation", "1", "--correlation-key", "A-1", "--payload", '{"by": "ada"}',
            "--reason", "looks right", "--yes",
            token=token,
        )  # fmt: skip
        assert signalled.stdout.startswith("signal ")
        out, err = watcher.communicate(timeout=120)
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait(10)
    assert watcher.returncode == 0, out + err
    assert out.splitlines()[-1] == 'SUCCEEDED: output {"approved_by": "ada"}'

    started = run("workflows", "start", "approval", "--input", '{"order": "A-2"}', token=token)
    other = started.stdout.split()[2]
    cancelled = run("workflows", "cancel", other, "--reason", "not needed", "--yes", token=token)
    assert cancelled.stdout.startswith(f"workflow {other}: CANCEL")
    listed = json.loads(run("workflows", "list", "--json", token=token).stdout)
    assert {i["id"] for i in listed["items"]} == {wid, other}

    # the operator lists and revokes; the revoked token answers 401, in one line
    creds = json.loads(run("credentials", "list", "--json", token=operator).stdout)["items"]
    [ada] = [c for c in creds if c["name"] == "ada"]
    run("credentials", "revoke", ada["id"], token=operator)
    gone = run("definitions", "list", token=token, check=False)
    assert gone.returncode == 1 and gone.stderr.startswith("Error: ") and "revoked" in gone.stderr

    # what needs the server's database is not in the SDK, and says so
    db = run("db", "upgrade", token=operator, check=False)
    assert db.returncode == 2 and "server's distribution" in db.stderr
