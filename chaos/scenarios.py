"""The fault scenarios. Each starts a fresh cluster (database, private Redis, the Procfile processes),
runs the workload while injecting its fault, waits for quiescence and checks the SQL invariants."""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
from sqlalchemy import text

from app.ledger.status import runtime_status
from chaos.harness import ROOT, Cluster, retry_db, wait_until
from chaos.workload import Workload, check_invariants
from ledgerflow.client import Client

# short leases and polls so each fault resolves in seconds (the defaults are 60 s / 2 s / 60 s)
FAST = {
    "LEDGERFLOW_LEASE_SECONDS": "3",
    "LEDGERFLOW_RENEW_SECONDS": "1",
    "LEDGERFLOW_RECLAIM_SECONDS": "1",
    "LEDGERFLOW_POLL_SECONDS": "0.5",
    "LEDGERFLOW_DRAIN_INTERVAL_SECONDS": "5",
    "LEDGERFLOW_BACKOFF_BASE_SECONDS": "1",
    "LEDGERFLOW_BACKOFF_CAP_SECONDS": "5",
    "LEDGERFLOW_HEARTBEAT_SECONDS": "2",
}
LEASE = float(FAST["LEDGERFLOW_LEASE_SECONDS"])
POLL = float(FAST["LEDGERFLOW_POLL_SECONDS"])
DRAIN = float(FAST["LEDGERFLOW_DRAIN_INTERVAL_SECONDS"])


@dataclass
class Result:
    scenario: str
    faults: int = 0
    jobs: int = 0
    workflows: int = 0
    invariants: dict[str, int] = field(default_factory=dict)
    recovery_seconds: float | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def violations(self) -> int:
        return sum(self.invariants.values()) + (1 if self.error else 0)


@dataclass
class Size:
    workflows: int
    jobs: int
    kills: int
    stops: int
    backend_kills: int
    redis_seconds: float
    starts: int


FULL = Size(workflows=30, jobs=300, kills=30, stops=3, backend_kills=10, redis_seconds=30, starts=60)
QUICK = Size(workflows=10, jobs=40, kills=3, stops=1, backend_kills=2, redis_seconds=4, starts=10)

Fault = Callable[[Cluster, Workload, Size, Result], None]


def _feed(load: Workload, size: Size, spread_seconds: float) -> threading.Thread:
    """Start the workflows and enqueue the jobs over ``spread_seconds`` (in a thread)."""

    def run() -> None:
        steps = 5
        for _ in range(steps):
            load.start_workflows(size.workflows // steps, client=Client(load.web_url, load.token, retries=30))
            load.enqueue_jobs(size.jobs // steps)
            time.sleep(spread_seconds / steps)

    t = threading.Thread(target=run, name="chaos-feed", daemon=True)
    t.start()
    return t


def kill_workers(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    """SIGKILL a random worker (either pool) at random moments; a replacement starts each time."""
    feed = _feed(load, size, spread_seconds=size.kills * 0.6)
    for _ in range(size.kills):
        time.sleep(random.uniform(0.2, 1.0))
        victim = cluster.random_worker()
        pool = victim.role.split("-")[1]
        victim.signal(signal.SIGKILL)
        result.faults += 1
        cluster.start_worker(pool)
    feed.join()


def stop_workers(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    """SIGSTOP a busy worker past its lease, then SIGCONT: its late writes must be refused."""
    feed = _feed(load, size, spread_seconds=size.stops * (LEASE * 3.5 + 1))
    refused = 0
    for _ in range(size.stops):
        try:
            worker_id = wait_until(lambda: _running_on(cluster, load), 20)
        except TimeoutError:  # nothing running right now: stop any worker (it must still be fenced)
            worker_id = None
        victim = next(
            (p for p in cluster.workers() if worker_id and worker_id in p.log()), cluster.random_worker()
        )
        before = _late_writes(victim.log())
        victim.signal(signal.SIGSTOP)
        time.sleep(LEASE * 2.5)  # its leases expire; other pools reclaim and re-run its jobs
        victim.signal(signal.SIGCONT)
        result.faults += 1
        time.sleep(LEASE)
        refused += _late_writes(victim.log()) - before
    feed.join()
    result.notes.append(f"late writes of stopped workers refused: {refused}")


def _running_on(cluster: Cluster, load: Workload) -> str | None:
    return retry_db(lambda: _running_on_once(cluster))


def _running_on_once(cluster: Cluster) -> str | None:
    with cluster.engine.connect() as conn:  # type: ignore[union-attr]
        return conn.execute(
            text("SELECT worker_id FROM workflow_jobs WHERE status = 'running' ORDER BY random() LIMIT 1")
        ).scalar()


def _late_writes(log: str) -> int:
    return log.count("settlement of a stale executor ignored") + log.count("ownership lost")


def kill_backends(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    """``pg_terminate_backend`` of every connection the processes hold, repeatedly."""
    feed = _feed(load, size, spread_seconds=size.backend_kills * 1.0)
    killed = 0
    for _ in range(size.backend_kills):
        time.sleep(random.uniform(0.5, 1.5))
        with cluster.engine.connect() as conn:  # type: ignore[union-attr]
            killed += len(
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
                    )
                ).all()
            )
        result.faults += 1
    feed.join()
    result.notes.append(f"backends terminated: {killed}")


def restart_postgres(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    """The PostgreSQL server restarted mid-run (``pg_ctlcluster ... restart``; opt-in: it drops every
    session on the server). While it is away the API answers 503, never 500; afterwards the processes
    resume by themselves within 15 s."""
    _restart_postgres(cluster, load, size, result, mode="fast")


def crash_postgres(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    """The PostgreSQL server stopped in ``immediate`` mode mid-run (as a crash: no shutdown
    checkpoint, crash recovery at start) and started again. The pools' passes commit asynchronously,
    so the last passes before the crash may be lost: a lost settle must come back as a reclaimed
    lease, a lost claim as a pending job; the invariants are the same as for every other fault."""
    _restart_postgres(cluster, load, size, result, mode="immediate")


def _restart_postgres(cluster: Cluster, load: Workload, size: Size, result: Result, *, mode: str) -> None:
    feed = _feed(load, size, spread_seconds=4)
    time.sleep(2)
    answers: list[int] = []
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(timeout=2) as c:
            while not stop.is_set():
                try:
                    r = c.get(
                        f"{load.web_url}/v1/workflows",
                        params={"limit": "1"},
                        headers={"Authorization": f"Bearer {load.token}"},
                    )
                    answers.append(r.status_code)
                except httpx.HTTPError:
                    answers.append(0)
                time.sleep(0.1)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", "--mode", mode, version, "main", "restart"],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    back = time.monotonic()
    result.faults += 1
    feed.join()
    before = _settled_count(cluster)
    wait_until(
        lambda: _settled_count(cluster) > before or load.unfinished() == {"jobs": 0, "workflows": 0}, 60
    )
    result.notes.append(f"first job settled {time.monotonic() - back:.1f} s after PostgreSQL was back")
    stop.set()
    prober.join(5)
    result.invariants["the API answered 503, never 500, while PostgreSQL was away"] = answers.count(500)
    result.invariants["work resumed within 15 s of PostgreSQL's return"] = int(
        time.monotonic() - back > 15 and load.unfinished()["jobs"] > 0
    )
    result.notes.append(f"API answers while restarting: {sorted(set(answers))}")


def _settled_count(cluster: Cluster) -> int:
    return retry_db(lambda: _settled_once(cluster))


def _settled_once(cluster: Cluster) -> int:
    with cluster.engine.connect() as conn:  # type: ignore[union-attr]
        return int(
            conn.execute(
                text("SELECT count(*) FROM workflow_job_executions WHERE status = 'succeeded'")
            ).scalar_one()
        )


def stop_redis(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    """Redis stopped while jobs keep coming, then started again empty (flushed): nothing is lost and
    jobs are picked up by polling within the poll interval + 1 s."""
    time.sleep(1)
    cluster.stop_redis()
    result.faults += 1
    down_at = time.monotonic()
    outage_jobs: list[int] = []
    while time.monotonic() - down_at < size.redis_seconds:
        outage_jobs += load.enqueue_jobs(max(1, size.jobs // 10), work_seconds=0.05)
        time.sleep(size.redis_seconds / 10)
    load.start_workflows(size.workflows, client=Client(load.web_url, load.token, retries=30))
    cluster.start_redis()  # a new, empty Redis: every hint and flag is gone
    wait_until(lambda: _started(cluster, outage_jobs) == len(outage_jobs), 60)
    lat = _pickup_latencies(cluster, outage_jobs)
    p99 = statistics.quantiles(lat, n=100)[98] if len(lat) >= 2 else (lat[0] if lat else 0.0)
    result.notes.append(
        f"pickup while Redis was down: p50 {statistics.median(lat):.2f} s, p99 {p99:.2f} s "
        f"(bound: poll {POLL} s + 1 s)"
    )
    if p99 > POLL + 1:
        result.invariants["pickup p99 within poll + 1 s while Redis is down"] = 1
    else:
        result.invariants["pickup p99 within poll + 1 s while Redis is down"] = 0


def _started(cluster: Cluster, ids: list[int]) -> int:
    with cluster.engine.connect() as conn:  # type: ignore[union-attr]
        return int(
            conn.execute(
                text("SELECT count(DISTINCT job_id) FROM workflow_job_executions WHERE job_id = ANY(:ids)"),
                {"ids": ids},
            ).scalar_one()
        )


def _pickup_latencies(cluster: Cluster, ids: list[int]) -> list[float]:
    with cluster.engine.connect() as conn:  # type: ignore[union-attr]
        rows = conn.execute(
            text(
                "SELECT extract(epoch FROM min(e.started_at) - j.created_at) FROM workflow_jobs j "
                "JOIN workflow_job_executions e ON e.job_id = j.id WHERE j.id = ANY(:ids) GROUP BY j.id"
            ),
            {"ids": ids},
        ).all()
    return sorted(float(r[0]) for r in rows)


def contention(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    """8 worker processes and 2 drain loops on one ledger."""
    for pool in ("advance", "outbound", "advance", "outbound", "advance", "outbound"):
        cluster.start_worker(pool)
    stop = threading.Event()
    runs = [0, 0]

    def drains(i: int) -> None:
        while not stop.is_set():
            subprocess.run(
                [sys.executable, "-m", "ledgerflow.cli", "drain"],
                env=cluster.env(),
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=60,
                check=False,
            )
            runs[i] += 1

    threads = [threading.Thread(target=drains, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    _feed(load, size, spread_seconds=3).join()
    wait_until(lambda: load.unfinished() == {"jobs": 0, "workflows": 0}, 180)
    stop.set()
    for t in threads:
        t.join(70)
    result.faults += sum(runs)
    errors = sum(cluster.logs("worker").count(s) for s in ("Traceback", "deadlock detected"))
    result.invariants["no error or deadlock surfaced to handlers"] = errors
    result.notes.append(f"8 workers, drain runs: {runs[0]} + {runs[1]}")


def kill_web(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    """The web process killed (SIGKILL, whole process group) during a burst of idempotent starts that
    the SDK retries with the same Idempotency-Key: no duplicate instance, identical replays."""
    client = Client(load.web_url, load.token, retries=40, backoff=0.25, timeout=10)
    keys = [uuid.uuid4().hex for _ in range(size.starts)]
    answers: dict[str, str] = {}
    before = _roots(cluster, load)

    def burst() -> None:
        for k in keys:
            answers[k] = client.start_workflow(
                load.definition_id, "v1", {"n": 1}, idempotency_key=k
            ).instance.id

    t = threading.Thread(target=burst, daemon=True)
    t.start()
    time.sleep(0.5)
    web = next(p for p in cluster.procs if p.role == "web" and p.alive)
    os.killpg(web.popen.pid, signal.SIGKILL)
    web.popen.wait()
    result.faults += 1
    time.sleep(1)
    cluster.start_web()
    t.join(120)
    replays = {k: client.start_workflow(load.definition_id, "v1", {"n": 1}, idempotency_key=k) for k in keys}
    load.instance_ids.extend(answers.values())
    created = _roots(cluster, load) - before
    result.invariants["one instance per Idempotency-Key"] = abs(int(created) - len(keys))
    result.invariants["replays answer the same instance"] = sum(
        1 for k, r in replays.items() if r.instance.id != answers.get(k) or not r.deduplicated
    )


def sixteen_workers(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    """16 worker processes (distinct node ids, as if on several hosts) on one PostgreSQL and Redis:
    they claim without errors and the runtime status counts exactly their slots."""
    for pool in ["advance", "outbound"] * 7:  # 2 already run: 16 in all
        cluster.start_worker(pool)
    with cluster.engine.connect() as conn:  # type: ignore[union-attr]
        status = runtime_status(conn)
    result.notes.append(f"runtime status: live workers {status['live_workers']}, slots {status['slots']}")
    result.invariants["runtime status counts the 16 live workers and their 64 slots"] = int(
        status["live_workers"]["live"] != 16 or status["slots"]["capacity"] != 64
    )
    _feed(load, size, spread_seconds=3).join()
    wait_until(lambda: load.unfinished() == {"jobs": 0, "workflows": 0}, 180)
    errors = sum(cluster.logs("worker").count(s) for s in ("Traceback", "database error"))
    result.invariants["no claim error in 16 workers"] = errors


def mixed(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    """The short version ``make test`` runs: a few SIGKILLs, one SIGSTOP past the lease, one Redis stop."""
    kill_workers(
        cluster,
        load,
        Size(
            size.workflows // 2, size.jobs // 2, kills=3, stops=0, backend_kills=0, redis_seconds=0, starts=0
        ),
        result,
    )
    stop_workers(
        cluster,
        load,
        Size(
            size.workflows // 2, size.jobs // 2, kills=0, stops=1, backend_kills=0, redis_seconds=0, starts=0
        ),
        result,
    )
    stop_redis(
        cluster, load, Size(0, 10, kills=0, stops=0, backend_kills=0, redis_seconds=3, starts=0), result
    )


def _roots(cluster: Cluster, load: Workload) -> int:
    with cluster.engine.connect() as conn:  # type: ignore[union-attr]
        return int(
            conn.execute(
                text(
                    "SELECT count(*) FROM workflow_instances WHERE definition_id = :d AND parent_instance_id IS NULL"
                ),
                {"d": load.definition_id},
            ).scalar_one()
        )


SCENARIOS: dict[str, tuple[Fault, dict[str, int]]] = {
    # name: (fault, workers per pool)
    "worker-sigkill": (kill_workers, {"advance": 2, "outbound": 2}),
    "worker-sigstop": (stop_workers, {"advance": 2, "outbound": 2}),
    "postgres-backend-kill": (kill_backends, {"advance": 2, "outbound": 2}),
    "redis-stop-and-flush": (stop_redis, {"advance": 1, "outbound": 1}),
    "8-workers-2-drains": (contention, {"advance": 1, "outbound": 1}),
    "web-kill-idempotent-starts": (kill_web, {"advance": 1, "outbound": 1}),
    "16-workers": (sixteen_workers, {"advance": 1, "outbound": 1}),
}
# opt-in (`--only postgres-restart,postgres-crash`): they restart the whole PostgreSQL server
OPT_IN: dict[str, tuple[Fault, dict[str, int]]] = {
    "postgres-restart": (restart_postgres, {"advance": 2, "outbound": 2}),
    "postgres-crash": (crash_postgres, {"advance": 2, "outbound": 2}),
}
# not in the full table: the short version of make test (one cluster, several kinds of fault)
QUICK_MIX: tuple[Fault, dict[str, int]] = (mixed, {"advance": 2, "outbound": 2})


def run(
    name: str,
    size: Size,
    server_url: str,
    *,
    timeout: float = 240,
    keep_failed: bool = False,
    process_server_url: str | None = None,
    settings: dict[str, str] | None = None,
    scenario: tuple[Fault, dict[str, int]] | None = None,
    process_url_for: Callable[[str], str] | None = None,
    workload: type[Workload] = Workload,
) -> Result:
    """Run one scenario on a fresh database of ``server_url``; the processes reach it through
    ``process_server_url`` when given (a PgBouncer), or at ``process_url_for(database name)``, with
    ``settings`` added to their environment. ``scenario`` (fault, workers per pool) is given by a
    scenario that brings its own servers (chaos/failover.py)."""
    fault, workers = scenario or (QUICK_MIX if name == "mixed" else {**SCENARIOS, **OPT_IN}[name])
    result = Result(name)
    cluster = Cluster(
        server_url,
        settings={**FAST, **(settings or {})},
        process_server_url=process_server_url,
        process_url_for=process_url_for,
    )
    load: Workload | None = None
    try:
        cluster.create_database()
        cluster.start_redis()
        cluster.start_web()
        cluster.start_scheduler()
        for pool, n in workers.items():
            for _ in range(n):
                cluster.start_worker(pool)
        load = workload(cluster.engine, cluster.web_url)  # type: ignore[arg-type]
        load.setup()
        load.start_task_worker()
        fault(cluster, load, size, result)
        quiet_from = time.monotonic()
        wait_until(lambda: load.unfinished() == {"jobs": 0, "workflows": 0}, timeout, interval=0.25)  # type: ignore[union-attr]
        result.recovery_seconds = round(time.monotonic() - quiet_from, 2)
        result.jobs, result.workflows = len(load.job_ids), len(load.instance_ids)
        result.invariants.update(check_invariants(cluster.engine, load, DRAIN + LEASE))  # type: ignore[arg-type]
    except Exception as exc:  # a scenario that cannot finish is a failed row, not a crash
        result.error = f"{type(exc).__name__}: {exc}"
        if load is not None:
            result.notes.append(f"unfinished at the end: {load.unfinished()}")
            result.jobs, result.workflows = len(load.job_ids), len(load.instance_ids)
            try:
                result.invariants.update(check_invariants(cluster.engine, load, DRAIN + LEASE))  # type: ignore[arg-type]
            except Exception as inner:
                result.notes.append(f"invariants not checked: {inner}")
        result.notes.append(f"logs kept in {cluster.workdir}")
    finally:
        if load is not None:
            load.stop_task_worker()
        cluster.stop_all()
        if keep_failed and result.violations:
            result.notes.append(f"database kept for inspection: {cluster.db_name}")
        else:
            cluster.drop_database()
    return result
