"""Expected errors of the CLI and the SDK end in exactly one line and a non-zero exit, never a
traceback; `ledgerflow` finds (and starts) the embedded services without any prefix."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from ledgerflow.cli import JOB_TYPES, main
from tests.web.wf_live import wf_ns, wf_server  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
TYPES = ", ".join(JOB_TYPES)


def cli(*args: str):
    return CliRunner().invoke(main, list(args))


def one_line(result, code: int, line: str) -> None:
    assert result.exit_code == code, result.output
    assert result.stderr == line + "\n", result.stderr
    assert "Traceback" not in result.output


def test_version():
    r = cli("--version")
    assert r.exit_code == 0 and r.stdout == "ledgerflow, version 0.1.0\n"


def test_enqueue_lists_types_and_refuses_others(db):
    help_text = cli("enqueue", "--help").stdout
    assert all(t in help_text for t in JOB_TYPES) and "task workers" in help_text
    one_line(cli("enqueue", "send_email"), 2, f"Error: unknown job type 'send_email'; valid types: {TYPES}")
    one_line(
        cli("enqueue", "automation_action", "--payload", "[1]"),
        2,
        """Error: --payload must be a JSON object, not list; e.g. '{"name": "x"}'""",
    )
    one_line(
        cli("enqueue", "automation_action", "--payload", "{nope"),
        2,
        "Error: --payload is not JSON (Expecting property name enclosed in double quotes: line 1 column 2 "
        """(char 1)); give a JSON object, e.g. '{"name": "x"}'""",
    )
    ok = cli("enqueue", "automation_action", "--payload", '{"name": "x"}')
    assert ok.exit_code == 0 and '"created": true' in ok.stdout
    assert ok.stderr == ""  # every type has a built-in handler: no note (it used to claim otherwise)


def test_credentials_errors(clean_credentials):
    one_line(
        cli("credentials", "create", "--namespace", "n", "--name", "a"),
        2,
        "Error: a credential needs at least one explicit permission switch",
    )
    token = cli("credentials", "create", "--namespace", "n", "--name", "a", "--task-worker", "--token-only")
    assert token.exit_code == 0 and token.stdout.startswith("lf_") and token.stdout.count("\n") == 1
    one_line(
        cli("credentials", "create", "--namespace", "n", "--name", "a", "--task-worker"),
        1,
        "Error: a live credential named 'a' already exists in namespace 'n'; revoke it first "
        "(or add --replace to revoke it and issue a new token)",
    )
    one_line(cli("credentials", "revoke", "f" * 32), 1, f"Error: no credential {'f' * 32}")


@pytest.fixture
def clean_credentials(engine):
    from sqlalchemy import text

    with engine.begin() as conn:
        conn.execute(text("TRUNCATE operation_audit, idempotency_receipts, credentials, namespaces CASCADE"))
    yield


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    for k in [k for k, v in env.items() if v is None]:
        full.pop(k, None)
    for k in ("LEDGERFLOW_URL", "LEDGERFLOW_TOKEN"):
        if k not in env:
            full.pop(k, None)
    return subprocess.run(args, cwd=ROOT, env=full, capture_output=True, text=True, timeout=60)


def lf(*args: str, **env: str) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "ledgerflow.cli", *args], **env)


def test_unreachable_database_is_one_line():
    port = _closed_port()
    r = lf("credentials", "list", DATABASE_URL=f"postgresql://postgres:secret@127.0.0.1:{port}/x")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (
        f"Error: cannot reach PostgreSQL at postgresql://postgres:***@127.0.0.1:{port}/x (DATABASE_URL): "
        f'connection failed: connection to server at "127.0.0.1", port {port} failed: Connection refused\n'
    )


def test_no_services_found_or_startable_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = lf("drain", DATABASE_URL=None, REDIS_URL=None, LEDGERFLOW_DATA_DIR=str(blocker / "data"))
    assert r.returncode == 1
    assert r.stderr == (
        f"Error: DATABASE_URL is not set and the data folder {blocker / 'data'} cannot be created (Not a "
        "directory); set LEDGERFLOW_DATA_DIR to a writable folder or export DATABASE_URL\n"
    )


def test_commands_find_and_start_the_embedded_services_without_a_prefix(tmp_path):
    data = tmp_path / "data"
    env = {"DATABASE_URL": None, "REDIS_URL": None, "LEDGERFLOW_DATA_DIR": str(data)}
    try:
        first = lf("credentials", "list", **env)  # starts both services; the database is still empty
        assert first.returncode == 1 and "Traceback" not in first.stderr
        assert first.stderr.splitlines()[-1] == (
            f"Error: the database at postgresql://postgres:***@/ledgerflow?host={data / 'pg'} has no "
            "Ledgerflow tables yet: run `ledgerflow db upgrade` (`make run` does it)"
        )
        assert lf("db", "upgrade", **env).returncode == 0
        made = lf(
            "credentials", "create", "--namespace", "x", "--name", "y", "--task-worker", "--token-only", **env
        )
        assert made.returncode == 0 and made.stderr == ""  # found running: nothing started, no warning
        listed = lf("credentials", "list", **env)
        assert listed.returncode == 0 and "x/y" in listed.stdout and listed.stderr == ""
        shown = lf("env", "--", "sh", "-c", 'echo "$DATABASE_URL $REDIS_URL"', **env)
        assert (
            shown.stdout
            == f"postgresql://postgres:@/ledgerflow?host={data / 'pg'} unix://{data}/redis/redis.sock\n"
        )
        assert shown.stderr == ""
    finally:
        lf("services-stop", **env)


# --------------------------------------------------------------------------- SDK
EXAMPLE = [sys.executable, "examples/first_workflow.py"]


def test_sdk_unreachable_server_names_the_url():
    port = _closed_port()
    r = run(EXAMPLE, LEDGERFLOW_URL=f"http://127.0.0.1:{port}", LEDGERFLOW_TOKEN="lf_x")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr == (
        f"error: cannot reach the Ledgerflow server at http://127.0.0.1:{port} (connection refused); is it "
        "running (`make run`)? The SDK reads the address from LEDGERFLOW_URL (default http://127.0.0.1:5000)\n"
    )


def test_sdk_settings_errors():
    r = run(EXAMPLE, LEDGERFLOW_URL="http://127.0.0.1:9")
    assert r.returncode == 1 and r.stderr == (
        "error: LEDGERFLOW_TOKEN is not set: issue a credential with `ledgerflow credentials create "
        "--namespace NS --name NAME <switches> --token-only` and export LEDGERFLOW_TOKEN=<token>\n"
    )
    r = run(EXAMPLE, LEDGERFLOW_URL="localhost:5000", LEDGERFLOW_TOKEN="lf_x")
    assert r.returncode == 1 and r.stderr == (
        "error: LEDGERFLOW_URL must be an http:// or https:// address like http://127.0.0.1:5000, "
        "not 'localhost:5000'\n"
    )


def test_sdk_wrong_token_and_missing_permission(wf_ns):  # noqa: F811
    r = run(EXAMPLE, LEDGERFLOW_URL=wf_ns.url, LEDGERFLOW_TOKEN="lf_unknown")
    assert r.returncode == 1 and r.stderr == (
        "error: 401 UNAUTHENTICATED: the bearer token is unknown or revoked (check LEDGERFLOW_TOKEN)\n"
    )
    r = run(EXAMPLE, LEDGERFLOW_URL=wf_ns.url, LEDGERFLOW_TOKEN=wf_ns.tokens["worker"])
    assert r.returncode == 1 and r.stderr == (
        "error: 403 PERMISSION_DENIED: this credential lacks the permission definitions:read (granted by "
        "--workflow-access): issue a credential with `ledgerflow credentials create` and that switch\n"
    )


def test_task_worker_logs_the_url_it_cannot_reach_and_keeps_trying(caplog):
    from ledgerflow.client import Client, TaskWorker

    port = _closed_port()
    worker = TaskWorker(Client(f"http://127.0.0.1:{port}", "lf_x", retries=0), wait_seconds=0)
    worker.register("q", lambda task: {})
    with caplog.at_level(logging.INFO, logger="ledgerflow.worker"):
        t = threading.Thread(target=worker.run, daemon=True)
        t.start()
        t.join(1.5)
        worker.stop()
        t.join(3)
    assert not t.is_alive()
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == f"task worker ready: queues q at http://127.0.0.1:{port}"
    assert lines[1] == (
        f"cannot reach the Ledgerflow server at http://127.0.0.1:{port} (connection refused); is it running "
        "(`make run`)? The SDK reads the address from LEDGERFLOW_URL (default http://127.0.0.1:5000); "
        "retrying in 1 s"
    )


def test_client_and_worker_import_without_a_cycle():
    worker_src = (ROOT / "ledgerflow" / "worker.py").read_text()
    assert "from ledgerflow.client" not in worker_src and "import ledgerflow.client" not in worker_src
    for first in ("ledgerflow.worker", "ledgerflow.client"):
        r = run([sys.executable, "-c", f"import {first}; from ledgerflow.client import TaskWorker, Client"])
        assert r.returncode == 0, r.stderr


def test_redeliver_with_an_empty_delivery_id_is_one_line(clean_credentials):
    """``subscriptions redeliver --delivery ""`` is a delivery id like any other (here: not found). It
    used to fall through to the ``--since`` branch with no time and end in an AttributeError."""
    from app.auth import ALL_SCOPES, create_credential
    from app.db import transaction

    with transaction() as conn:
        token = create_credential(conn, namespace="n", name="op", scopes=sorted(ALL_SCOPES)).token
    r = cli("subscriptions", "redeliver", "a" * 32, "--delivery", "", "--yes", "--token", token)
    one_line(r, 1, "Error: subscription not found")


def test_subscription_enable_and_disable_take_a_reason_for_the_audit(clean_credentials):
    """``subscriptions disable|enable --reason`` writes the reason to the audit row, as the API and the
    console do (the CLI had no way to give one)."""
    from sqlalchemy import text

    from app.auth import ALL_SCOPES, create_credential
    from app.db import transaction
    from app.ids import new_id

    sid = new_id()
    with transaction() as conn:
        cred = create_credential(conn, namespace="n-reason", name="op", scopes=sorted(ALL_SCOPES))
        conn.execute(
            text(
                "INSERT INTO event_subscriptions (id, namespace_id, url, event_types, secret) "
                "VALUES (:id, :ns, 'https://example.com/h', '{*}', 'c2VjcmV0')"
            ),
            {"id": sid, "ns": cred.namespace_id},
        )
    for verb in ("disable", "enable"):
        r = cli(
            "subscriptions", verb, sid, "--reason", f"{verb} for maintenance", "--yes", "--token", cred.token
        )
        assert r.exit_code == 0, r.output
    with transaction() as conn:
        reasons = conn.execute(
            text("SELECT action, reason FROM operation_audit WHERE target_id = :s ORDER BY created_at, id"),
            {"s": sid},
        ).all()
    assert [tuple(x) for x in reasons] == [
        ("event_subscription.disable", "disable for maintenance"),
        ("event_subscription.enable", "enable for maintenance"),
    ]
