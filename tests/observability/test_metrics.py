"""GET /metrics: scraped after a small workload and parsed with prometheus-client's own parser; the
counts match the ledger. In-process (one process's instruments) and across real processes (worker
and enqueuer subprocesses sharing PROMETHEUS_MULTIPROC_DIR, as `ledgerflow dev` runs them)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from app.db import transaction
from app.ledger import handlers
from app.ledger.enqueue import enqueue
from app.ledger.outcome import PermanentError
from app.observability.ledger_metrics import LedgerCollector
from tests.conftest import ROOT
from tests.observability.conftest import parse_metrics, scalar, total


def _scrape(client, headers) -> dict:
    LedgerCollector.shared().invalidate()  # ledger facts are cached 5 s per process
    resp = client.get("/metrics", headers=headers)
    assert resp.status_code == 200, resp.data
    assert resp.content_type.startswith("text/plain")
    return parse_metrics(resp.get_data(as_text=True))


def test_metrics_need_the_monitor_scope(client, token):
    assert client.get("/metrics").status_code == 401
    other = {"Authorization": "Bearer " + token("workflows:read")}
    assert client.get("/metrics", headers=other).status_code == 403


def test_counts_after_a_workload_match_the_ledger(client, monitor, fresh, handler_registry, run_pool):
    handlers.register("delay_wake", lambda ctx: {"ok": True}, replace=True)

    def refuse(ctx):
        raise PermanentError("bad input")

    handlers.register("task_timeout", refuse, replace=True)
    before = _scrape(client, monitor)
    with transaction() as conn:
        for i in range(6):
            enqueue(conn, "delay_wake", {"i": i})
        for i in range(2):
            enqueue(conn, "task_timeout", {"i": i})
    with pytest.raises(RuntimeError), transaction() as conn:  # a rolled-back enqueue counts nothing
        enqueue(conn, "delay_wake", {"rolled": "back"})
        raise RuntimeError
    run_pool(
        "advance", lambda: scalar(fresh, "SELECT count(*) FROM workflow_jobs WHERE finished_at IS NULL") == 0
    )
    after = _scrape(client, monitor)

    def delta(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    by_type = {"delay_wake": 6, "task_timeout": 2}
    for job_type, n in by_type.items():
        ledger_n = scalar(fresh, "SELECT count(*) FROM workflow_jobs WHERE type = :t", t=job_type)
        attempts = scalar(
            fresh,
            "SELECT count(*) FROM workflow_job_executions e JOIN workflow_jobs j ON j.id = e.job_id WHERE j.type = :t",
            t=job_type,
        )
        assert ledger_n == n == attempts
        assert delta("ledgerflow_jobs_enqueued_total", type=job_type, pool="advance") == ledger_n
        assert delta("ledgerflow_jobs_claimed_total", type=job_type, pool="advance") == attempts
        assert delta("ledgerflow_job_attempt_duration_seconds_count", type=job_type) == attempts
        assert delta("ledgerflow_job_queue_wait_seconds_count", type=job_type) == attempts
    succeeded = scalar(fresh, "SELECT count(*) FROM workflow_jobs WHERE status = 'succeeded'")
    dead = scalar(fresh, "SELECT count(*) FROM workflow_jobs WHERE status = 'dead'")
    assert (succeeded, dead) == (6, 2)
    assert delta("ledgerflow_jobs_settled_total", outcome="succeeded") == succeeded
    assert delta("ledgerflow_jobs_settled_total", type="task_timeout", outcome="dead") == dead
    # ledger facts read at scrape time
    assert total(after, "ledgerflow_jobs", type="delay_wake", status="succeeded") == 6
    assert total(after, "ledgerflow_jobs", type="task_timeout", status="dead") == 2
    for group in ("jobs", "slots", "workflows"):
        assert total(after, "ledgerflow_ledger_scrape_errors", group=group) == 0
    # the scrape itself is an API request with its route template
    assert total(after, "ledgerflow_api_requests_total", route="/metrics", method="GET", status="200") >= 1


def test_workflow_metrics_come_from_the_ledger(client, monitor, fresh):
    from sqlalchemy import text

    from app.auth import ensure_namespace
    from tests.engine.helpers import publish, start

    with transaction() as conn:
        ns = ensure_namespace(conn, "metrics-wf")
    def_id = publish(
        fresh,
        ns,
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 600,
            "steps": [{"key": "t", "kind": "TIMER", "after": [], "delay_seconds": 60}],
        },
    )
    ids = [start(fresh, ns, def_id, {})["id"] for _ in range(3)]
    with fresh.begin() as conn:
        conn.execute(
            text("UPDATE workflow_instances SET state = 'FAILED', completed_at = now() WHERE id = :i"),
            {"i": ids[0]},
        )
    samples = _scrape(client, monitor)
    assert total(samples, "ledgerflow_workflow_starts_total") == 3
    assert total(samples, "ledgerflow_workflow_ends_total", state="FAILED") == 1
    assert total(samples, "ledgerflow_workflow_ends_total", state="SUCCEEDED") == 0
    assert total(samples, "ledgerflow_workflow_instances") == 2
    assert total(samples, "ledgerflow_pool_slots_capacity", pool="advance") == 0  # no live worker


ENQUEUE = """
import sys
from actors.hints import install_publisher
from app.db import transaction
from app.ledger.enqueue import enqueue
install_publisher()
with transaction() as conn:
    for mode in sys.argv[1].split(","):
        enqueue(conn, "delay_wake", {"mode": mode})
print("enqueued", flush=True)
"""


def test_all_processes_reach_the_web_scrape(client, monitor, fresh, spawn_worker, tmp_path, monkeypatch):
    """Multiprocess mode: a worker process and an enqueueing process write their counters to the
    shared directory; the web process's /metrics sums them; the counts match the ledger exactly.
    The worker logs JSON lines carrying node_id / job_id / attempt / trace_id."""
    mp = tmp_path / "prom"
    mp.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(mp), "LOG_FORMAT": "json", "LEDGERFLOW_POLL_SECONDS": "0.2"}
    worker = spawn_worker("advance", env=env)
    modes = ["noop"] * 5 + ["permanent"] * 2 + ["skip"]
    out = subprocess.run(
        [sys.executable, "-c", ENQUEUE, ",".join(modes)],
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 30
    while scalar(fresh, "SELECT count(*) FROM workflow_jobs WHERE finished_at IS NULL"):
        assert time.monotonic() < deadline, worker.log()
        time.sleep(0.1)
    # settlement is counted right after the pass that wrote it; the worker's files are shared live
    time.sleep(0.5)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(mp))
    samples = _scrape(client, monitor)
    jobs_n = scalar(fresh, "SELECT count(*) FROM workflow_jobs")
    attempts = scalar(fresh, "SELECT count(*) FROM workflow_job_executions")
    assert jobs_n == len(modes)
    assert total(samples, "ledgerflow_jobs_enqueued_total", type="delay_wake", pool="advance") == jobs_n
    assert total(samples, "ledgerflow_jobs_claimed_total", type="delay_wake") == attempts
    assert total(samples, "ledgerflow_job_attempt_duration_seconds_count") == attempts
    for status, outcome in (("succeeded", "succeeded"), ("dead", "dead")):
        n = scalar(fresh, "SELECT count(*) FROM workflow_jobs WHERE status = :s", s=status)
        assert total(samples, "ledgerflow_jobs_settled_total", outcome=outcome) == n
    if os.environ.get("REDIS_URL"):  # the enqueuer's hint reached the worker through Redis
        assert total(samples, "ledgerflow_hint_publishes_total", result="sent") >= 1
        assert total(samples, "ledgerflow_hint_wakeups_total") >= 1
    worker.stop()
    import json

    lines = [json.loads(line) for line in worker.log().splitlines() if line.startswith("{")]
    assert lines, worker.log()
    node_id = scalar(fresh, "SELECT node_id FROM workflow_worker_nodes LIMIT 1")
    assert all(line["node_id"] == node_id for line in lines)
    failures = [line for line in lines if line.get("job_id") and "bad input" in line["message"]]
    assert len(failures) == 2
    assert all({"attempt", "trace_id", "time", "level", "logger"} <= set(line) for line in failures)


def test_the_grafana_dashboard_queries_only_exposed_metrics(client, monitor, fresh):
    import json
    import re

    from prometheus_client.parser import text_string_to_metric_families

    LedgerCollector.shared().invalidate()
    body = client.get("/metrics", headers=monitor).get_data(as_text=True)
    families = {f.name for f in text_string_to_metric_families(body)}
    doc = json.loads((ROOT / "docs" / "grafana" / "ledgerflow-dashboard.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 25
    used = {
        re.sub(r"_(bucket|total|count|sum)$", "", m)
        for e in exprs
        for m in re.findall(r"ledgerflow_[a-z_]+", e)
    }
    assert used <= families, used - families
