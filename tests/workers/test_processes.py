"""Real `ledgerflow worker` processes (L-CLAIM, L-PAUSE-5, L-EFFECT-1, L-CLAIM-3): racing workers,
kill -9 mid-job, Redis stopped mid-run, and hint latency."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import text

from app.db import transaction
from app.ledger import hints
from app.ledger.drain import drain
from tests.ledger_helpers import add_job, attempts, job, scalar, wait_for

ROOT = Path(__file__).resolve().parents[2]
FAST_ENV = {
    "LEDGERFLOW_LEASE_SECONDS": "2",
    "LEDGERFLOW_RENEW_SECONDS": "0.5",
    "LEDGERFLOW_BACKOFF_BASE_SECONDS": "0.1",
}


def _wait_ready(workers, timeout=60.0):
    deadline = time.monotonic() + timeout
    for w in workers:
        while "ready" not in w.log():
            if w.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"worker did not start:\n{w.log()}")
            time.sleep(0.05)
    return workers


def _node_id(worker) -> str:
    return re.search(r"ledgerflow worker (\w+) ready", worker.log()).group(1)


def _spawn_many(spawn_worker, n, env):
    return _wait_ready([spawn_worker("advance", env=env, wait_ready=False) for _ in range(n)])


@pytest.fixture
def spawn(spawn_worker):
    """``spawn_worker``, but at teardown every worker gets SIGTERM at once (they stop in parallel)."""
    started = []

    def _spawn(n=1, env=None):
        workers = _spawn_many(spawn_worker, n, env or {})
        started.extend(workers)
        return workers

    yield _spawn
    for w in started:
        if w.proc.poll() is None:
            w.proc.terminate()


@pytest.fixture
def scratch_tables(db):
    with transaction(db) as conn:
        conn.execute(text("CREATE TABLE IF NOT EXISTS test_effects (operation_key text NOT NULL, note text)"))
        conn.execute(text("CREATE TABLE IF NOT EXISTS test_business (id serial PRIMARY KEY, note text)"))
        conn.execute(text("TRUNCATE test_effects, test_business"))
    yield
    with transaction(db) as conn:  # keep the schema equal to the models (tests/db/test_schema.py)
        conn.execute(text("DROP TABLE IF EXISTS test_effects, test_business"))


class DoubleRunWatch:
    """Samples the ledger while workers run: a running job's open attempt (on its row) must never also
    be written as final, and a (job, generation) never has two succeeded attempts."""

    def __init__(self, engine):
        self.engine = engine
        self.samples = 0
        self.violations: list = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            with self.engine.connect() as conn:
                rows = conn.execute(
                    text(
                        "SELECT j.id FROM workflow_jobs j JOIN workflow_job_executions e ON e.job_id = j.id "
                        "AND e.generation = j.generation AND e.attempt = j.attempts WHERE j.status = 'running' "
                        "UNION ALL SELECT job_id FROM workflow_job_executions WHERE status = 'succeeded' "
                        "GROUP BY job_id, generation HAVING count(*) > 1"
                    )
                ).all()
            self.samples += 1
            self.violations.extend(rows)
            time.sleep(0.01)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(5)


def test_three_worker_processes_race_on_300_jobs(db, spawn):
    workers = spawn(3, {"LEDGERFLOW_POLL_SECONDS": "0.2"})
    with DoubleRunWatch(db) as watch:
        with transaction(db) as conn:
            conn.execute(
                text(
                    "INSERT INTO workflow_jobs (type, queue, payload, max_attempts, operation_key, trace_id) "
                    "SELECT 'delay_wake', 'workflow-ledger', "
                    "jsonb_build_object('mode', 'sleep', 'seconds', 0.01), 5, 'race-' || g, 'race' "
                    "FROM generate_series(1, 300) g"
                )
            )
        wait_for(
            lambda: scalar(db, "SELECT count(*) FROM workflow_jobs WHERE status = 'succeeded'") == 300,
            timeout=60,
        )
    assert watch.samples > 5 and watch.violations == []
    with db.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM workflow_job_executions")).scalar() == 300
        assert (
            conn.execute(
                text("SELECT count(DISTINCT job_id) FROM workflow_job_executions WHERE status = 'succeeded'")
            ).scalar()
            == 300
        )
        by_worker = dict(
            conn.execute(
                text("SELECT worker_id, count(*) FROM workflow_job_executions GROUP BY worker_id")
            ).all()
        )
    assert set(by_worker) <= {_node_id(w) for w in workers}
    assert len(by_worker) >= 2, f"the workers did not race: {by_worker}"
    # a node id is 16 hex (64 random bits): 17 bytes in every attempt row instead of 33
    assert all(re.fullmatch(r"[0-9a-f]{16}", node) for node in by_worker), by_worker
    assert all(w.proc.poll() is None for w in workers)


def test_kill_9_mid_job_drain_reclaims_and_the_receipt_is_reused(
    db, spawn, scratch_tables, tmp_path, settings
):
    # the pools' own reclaim is pushed out of the way: this test is about the drain's
    env = {**FAST_ENV, "LEDGERFLOW_POLL_SECONDS": "0.2", "LEDGERFLOW_RECLAIM_SECONDS": "3600"}
    workers = spawn(2, env)
    marker = tmp_path / "in-handler"
    j = add_job(db, "delay_wake", {"mode": "receipt_then_sleep", "marker_file": str(marker)})
    wait_for(marker.exists, timeout=20)
    (first,) = attempts(db, j)
    victim = next(w for w in workers if _node_id(w) == first["worker_id"])
    survivor = next(w for w in workers if w is not victim)
    # the receipt and its business row were committed before the kill
    assert scalar(db, "SELECT count(*) FROM test_effects") == 1
    assert scalar(db, "SELECT count(*) FROM workflow_job_effects") == 1
    victim.kill9()
    assert job(db, j)["status"] == "running"
    # nobody renews the lease any more: after <= 2 s it has expired (database time)
    wait_for(
        lambda: scalar(db, "SELECT lease_until <= now() FROM workflow_jobs WHERE id = :id", id=j), timeout=10
    )
    report = drain(db, replace(settings, lease_seconds=2, backoff_base_seconds=0.1))
    assert [(r["id"], r["status"], r["error_code"]) for r in report.reclaimed] == [
        (j, "pending", "LEASE_EXPIRED")
    ]
    wait_for(lambda: job(db, j)["status"] == "succeeded", timeout=20)
    rows = attempts(db, j)
    assert [(a["attempt"], a["status"], a["worker_id"]) for a in rows] == [
        (1, "failed", first["worker_id"]),
        (2, "succeeded", _node_id(survivor)),
    ]
    assert rows[0]["error_code"] == "LEASE_EXPIRED"
    assert job(db, j)["result"] == {"done": True}
    # the business write happened exactly once: 0 duplicate effects
    assert scalar(db, "SELECT count(*) FROM test_effects") == 1
    assert scalar(db, "SELECT count(*) FROM workflow_job_effects") == 1


def test_kill_9_mid_job_runs_again_within_lease_plus_5_s_without_the_drain(
    db, spawn, scratch_tables, tmp_path
):
    """A surviving worker's pool reclaims the lost lease itself (every
    LEDGERFLOW_RECLAIM_SECONDS, default 5) and the job is due at once (no failure backoff): it runs
    again within lease + 5 s of the kill, with no drain run at all. Before, it waited for the next
    minute's drain and a 30 s backoff."""
    lease = 3.0
    env = {
        "LEDGERFLOW_LEASE_SECONDS": str(lease),
        "LEDGERFLOW_RENEW_SECONDS": "0.5",
        "LEDGERFLOW_POLL_SECONDS": "0.5",
        "LEDGERFLOW_BACKOFF_BASE_SECONDS": "30",
    }
    workers = spawn(2, env)
    marker = tmp_path / "in-handler"
    j = add_job(db, "delay_wake", {"mode": "receipt_then_sleep", "marker_file": str(marker)})
    wait_for(marker.exists, timeout=20)
    (first,) = attempts(db, j)
    victim = next(w for w in workers if _node_id(w) == first["worker_id"])
    survivor = next(w for w in workers if w is not victim)
    victim.kill9()
    killed = time.monotonic()
    wait_for(lambda: len(attempts(db, j)) == 2, timeout=lease + 5 + 10)
    rerun_after = time.monotonic() - killed
    wait_for(lambda: job(db, j)["status"] == "succeeded", timeout=20)
    rows = attempts(db, j)
    assert [(a["attempt"], a["status"], a["error_code"]) for a in rows] == [
        (1, "failed", "LEASE_EXPIRED"),
        (2, "succeeded", None),
    ]
    assert rows[1]["worker_id"] == _node_id(survivor)
    assert rerun_after < lease + 5 + 1.5, rerun_after  # 1.5 s of slack for a loaded machine
    assert scalar(db, "SELECT count(*) FROM test_effects") == 1  # the receipt was reused


# --------------------------------------------------------------------------- Redis down / hints
def _redis_server_binary() -> str | None:
    found = shutil.which("redis-server") or str(Path(sys.executable).with_name("redis-server"))
    return found if found and os.access(found, os.X_OK) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateRedis:
    def __init__(self, binary: str, port: int, workdir: Path) -> None:
        self.binary, self.port, self.workdir = binary, port, workdir
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2)
        wait_for(lambda: _ping(client), timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


def _ping(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


@pytest.fixture
def private_redis(tmp_path) -> Iterator[PrivateRedis]:
    binary = _redis_server_binary()
    if binary is None:
        pytest.skip("no redis-server binary")
    r = PrivateRedis(binary, _free_port(), tmp_path)
    r.start()
    yield r
    r.stop()


class Enqueuer:
    """The business process (tests/workers/enqueuer.py) with its own REDIS_URL."""

    def __init__(self, redis_url: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "REDIS_URL": redis_url}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.workers.enqueuer"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert json.loads(self.proc.stdout.readline()) == {"ready": True}

    def enqueue(self, n=1, payload=None) -> dict:
        self.proc.stdin.write(json.dumps({"n": n, "payload": payload or {"mode": "noop"}}) + "\n")
        self.proc.stdin.flush()
        out = json.loads(self.proc.stdout.readline())
        assert "error" not in out, f"an error escaped into the business transaction: {out}"
        return out

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


def _start_latency_s(engine, job_id: int) -> float:
    """enqueue (job created_at) -> start (attempt started_at), by database time."""
    return float(
        scalar(
            engine,
            "SELECT extract(epoch FROM e.started_at - j.created_at) FROM workflow_jobs j "
            "JOIN workflow_job_executions e ON e.job_id = j.id WHERE j.id = :id ORDER BY e.id LIMIT 1",
            id=job_id,
        )
    )


def _done(engine, ids) -> bool:
    return scalar(
        engine, "SELECT count(*) FROM workflow_jobs WHERE id = ANY(:ids) AND status = 'succeeded'", ids=ids
    ) == len(ids)


def test_redis_stopped_mid_run_jobs_finish_by_polling_and_hints_come_back(
    db, spawn, scratch_tables, private_redis
):
    poll = 2.0  # the spec's short poll: a start well under it can only come from a hint
    env = {"REDIS_URL": private_redis.url, "LEDGERFLOW_POLL_SECONDS": str(poll)}
    (worker,) = spawn(1, env)
    enq = Enqueuer(private_redis.url)
    try:
        # 1. Redis up: hinted starts
        first = enq.enqueue(10)["ids"]
        wait_for(lambda: _done(db, first), timeout=10)

        # 2. Redis stops mid-run, while jobs are executing
        in_flight = enq.enqueue(8, {"mode": "sleep", "seconds": 0.3})["ids"]
        wait_for(lambda: scalar(db, "SELECT count(*) FROM workflow_jobs WHERE status = 'running'") > 0)
        private_redis.stop()
        outage = list(in_flight)
        for _ in range(3):
            out = enq.enqueue(10)  # the business transaction still commits, nothing escapes
            assert out["ms"] < 1500
            outage += out["ids"]
        assert scalar(db, "SELECT count(*) FROM test_business") == 5
        wait_for(lambda: _done(db, outage), timeout=3 * poll + 5)  # found by the short poll
        assert worker.proc.poll() is None

        # 3. Redis returns: hints resume by themselves (publisher breaker, consumer reconnect)
        private_redis.start()
        latencies: list[float] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            (j,) = enq.enqueue(1)["ids"]
            wait_for(lambda j=j: _done(db, [j]), timeout=poll + 5)
            latencies.append(_start_latency_s(db, j))
            if len(latencies) >= 2 and max(latencies[-2:]) < 0.3:
                break
            time.sleep(0.3)
        assert len(latencies) >= 2 and max(latencies[-2:]) < 0.3, f"hints did not resume: {latencies}"
        assert worker.proc.poll() is None
    finally:
        enq.close()
    total = len(first) + len(outage) + len(latencies)
    assert scalar(db, "SELECT count(*) FROM workflow_jobs WHERE status = 'succeeded'") == total
    assert scalar(db, "SELECT count(*) FROM workflow_job_executions") == total


def test_hinted_idle_enqueue_to_start_is_well_under_the_poll(db, spawn, redis_client):
    """With Redis up an idle worker starts a job on its hint, not at the next poll (generous bound;
    the benchmarks measure it precisely)."""
    from actors.hints import install_publisher

    (worker,) = spawn(1, {"LEDGERFLOW_POLL_SECONDS": "30"})
    install_publisher()
    try:
        latencies = []
        for n in range(5):
            time.sleep(0.2)  # idle between jobs
            j = add_job(db, "delay_wake", {"mode": "noop", "n": n})
            wait_for(lambda j=j: _done(db, [j]), timeout=10)
            latencies.append(_start_latency_s(db, j))
    finally:
        hints.set_publisher(None)
    assert max(latencies) < 0.5, latencies
    assert worker.proc.poll() is None


def test_a_worker_whose_pool_loop_dies_exits_and_its_job_is_reclaimed(db, spawn_worker):
    """A bug that ends the pool's loop thread left a process that heartbeats as healthy and never claims
    again. The worker now checks its pool's threads at every heartbeat and exits with status 1 (the process
    manager starts another); the job it held comes back through lease reclaim, as after a crash."""
    broken = spawn_worker(
        "advance",
        env={
            "LEDGERFLOW_HANDLERS": "tests.workers.handlers,tests.workers.broken_pool",
            "LEDGERFLOW_HEARTBEAT_SECONDS": "0.3",
            "LEDGERFLOW_LEASE_SECONDS": "1",
            "LEDGERFLOW_RENEW_SECONDS": "0.5",
        },  # the lease must be longer than its renewal period
    )
    j = add_job(db, "delay_wake", {"mode": "noop", "break_pool": True})
    assert broken.proc.wait(timeout=20) == 1
    out = broken.log()
    assert "the loop stopped on an unexpected error" in out and "stopped unexpectedly; exiting" in out
    node = re.search(r"ledgerflow worker (\w+) ready", out).group(1)
    assert scalar(db, "SELECT status FROM workflow_worker_nodes WHERE node_id = :n", n=node) == "stopped"
    assert job(db, j)["status"] == "running"  # claimed by the dead pool, its lease running out
    spawn_worker("advance", env={"LEDGERFLOW_RECLAIM_SECONDS": "0.5", "LEDGERFLOW_POLL_SECONDS": "0.2"})
    wait_for(lambda: job(db, j)["status"] == "succeeded", timeout=20)
    assert [a["status"] for a in attempts(db, j)] == ["failed", "succeeded"]
