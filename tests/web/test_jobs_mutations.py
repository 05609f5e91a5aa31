"""Retry / skip / batch / replay through the HTTP API on real Postgres (SPEC L-OPS, L-OPS-2, L-OPS-3)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.web.conftest import PREFIX, audit_rows, mutate, row

STATUSES = ["pending", "running", "paused", "succeeded", "failed", "dead", "canceled"]
RETRY_OK = {"failed", "dead", "canceled"}
SKIP_OK = {"pending", "running", "paused", "failed", "dead"}


@pytest.mark.parametrize("status", STATUSES)
def test_retry_eligibility_matrix(client, operator, make_job, clean, status):
    job_id = make_job(status, attempts=0, generation=3)
    r = mutate(client, f"/jobs/{job_id}/retry", operator, {"reason": "receiver fixed"})
    after = row(clean, job_id)
    if status in RETRY_OK:
        assert r.status_code == 200, r.json
        assert after["status"] == "pending"
        assert after["generation"] == 4 and after["attempts"] == 0
        assert r.json["data"]["job"]["status"] == "pending"
    else:
        assert r.status_code == 409
        assert r.json["code"] == "STATE_CONFLICT"
        assert after["status"] == status and after["generation"] == 3


def test_pending_under_automatic_retry_refuses_manual_retry(client, operator, make_job, clean):
    job_id = make_job("pending", attempts=2, run_in=30)
    r = mutate(client, f"/jobs/{job_id}/retry", operator, {})
    assert r.status_code == 409 and r.json["code"] == "STATE_CONFLICT"
    assert "automatic retry" in r.json["message"]
    assert row(clean, job_id)["attempts"] == 2


def test_paused_job_only_continues_by_resuming_instance(client, operator, make_job):
    job_id = make_job("paused", instance_id="i" * 32)
    r = mutate(client, f"/jobs/{job_id}/retry", operator, {})
    assert r.status_code == 409 and "resum" in r.json["message"]


@pytest.mark.parametrize("status", STATUSES)
def test_skip_eligibility_matrix(client, operator, make_job, clean, status):
    job_id = make_job(status, generation=2)
    r = mutate(client, f"/jobs/{job_id}/skip", operator, {"reason": "handled by hand"})
    after = row(clean, job_id)
    if status in SKIP_OK:
        assert r.status_code == 200, r.json
        assert after["status"] == "canceled" and after["generation"] == 3
        assert after["lease_token"] is None  # the running executor is fenced out
        assert after["last_error"] == "handled by hand"
    else:
        assert r.status_code == 409 and r.json["code"] == "STATE_CONFLICT"
        assert after["status"] == status


def test_skip_running_closes_attempt_and_fences_executor(client, operator, make_job, clean):
    job_id = make_job("running", attempts=1)  # its attempt 1 is open on the job row
    with clean.begin() as conn:
        token = conn.execute(
            text("SELECT lease_token FROM workflow_jobs WHERE id = :i"), {"i": job_id}
        ).scalar()
    assert mutate(client, f"/jobs/{job_id}/skip", operator, {}).status_code == 200
    from app.ledger.transitions import lock_owned

    with clean.begin() as conn:
        assert lock_owned(conn, job_id, 1, str(token)) is None
        status = conn.execute(
            text("SELECT status FROM workflow_job_executions WHERE job_id = :i"), {"i": job_id}
        )
        assert status.scalar() == "canceled"


def test_retry_with_new_payload_gets_new_operation_key_and_exact_numbers(client, operator, make_job, clean):
    # an integration job: the engine's own job types refuse a replaced payload
    job_id = make_job("dead", type="external_dispatch", payload={"amount": 1})
    old_key = row(clean, job_id)["operation_key"]
    body = '{"payload": {"amount": 9007199254740993, "rate": 0.1000}}'
    r = client.post(
        f"{PREFIX}/jobs/{job_id}/retry",
        data=body,
        content_type="application/json",
        headers={**operator, "Idempotency-Key": "new-payload"},
    )
    assert r.status_code == 200, r.json
    assert row(clean, job_id)["operation_key"] != old_key
    detail = client.get(f"{PREFIX}/jobs/{job_id}", headers=operator)
    assert b'"amount":9007199254740993' in detail.data and b'"rate":0.1000' in detail.data  # never a float


def test_retry_with_same_payload_keeps_operation_key(client, operator, make_job, clean):
    job_id = make_job("failed", payload={"a": 1})
    old_key = row(clean, job_id)["operation_key"]
    assert mutate(client, f"/jobs/{job_id}/retry", operator, {"payload": {"a": 1}}).status_code == 200
    assert row(clean, job_id)["operation_key"] == old_key


def test_unknown_job_is_404_and_bad_id_400(client, operator):
    assert mutate(client, "/jobs/424242/retry", operator, {}).status_code == 404
    r = mutate(client, "/jobs/abc/skip", operator, {})
    assert r.status_code == 400 and r.json["errors"][0]["field"] == "id"
    assert mutate(client, "/jobs/99999999999999999999/skip", operator, {}).status_code == 400


def test_batch_retry_counts_and_staggering(client, operator, make_job, clean):
    eligible = [make_job(s) for s in ("failed", "dead", "canceled", "dead")]
    ineligible = [make_job(s) for s in ("running", "succeeded")]
    auto = make_job("pending", attempts=1, run_in=30)
    ids = [str(i) for i in eligible[:2] + ineligible + eligible[2:] + [auto]] + ["987654"]
    r = mutate(client, "/jobs/batch-retry", operator, {"job_ids": ids, "rate": 4, "reason": "bulk"})
    assert r.status_code == 200, r.json
    data = r.json["data"]
    assert data["submitted"] == 4 and data["skipped_for_state"] == 3 and data["not_found"] == 1
    assert data["submitted_ids"] == [str(i) for i in eligible]
    reasons = {s["id"]: s for s in data["skipped"]}
    assert reasons[str(auto)]["status"] == "pending" and "automatic retry" in reasons[str(auto)]["reason"]
    assert reasons["987654"]["reason"] == "not found"
    with clean.connect() as conn:
        run_ats = conn.execute(
            text("SELECT run_at FROM workflow_jobs WHERE id = ANY(:ids)"), {"ids": eligible}
        ).scalars()
        run_ats = sorted(run_ats)
    gaps = [(b - a).total_seconds() for a, b in zip(run_ats, run_ats[1:], strict=False)]
    assert gaps == pytest.approx([0.25, 0.25, 0.25], abs=1e-3)  # spacing = 1 / rate


def test_batch_retry_default_rate_and_range(client, operator, make_job, clean):
    ids = [make_job("dead") for _ in range(3)]
    r = mutate(client, "/jobs/batch-retry", operator, {"job_ids": [str(i) for i in ids]})
    assert r.json["data"]["rate"] == 20
    with clean.connect() as conn:
        run_ats = sorted(conn.execute(text("SELECT run_at FROM workflow_jobs")).scalars())
    assert (run_ats[1] - run_ats[0]).total_seconds() == pytest.approx(0.05, abs=1e-3)
    for bad in (0, 201, 1.5):
        r = mutate(client, "/jobs/batch-retry", operator, {"job_ids": ["1"], "rate": bad})
        assert r.status_code == 400 and r.json["errors"][0]["field"] == "rate"


def test_batch_skip_counts(client, operator, make_job, clean):
    ok = [make_job(s) for s in ("pending", "running", "paused", "failed", "dead")]
    bad = [make_job(s) for s in ("succeeded", "canceled")]
    r = mutate(client, "/jobs/batch-skip", operator, {"job_ids": [str(i) for i in ok + bad]})
    data = r.json["data"]
    assert data["submitted"] == 5 and data["skipped_for_state"] == 2
    assert {s["id"] for s in data["skipped"]} == {str(i) for i in bad}
    assert all(row(clean, i)["status"] == "canceled" for i in ok)


def test_replay_preview_changes_nothing(client, operator, make_job, clean):
    ids = [make_job("dead", last_error=f"timeout after {n} ms", type="webhook_delivery") for n in range(3)]
    make_job("failed", last_error="other", type="delay_wake")
    make_job("running")
    r = client.post(
        f"{PREFIX}/jobs/replay-preview",
        headers=operator,
        json={"types": ["webhook_delivery"], "sample_size": 2},
    )
    assert r.status_code == 200
    assert r.json["data"]["count"] == 3 and len(r.json["data"]["sample"]) == 2
    assert all(row(clean, i)["status"] == "dead" for i in ids)
    assert audit_rows(clean) == []


def test_replay_filters_by_keyword_age_trace_instance(client, operator, make_job, clean):
    a = make_job("dead", last_error="TLS handshake failed", age=7200, trace_id="t-a", instance_id="x" * 32)
    make_job("dead", last_error="TLS handshake failed", age=10, trace_id="t-b")
    make_job("failed", last_error="404 from receiver", age=7200, trace_id="t-a")
    body = {"error_keyword": "handshake", "min_age_seconds": 3600, "trace_id": "t-a", "instance_id": "x" * 32}
    preview = client.post(f"{PREFIX}/jobs/replay-preview", headers=operator, json=body).json["data"]
    assert preview["count"] == 1 and preview["sample"][0]["id"] == str(a)
    r = mutate(client, "/jobs/replay-dead", operator, body)
    assert r.json["data"]["success"] == 1 and r.json["data"]["submitted_ids"] == [str(a)]


def test_replay_caps_at_500_and_staggers(client, operator, clean):
    with clean.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, status, max_attempts, operation_key, trace_id,"
                " last_error,"
                " created_at) SELECT 'delay_wake', 'workflow-ledger', 'dead', 5, 'op' || g, 't', 'boom',"
                " now() - g * interval '1 second' FROM generate_series(1, 520) g"
            )
        )
    r = mutate(client, "/jobs/replay-dead", operator, {"rate": 200})
    data = r.json["data"]
    assert data["success"] == 500 and data["matched"] == 520 and data["remaining"] == 20
    with clean.connect() as conn:
        span = conn.execute(
            text(
                "SELECT extract(epoch FROM max(run_at) - min(run_at)) FROM workflow_jobs"
                " WHERE status = 'pending'"
            )
        ).scalar()
    assert float(span) == pytest.approx(499 / 200, abs=1e-3)
    assert mutate(client, "/jobs/replay-dead", operator, {"limit": 501}).status_code == 400
    r = mutate(client, "/jobs/replay-dead", operator, {"limit": 5})
    assert r.json["data"]["success"] == 5


def test_mutations_write_audit_rows(client, operator, make_job, clean):
    job_id = make_job("dead", instance_id="f" * 32)
    r = mutate(client, f"/jobs/{job_id}/retry", operator, {"reason": "receiver fixed"})
    rows = audit_rows(clean)
    assert len(rows) == 1
    a = rows[0]
    assert a["action"] == "job.retry" and a["target_type"] == "job" and a["target_id"] == str(job_id)
    assert a["reason"] == "receiver fixed" and a["workflow_id"] == "f" * 32
    assert a["request_id"] == r.headers["X-Request-Id"]
    assert a["before"]["status"] == "dead" and a["after"]["status"] == "pending"
    assert a["actor_id"] and a["namespace_id"]
    mutate(client, f"/jobs/{job_id}/skip", operator, {})
    mutate(client, "/jobs/batch-skip", operator, {"job_ids": [str(job_id)]})
    actions = [r["action"] for r in audit_rows(clean)]
    assert actions == ["job.retry", "job.skip", "jobs.batch_skip"]


def test_refused_mutation_writes_no_audit_and_no_receipt(client, operator, make_job, clean):
    job_id = make_job("succeeded")
    assert mutate(client, f"/jobs/{job_id}/retry", operator, {}, key="k").status_code == 409
    assert audit_rows(clean) == []
    with clean.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM idempotency_receipts")).scalar() == 0


def test_retry_publishes_wake_hint_after_commit(client, operator, make_job):
    from app.ledger import hints

    sent: list[str] = []
    hints.set_publisher(sent.append)
    try:
        job_id = make_job("dead", type="webhook_delivery")
        assert mutate(client, f"/jobs/{job_id}/retry", operator, {}).status_code == 200
    finally:
        hints.set_publisher(None)
    assert sent == ["workflow-ledger-outbound"]
