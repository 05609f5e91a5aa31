"""Every L-STATUS metric computed on crafted rows (times relative to database now)."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.ledger import nodes
from tests.web.conftest import PREFIX


def _node(
    conn,
    node_id,
    *,
    roles=("worker",),
    pools=("workflow-ledger",),
    beat_ago=0,
    status="active",
    capacity=4,
    in_use=0,
):
    conn.execute(
        text(
            "INSERT INTO workflow_worker_nodes (node_id, hostname, pid, roles, pools, slot_capacity,"
            " slots_in_use,"
            " status, heartbeat_at) VALUES (:n, 'h', 1, CAST(:r AS text[]), CAST(:p AS text[]), :c, :u, :s,"
            " now() - make_interval(secs => :ago))"
        ),
        {
            "n": node_id,
            "r": list(roles),
            "p": list(pools),
            "c": capacity,
            "u": in_use,
            "s": status,
            "ago": beat_ago,
        },
    )


def _attempt(conn, job_id, n, *, status="succeeded", started_ago=0, wait=0.0, duration=None):
    conn.execute(
        text(
            "INSERT INTO workflow_job_executions (job_id, generation, attempt, status, lease_token, due_at,"
            " started_at, finished_at, duration_ms) VALUES (:j, 1, :n, CAST(:s AS workflow_attempt_status),"
            " gen_random_uuid(),"
            " now() - make_interval(secs => :ago + :wait), now() - make_interval(secs => :ago),"
            " CASE WHEN CAST(:s AS workflow_attempt_status) <> 'running' THEN now() END, :d)"
        ),
        {"j": job_id, "n": n, "s": status, "ago": started_ago, "wait": wait, "d": duration},
    )


def _status(client, headers):
    r = client.get(f"{PREFIX}/jobs/runtime-status", headers=headers)
    assert r.status_code == 200
    return r.json["data"]


def test_empty_ledger(client, monitor):
    s = _status(client, monitor)
    assert s["live_workers"] == {"live": 0, "total": 0}
    assert s["slots"] == {"in_use": 0, "capacity": 0}
    assert s["in_flight"] == s["stuck"] == s["backlog"] == s["dead"] == 0
    assert s["oldest_queued_seconds"] is None
    assert s["queue_wait_p95_seconds"] is None and s["queue_wait_p99_seconds"] is None
    assert s["last_claim_at"] is None
    assert s["failure_rate_1h"] == 0.0 and s["avg_duration_ms_1h"] is None


def test_live_workers_and_slots(client, monitor, clean):
    with clean.begin() as conn:
        _node(conn, "live-a", beat_ago=10, capacity=4, in_use=3)
        _node(conn, "live-b", pools=("workflow-ledger-outbound",), beat_ago=89, capacity=4, in_use=1)
        _node(conn, "stale", beat_ago=300, capacity=4, in_use=4)  # counted in total, not live, no slots
        _node(conn, "stopping", beat_ago=5, status="stopping", capacity=4, in_use=2)  # not active
        _node(conn, "gone", beat_ago=601, capacity=4, in_use=4)  # older than 10 min: not counted
        _node(conn, "scheduler", roles=("scheduler",), pools=(), beat_ago=1, capacity=0)
        _node(conn, "api", roles=("web",), pools=("workflow-ledger",), beat_ago=1, capacity=8, in_use=8)
        _node(conn, "nopool", roles=("worker",), pools=("pdf-archive",), beat_ago=1, capacity=2, in_use=2)
    s = _status(client, monitor)
    assert s["live_workers"] == {"live": 2, "total": 4}
    assert s["slots"] == {"in_use": 4, "capacity": 8}


def test_in_flight_stuck_backlog_oldest_dead(client, monitor, make_job):
    make_job("running")  # healthy lease
    make_job("running", lease_in=-1)  # lease expired
    make_job("running", lease_in=30, deadline_in=-1)  # past execution deadline
    make_job("pending", run_in=-120)  # due for 2 min
    make_job("pending", run_in=-5)
    make_job("pending", run_in=60)  # not due: not backlog
    make_job("paused")
    make_job("dead")
    make_job("dead")
    s = _status(client, monitor)
    assert s["in_flight"] == 3
    assert s["stuck"] == 2
    assert s["backlog"] == 2
    assert s["oldest_queued_seconds"] == pytest.approx(120, abs=2)
    assert s["dead"] == 2


def test_queue_wait_percentiles_failure_rate_duration_last_claim(client, monitor, make_job, clean):
    job_id = make_job("succeeded")
    with clean.begin() as conn:
        for i in range(1, 101):  # waits 1..100 s, last hour
            status = "failed" if i <= 25 else "succeeded"
            _attempt(conn, job_id, i, status=status, started_ago=60 + i, wait=float(i), duration=i * 10)
        _attempt(conn, job_id, 101, status="running", started_ago=1, wait=0.0)  # no duration yet
        _attempt(conn, job_id, 102, status="failed", started_ago=7200, wait=5000.0, duration=99999)  # old
    s = _status(client, monitor)
    # percentile_cont over waits 0, 1..100 (101 samples in the last hour)
    waits = sorted([0.0] + [float(i) for i in range(1, 101)])

    def pct(p: float) -> float:
        k = (len(waits) - 1) * p
        lo, hi = int(k), min(int(k) + 1, len(waits) - 1)
        return waits[lo] + (waits[hi] - waits[lo]) * (k - lo)

    assert s["queue_wait_p95_seconds"] == pytest.approx(pct(0.95), abs=0.01)
    assert s["queue_wait_p99_seconds"] == pytest.approx(pct(0.99), abs=0.01)
    assert s["attempts_1h"] == 101 and s["failed_attempts_1h"] == 25
    assert s["failure_rate_1h"] == pytest.approx(25 / 101, abs=1e-4)
    assert s["avg_duration_ms_1h"] == pytest.approx(sum(i * 10 for i in range(1, 101)) / 100)
    assert s["duration_samples_1h"] == 100
    assert s["last_claim_at"] is not None


def test_status_ignores_list_filters(client, monitor, make_job):
    make_job("dead")
    r = client.get(f"{PREFIX}/jobs/runtime-status?status=pending", headers=monitor)
    assert r.status_code == 400  # the panel takes no filters at all
    assert _status(client, monitor)["dead"] == 1


def test_worker_registry_shows_a_stopped_heartbeat_as_lost(client, monitor, clean):
    """A node whose heartbeat stopped without a clean exit reads as ``lost`` (it was
    ``active`` before), a clean exit as ``stopped``; live nodes come first; the status counts only
    live nodes' slots."""
    with clean.begin() as conn:
        _node(conn, "killed", beat_ago=300, capacity=4, in_use=4)
        _node(conn, "live", beat_ago=3, capacity=4, in_use=1)
        _node(conn, "exited", beat_ago=20, status="stopped", capacity=4, in_use=0)
    with clean.connect() as conn:
        listed = nodes.list_nodes(conn)
    items = {n["node_id"]: n for n in listed}
    assert listed[0]["node_id"] == "live"
    assert (items["killed"]["state"], items["live"]["state"], items["exited"]["state"]) == (
        "lost",
        "active",
        "stopped",
    )
    assert items["killed"]["heartbeat_age_seconds"] >= 300
    assert _status(client, monitor)["slots"] == {"in_use": 1, "capacity": 4}
