"""The operator CLI through click's runner against the real database: the API's permission rules
(token, scopes), the same domain functions and audit rows, tables and --json, the confirmation
prompt, chunked batch retry / replay with a progress bar, the workflow commands, and doctor."""

from __future__ import annotations

import json
import re
import uuid

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from app.auth import create_credential
from app.db import transaction
from ledgerflow.doctor import doctor
from ledgerflow.ops_cli import jobs, workflows
from tests.ledger_helpers import credential_change_heard
from tests.observability.conftest import scalar

MONITOR, OPERATE = "workflow:instance:monitor", "workflow:engine:operate"


@pytest.fixture
def issue(fresh):
    def _issue(*scopes: str, namespace: str = "ops", name: str | None = None) -> tuple[str, str]:
        with transaction(fresh) as conn:
            c = create_credential(
                conn,
                namespace=namespace,
                name=name or "op-" + uuid.uuid4().hex[:6],
                scopes=scopes,
                platform=bool({MONITOR, OPERATE} & set(scopes)),  # the crafted jobs belong to no instance
            )
        return c.token, c.credential_id

    return _issue


def run(group, args: list[str], token: str | None = None, input: str | None = None):
    env = {"LEDGERFLOW_TOKEN": token} if token else {}
    return CliRunner().invoke(group, args, env=env, input=input, catch_exceptions=False)


def audit(engine) -> list[dict]:
    with engine.connect() as conn:
        return [
            dict(r._mapping)
            for r in conn.execute(text("SELECT * FROM workflow_operations ORDER BY created_at, id"))
        ]


def test_reads_as_tables_and_json(fresh, issue, make_job):
    token, _ = issue(MONITOR)
    dead = make_job("dead", last_error="connect to 10.0.0.7:5432 refused", attempts=5)
    make_job("dead", last_error="connect to 10.0.0.9:5432 refused", attempts=5)
    make_job("succeeded")
    r = run(jobs, ["list", "--json", "--status", "dead"], token)
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [j["status"] for j in data["items"]] == ["dead", "dead"] and data["next_cursor"] is None
    r = run(jobs, ["list"], token)
    assert r.exit_code == 0 and "3 job(s)" in r.stdout and "delay_wake" in r.stdout
    r = run(jobs, ["show", str(dead), "--json"], token)
    assert json.loads(r.stdout)["id"] == str(dead)
    assert f"job {dead}" in run(jobs, ["show", str(dead)], token).stdout
    r = run(jobs, ["clusters", "--json"], token)
    [cluster] = json.loads(r.stdout)["clusters"]
    assert cluster["count"] == 2 and cluster["type"] == "delay_wake"
    assert "2 cluster" not in run(jobs, ["clusters"], token).stdout  # one cluster
    r = run(jobs, ["status", "--json"], token)
    assert json.loads(r.stdout)["summary"]["by_status"] == {"dead": 2, "succeeded": 1}
    assert "runtime status" in run(jobs, ["status"], token).stdout
    r = run(jobs, ["list", "--status", "nope"], token)
    assert r.exit_code == 2 and "unknown value" in r.output


def test_the_api_permission_rules(fresh, issue, make_job):
    job = make_job("dead")
    # one format: `Error: ...` on one line; 2 for a command line that lacks the token, 1 for refusals
    r = run(jobs, ["list"])
    assert (
        r.exit_code == 2
        and r.stderr.startswith("Error: an operator credential is required")
        and "--token" in r.stderr
    )
    r = run(jobs, ["list", "--json"], "lf_not-a-token")
    assert r.exit_code == 1 and json.loads(r.stdout)["error"]["code"] == "UNAUTHENTICATED"
    monitor, _ = issue(MONITOR)
    r = run(jobs, ["retry", str(job), "--yes"], monitor)
    assert r.exit_code == 1 and r.stderr.count("\n") == 1 and r.stderr.startswith("Error: ")
    assert "workflow:engine:operate (granted by --engine-operate)" in r.stderr  # names the switch, as the API
    operate_only, cred = issue(OPERATE)
    assert run(jobs, ["list"], operate_only).exit_code == 1  # reads need the monitor scope, as the API
    with credential_change_heard(), transaction(fresh) as conn:
        conn.execute(text("UPDATE credentials SET revoked_at = now() WHERE id = :i"), {"i": cred})
    assert "revoked" in run(jobs, ["retry", str(job), "--yes"], operate_only).stderr
    assert scalar(fresh, "SELECT status FROM workflow_jobs WHERE id = :i", i=job) == "dead"
    assert audit(fresh) == []


def test_retry_and_skip_one_job_ask_first_and_are_audited(fresh, issue, make_job):
    token, cred = issue(OPERATE, name="alice")
    job = make_job("dead", attempts=5)
    r = run(jobs, ["retry", str(job), "--reason", "receiver fixed"], token, input="n\n")
    assert r.exit_code == 1 and "Aborted" in r.output
    assert scalar(fresh, "SELECT status FROM workflow_jobs WHERE id = :i", i=job) == "dead"
    r = run(jobs, ["retry", str(job), "--reason", "receiver fixed"], token, input="y\n")
    assert r.exit_code == 0, r.output
    assert f"job {job}: pending (generation 2)" in r.stdout
    [row] = audit(fresh)
    assert (row["action"], row["actor_id"], row["actor_name"], row["reason"]) == (
        "job.retry",
        cred,
        "alice",
        "receiver fixed",
    )
    assert row["request_id"].startswith("cli_")
    r = run(jobs, ["retry", str(job), "--yes", "--json"], token)  # pending under retry: refused
    assert r.exit_code == 1 and json.loads(r.stdout)["error"]["code"] == "STATE_CONFLICT"
    r = run(jobs, ["skip", str(job), "--yes", "--reason", "not needed", "--json"], token)
    assert r.exit_code == 0 and json.loads(r.stdout)["job"]["status"] == "canceled"
    assert [a["action"] for a in audit(fresh)] == ["job.retry", "job.skip"]


def test_batch_retry_runs_in_chunks_with_a_progress_bar_and_one_stagger(fresh, issue, make_job):
    token, _ = issue(OPERATE)
    ids = [make_job("failed") for _ in range(5)]
    done = make_job("succeeded")
    r = run(
        jobs,
        ["retry", *map(str, ids), str(done), "999999", "--rate", "10", "--chunk", "2", "--yes", "--json"],
        token,
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (out["submitted"], out["skipped_for_state"], out["not_found"]) == (5, 1, 1)
    assert "batch retry" in r.stderr and "7/7" in r.stderr  # the progress bar
    with fresh.connect() as conn:
        offsets = (
            conn.execute(
                text(
                    "SELECT extract(epoch FROM run_at - min(run_at) OVER ()) FROM workflow_jobs "
                    "WHERE id = ANY(:ids) ORDER BY run_at"
                ),
                {"ids": ids},
            )
            .scalars()
            .all()
        )
    # 0.1 s apart within a chunk (chunks of 2); each chunk's stagger continues from the previous chunk's
    # (item i no earlier than i x 0.1 s) and starts from its own transaction's now(), so the time between
    # two chunks' transactions (a busy machine) only adds to the later ones
    got = [float(o) for o in offsets]
    assert [round(got[1] - got[0], 1), round(got[3] - got[2], 1)] == [0.1, 0.1]
    assert all(o >= i * 0.1 - 0.001 for i, o in enumerate(got)), got  # continues across chunks
    rows = audit(fresh)
    assert sorted({a["action"] for a in rows}) == ["job.batch_retry", "jobs.batch_retry"]
    assert len([a for a in rows if a["action"] == "jobs.batch_retry"]) == 4  # one per chunk
    assert len({a["operation_id"] for a in rows}) == 1
    r = run(jobs, ["skip", str(ids[0]), str(ids[1]), "--yes"], token)
    assert r.exit_code == 0 and "skip: 2 submitted" in r.stdout


def test_replay_previews_confirms_and_replays_in_chunks(fresh, issue, make_job):
    token, _ = issue(OPERATE)
    for i in range(5):
        make_job("dead", last_error=f"timeout after {i} s")
    make_job("dead", type="task_timeout", last_error="other")
    r = run(jobs, ["replay", "--type", "delay_wake", "--dry-run", "--json"], token)
    assert json.loads(r.stdout)["would_replay"] == 5
    r = run(jobs, ["replay", "--type", "delay_wake", "--limit", "4", "--chunk", "3"], token, input="n\n")
    assert r.exit_code == 1 and "5 job(s) match; 4 would be replayed" in r.stdout
    r = run(
        jobs, ["replay", "--type", "delay_wake", "--limit", "4", "--chunk", "3", "--yes", "--json"], token
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (out["success"], out["matched"], out["remaining"]) == (4, 5, 1)
    assert "replay" in r.stderr and "4/4" in r.stderr
    assert scalar(fresh, "SELECT count(*) FROM workflow_jobs WHERE status = 'pending'") == 4
    assert [a["action"] for a in audit(fresh)].count("jobs.replay") == 2


def test_workflow_commands(fresh, issue):
    from tests.engine.helpers import SIGNAL_DOC, publish, start

    token, cred = issue("workflows:read", "workflows:control", "workflows:signal", namespace="shop")
    reader, _ = issue("workflows:read", namespace="shop")
    stranger, _ = issue("workflows:read", "workflows:control", namespace="elsewhere")
    ns = scalar(fresh, "SELECT id FROM namespaces WHERE name = 'shop'")
    wid = start(fresh, ns, publish(fresh, ns, SIGNAL_DOC), {"order": "A-1"})["id"]
    r = run(workflows, ["list", "--json"], token)
    assert [i["id"] for i in json.loads(r.stdout)["items"]] == [wid]
    assert wid in run(workflows, ["list"], token).stdout
    assert json.loads(run(workflows, ["show", wid, "--json"], token).stdout)["instance"]["id"] == wid
    assert "receipt" in run(workflows, ["show", wid], token).stdout
    r = run(workflows, ["show", wid, "--json"], stranger)  # another namespace: not found, as the API
    assert r.exit_code == 1 and json.loads(r.stdout)["error"]["code"] == "NOT_FOUND"
    assert run(workflows, ["pause", wid, "--reason", "x", "--yes"], reader).exit_code == 1
    r = run(workflows, ["pause", wid, "--reason", "maintenance", "--yes", "--json"], token)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["instance"]["paused"] is True
    r = run(
        workflows, ["resume", wid, "--reason", "done", "--expected-control-revision", "1", "--yes"], token
    )
    assert r.exit_code == 1 and r.stderr.startswith(
        "Error: expected_control_revision 1 is stale"
    )  # as the API
    r = run(workflows, ["resume", wid, "--reason", "done", "--yes"], token)
    assert r.exit_code == 0 and "control revision 3" in r.stdout
    r = run(
        workflows,
        [
            "signal",
            wid,
            "--name",
            "done",
            "--payload-version",
            "v1",
            "--step",
            "receipt",
            "--activation",
            "1",
            "--correlation-key",
            "A-1",
            "--payload",
            '{"ok": true}',
            "--reason",
            "verified",
            "--yes",
            "--json",
        ],
        token,
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["signal"]["state"] == "CONSUMED"
    r = run(workflows, ["cancel", wid, "--reason", "too late", "--yes"], token)
    assert r.exit_code == 1 and r.stderr == "Error: the workflow is SUCCEEDED\n"  # it already succeeded
    actions = [a["action"] for a in audit(fresh) if a["actor_id"] == cred]
    assert actions == ["workflow.control.pause", "workflow.control.resume", "signal.accepted"]


def test_doctor_reports_what_to_fix(fresh):
    r = CliRunner().invoke(doctor, ["--json"])
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["database"]["status"] == "ok" and checks["migrations"]["status"] == "ok"
    assert checks["indexes"]["status"] == "ok"
    assert (
        checks["workers advance"]["status"] == "fail"
        and "ledgerflow worker --pool advance" in checks["workers advance"]["fix"]
    )
    assert r.exit_code == 1
    with fresh.begin() as conn:
        for node, pools, age, skew in (
            ("a" * 32, "{workflow-ledger}", 1, 0),
            ("b" * 32, "{workflow-ledger-outbound}", 1, 8),
            ("c" * 32, "{workflow-ledger}", 600, 0),
        ):
            conn.execute(
                text(
                    "INSERT INTO workflow_worker_nodes (node_id, hostname, pid, roles, pools, slot_capacity, heartbeat_at, "
                    "node_clock_at) VALUES (:n, 'h', 1, '{worker}', CAST(:p AS text[]), 4, now() - make_interval(secs => :a), "
                    "now() - make_interval(secs => :a) + make_interval(secs => :s))"
                ),
                {"n": node, "p": pools, "a": age, "s": skew},
            )
    r = CliRunner().invoke(doctor, ["--json"])
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert checks["workers advance"]["status"] == "ok" and checks["workers outbound"]["status"] == "ok"
    assert checks["stale heartbeats"]["status"] == "warn"
    assert (
        checks["clock (worker nodes)"]["status"] == "fail"
        and "+8.000 s" in checks["clock (worker nodes)"]["detail"]
    )
    r = CliRunner().invoke(doctor, [])
    assert "what to do" in r.stdout and "NTP" in r.stdout


def test_doctor_finds_an_invalid_index(fresh):
    with fresh.begin() as conn:
        if not conn.execute(text("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")).scalar():
            pytest.skip("marking an index invalid needs a superuser")
        conn.execute(text("CREATE INDEX ix_doctor_probe ON workflow_worker_nodes (hostname)"))
        conn.execute(
            text("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'ix_doctor_probe'::regclass")
        )
    try:
        checks = {c["name"]: c for c in json.loads(CliRunner().invoke(doctor, ["--json"]).stdout)["checks"]}
        assert checks["indexes"]["status"] == "fail" and "ix_doctor_probe" in checks["indexes"]["detail"]
        assert "REINDEX" in checks["indexes"]["fix"]
    finally:
        with fresh.begin() as conn:
            conn.execute(text("DROP INDEX IF EXISTS ix_doctor_probe"))


def _dead_attempts(engine) -> str:
    """12,000 dead rows in the job attempts' partition of today, in the shared statistics at the commit;
    the partition's name."""
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_job_executions (id, job_id, generation, attempt, status, due_at, started_at) "
                "SELECT g, g, 1, 1, 'succeeded', now(), now() FROM generate_series(1, 12000) g"
            )
        )
        part = conn.execute(
            text("SELECT tableoid::regclass::text FROM workflow_job_executions LIMIT 1")
        ).scalar_one()
        conn.execute(text("DELETE FROM workflow_job_executions"))
        conn.execute(text("SELECT pg_stat_force_next_flush()"))  # this backend's counts, at the commit
    return str(part)


def test_doctor_counts_the_dead_rows_of_a_partitioned_table(fresh):
    """The job attempts are partitioned by day: their dead rows are in the partitions' statistics (the
    parent has none), and the doctor reports them under the table, naming the partition.

    Another connection of the test process may flush statistics of its own later (the fixture's TRUNCATE,
    which zeroes the partitions' counts, was sent on a pooled connection that flushes at most once a second
    or after 10 s idle): the dead rows are made again, at most three times, until the doctor sees them."""
    for _ in range(3):
        part = _dead_attempts(fresh)
        checks = {c["name"]: c for c in json.loads(CliRunner().invoke(doctor, ["--json"]).stdout)["checks"]}
        check = checks.get("dead rows workflow_job_executions")
        if check is not None:
            break
    assert check is not None, sorted(checks)
    assert check["status"] == "warn" and part in check["detail"] and part != "workflow_job_executions"
    dead = re.match(r"(\d+) dead vs (\d+) live rows", check["detail"])
    assert dead is not None and int(dead.group(1)) >= 12000, check["detail"]
    assert part in check["fix"]
