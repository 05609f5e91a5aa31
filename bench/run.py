"""``python -m bench``: ledgerflow against procrastinate and pgqueuer on the same PostgreSQL server.

Creates its own databases (``lf_bench_<random>`` for ledgerflow, ``lf_bench_<random>_pq`` and
``lf_bench_<random>_pgq`` for the peers) on the server named by ``DATABASE_URL`` and a private Redis
namespace, runs real worker processes, prints one table, writes the raw numbers to
``bench/results/``, and drops everything it created. Numbers only: nothing here asserts a timing.
See ``bench/README.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import create_engine, make_url

from app.migrate import upgrade

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "workflow-ledger"
LEDGER_TABLES = "workflow_job_effects, workflow_job_executions, workflow_jobs, workflow_worker_nodes"
PEER_TABLES = "procrastinate_events, procrastinate_periodic_defers, procrastinate_jobs, procrastinate_workers"
PEERS = ("procrastinate", "pgqueuer")
# Autovacuum may be off on the server (it is off on this machine's PostgreSQL): during throughput
# runs every system's job tables are vacuumed this often, as a default autovacuum would roughly do.
VACUUM_EVERY = 5.0
SLOTS = 4  # L-CLAIM-1: 4 slots per pool per process; procrastinate gets --concurrency 4 per process
# pgqueuer: dequeue batches of 10; its per-process cap (--max-concurrent-tasks) must be at least twice
# the batch, so it cannot be held to 4. 0 = no cap (its best configuration here, see README).
PGQ_BATCH = 10
PGQ_MAX_TASKS = 0
ROW = "{:<46} {:>12} {:>14} {:>12} {:>10} {:>10}"  # workload, ledgerflow, the peers, ledgerflow / peer


# ----------------------------------------------------------------------------------------- helpers
def libpq(url: str) -> str:
    for prefix in ("postgresql+psycopg://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return url


def with_database(url: str, database: str) -> str:
    return libpq(make_url(libpq(url)).set(database=database).render_as_string(hide_password=False))


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (``/proc/<pid>/stat``); 0.0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pids_named(name: str) -> list[int]:
    """Every process of this machine whose command name is ``name`` (e.g. every PostgreSQL backend)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "comm").read_text().strip() == name:
                    out.append(int(d.name))
            except OSError:
                continue
    return out


def postgres_cpu_seconds() -> float:
    """CPU seconds used so far by every PostgreSQL process of the machine (run benchmarks on a quiet one)."""
    return sum(cpu_seconds(p) for p in pids_named("postgres"))


def children(pid: int) -> list[int]:
    """The process and its direct children (a gunicorn master and its workers)."""
    try:
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        kids = []
    return [pid, *(int(k) for k in kids)]


def closed_port() -> int:
    """A local TCP port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')} load {loadavg()}] {msg}", file=sys.stderr, flush=True)


@dataclass
class Proc:
    popen: subprocess.Popen
    log_path: Path

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


def spawn_logged(argv: list[str], env: dict[str, str], log_path: Path) -> Proc:
    """Start ``argv`` from the project root with its output in ``log_path``."""
    out = open(log_path, "w")  # lives as long as the process
    return Proc(subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT), log_path)


def terminate(proc: Proc, timeout: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``."""
    if proc.popen.poll() is None:
        proc.popen.send_signal(signal.SIGTERM)
        try:
            proc.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.popen.kill()
            proc.popen.wait()


def wait_ready(procs: Sequence[Proc], what: str, word: str = "ready", timeout: float = 60) -> None:
    """Wait until every process has printed ``word``; raise with its output if one exits or is late."""
    deadline = time.monotonic() + timeout
    for p in procs:
        while word not in p.output():
            if p.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start:\n{p.output()[-3000:]}")
            time.sleep(0.05)


def base_env() -> dict[str, str]:
    """This environment with the project on PYTHONPATH and quiet logs, for spawned processes."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["LOG_LEVEL"] = "WARNING"
    return env


def procrastinate_argv(bin_dir: Path, concurrency: int = SLOTS) -> list[str]:
    """A procrastinate worker of the peer app (``bench.peer``) on its queue."""
    return [
        str(bin_dir / "procrastinate"),
        "--log-level",
        "warning",
        "--app",
        "bench.peer.app",
        "worker",
        "--concurrency",
        str(concurrency),
        "--queues",
        "bench",
    ]


@contextmanager
def scratch_database(prefix: str, revision: str = "heads") -> Iterator[str]:
    """A fresh database on the server named by DATABASE_URL, migrated to ``revision``; yields its
    SQLAlchemy URL (``postgresql+psycopg://``) and drops it at the end (kept, and its name logged, when
    ``BENCH_KEEP_DATABASE=1``: to look into what a run left)."""
    server = make_url(libpq(os.environ["DATABASE_URL"]).replace("postgresql://", "postgresql+psycopg://", 1))
    db = f"{prefix}_{uuid.uuid4().hex[:6]}"
    admin = create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{db}"')
    try:
        url = server.set(database=db).render_as_string(hide_password=False)
        upgrade(url, revision)
        yield url
    finally:
        if os.environ.get("BENCH_KEEP_DATABASE") == "1":
            log(f"kept the database {db} (BENCH_KEEP_DATABASE=1)")
        else:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        admin.dispose()


@dataclass
class Config:
    quick: bool
    jobs: int
    procs: list[int]
    repeat: int
    lat_n: int
    lat_rate: float
    claim_sizes: list[int]
    claim_samples: int
    peers: list[str]
    workloads: set[str]
    vacuum: bool = True
    pgq_max_tasks: int = PGQ_MAX_TASKS


@dataclass
class Results:
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M:%S"))
    load: list[tuple[str, str]] = field(default_factory=list)
    throughput: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    latency: dict[str, dict[str, float]] = field(default_factory=dict)
    claim: dict[int, dict[str, float]] = field(default_factory=dict)
    # per system and process count, one (PostgreSQL, workers) CPU ms per job per throughput run
    cpu_per_job: dict[str, dict[int, list[tuple[float, float]]]] = field(default_factory=dict)
    starts: list[str] = field(default_factory=list)  # the table bench.starts printed
    workflows: list[str] = field(default_factory=list)  # the tables bench.workflows printed
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------- the bench
class Bench:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.uid = uuid.uuid4().hex[:8]
        self.server = libpq(os.environ["DATABASE_URL"])
        self.redis_url = os.environ.get("REDIS_URL") or None
        self.lf_db = f"lf_bench_{self.uid}"
        self.pq_db = f"lf_bench_{self.uid}_pq"
        self.lf_dsn = with_database(self.server, self.lf_db)
        self.pq_dsn = with_database(self.server, self.pq_db)
        self.pgq_db = f"lf_bench_{self.uid}_pgq"
        self.pgq_dsn = with_database(self.server, self.pgq_db)
        self.ns = f"lf-bench-{self.uid}"
        self.tmp = Path(tempfile.mkdtemp(prefix="lf-bench-"))
        self.procs: list[Proc] = []
        self.res = Results()
        self.bin = Path(sys.executable).parent

    # -- setup / teardown ------------------------------------------------------------------------
    def admin(self, sql: str) -> None:
        with psycopg.connect(with_database(self.server, "postgres"), autocommit=True) as conn:
            conn.execute(sql)

    def setup(self) -> None:
        dbs = [self.lf_db] + [db for peer, db in self.peer_dbs() if peer in self.cfg.peers]
        log(f"creating databases {', '.join(dbs)}; redis namespace {self.ns}")
        self.admin(f'CREATE DATABASE "{self.lf_db}"')
        # This process enqueues and publishes hints as an application would: point it at the bench.
        os.environ["DATABASE_URL"] = self.lf_dsn
        os.environ["LEDGERFLOW_REDIS_NAMESPACE"] = self.ns
        from app.settings import get_settings

        get_settings.cache_clear()
        upgrade(get_settings().database_url)
        if "procrastinate" in self.cfg.peers:
            self.admin(f'CREATE DATABASE "{self.pq_db}"')
            os.environ["BENCH_PQ_DSN"] = self.pq_dsn
            from bench.peer import app

            with app.open():
                app.schema_manager.apply_schema()
        if "pgqueuer" in self.cfg.peers:
            self.admin(f'CREATE DATABASE "{self.pgq_db}"')
            from bench import peer_pgq

            peer_pgq.install(self.pgq_dsn)

    def peer_dbs(self) -> list[tuple[str, str]]:
        return [("procrastinate", self.pq_db), ("pgqueuer", self.pgq_db)]

    def teardown(self) -> None:
        for p in self.procs:
            self.stop(p)
        try:
            from app.db import get_engine

            get_engine().dispose()
        except Exception:
            pass
        for db in (self.lf_db, self.pq_db, self.pgq_db):  # all named with this run's uid
            try:
                self.admin(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            except Exception as exc:
                log(f"could not drop {db}: {exc}")
        if self.redis_url:
            try:
                import redis

                client = redis.Redis.from_url(self.redis_url, socket_connect_timeout=2)
                for key in client.scan_iter(f"{self.ns}*"):
                    client.delete(key)
            except Exception as exc:
                log(f"could not clean redis namespace {self.ns}: {exc}")

    # -- processes -------------------------------------------------------------------------------
    def spawn(self, argv: list[str], env: dict[str, str], name: str) -> Proc:
        proc = spawn_logged(argv, env, self.tmp / f"{name}-{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    def stop(self, proc: Proc, timeout: float = 20.0) -> None:
        terminate(proc, timeout)
        if proc in self.procs:
            self.procs.remove(proc)

    def base_env(self) -> dict[str, str]:
        return base_env()

    def lf_env(self, redis_url: str | None) -> dict[str, str]:
        env = self.base_env()
        env.update(
            DATABASE_URL=self.lf_dsn,
            LEDGERFLOW_REDIS_NAMESPACE=self.ns,
            LEDGERFLOW_HANDLERS="bench.handlers",
        )
        if redis_url:
            env["REDIS_URL"] = redis_url
        else:
            env.pop("REDIS_URL", None)
        return env

    def lf_workers(self, n: int, redis_url: str | None) -> list[Proc]:
        exe = self.bin / "ledgerflow"
        argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "ledgerflow.cli"]
        procs = [
            self.spawn([*argv, "worker", "--pool", "advance"], self.lf_env(redis_url), "lf-worker")
            for _ in range(n)
        ]
        wait_ready(procs, "ledgerflow worker")
        return procs

    def pq_workers(self, n: int) -> list[Proc]:
        env = self.base_env()
        env["BENCH_PQ_DSN"] = self.pq_dsn
        procs = [self.spawn(procrastinate_argv(self.bin), env, "pq-worker") for _ in range(n)]
        deadline = time.monotonic() + 60
        while self.scalar(self.pq_dsn, "SELECT count(*) FROM procrastinate_workers") < n:
            for p in procs:
                if p.popen.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"procrastinate worker did not start:\n{p.output()}")
            time.sleep(0.05)
        time.sleep(1.0)  # registered first, LISTEN right after: give it a moment
        return procs

    def pgq_workers(self, n: int) -> list[Proc]:
        """N pgqueuer worker processes (``python -m bench.peer_pgq``, i.e. ``pgq run``'s code path); each
        prints ``ready`` once its LISTEN answers a health probe."""
        env = self.base_env()
        env["BENCH_PGQ_DSN"] = self.pgq_dsn
        argv = [sys.executable, "-m", "bench.peer_pgq", "--batch-size", str(PGQ_BATCH)]
        argv += ["--max-concurrent-tasks", str(self.cfg.pgq_max_tasks)]
        procs = [self.spawn(argv, env, "pgq-worker") for _ in range(n)]
        wait_ready(procs, "pgqueuer worker")
        return procs

    # -- sql -------------------------------------------------------------------------------------
    @staticmethod
    def execute(dsn: str, sql: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql)

    @staticmethod
    def scalar(dsn: str, sql: str, params: Any = None) -> Any:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute(sql, params).fetchone()[0]

    @staticmethod
    def rows(dsn: str, sql: str, params: Any = None) -> list[tuple]:
        with psycopg.connect(dsn, autocommit=True) as conn:
            return conn.execute(sql, params).fetchall()

    @staticmethod
    def _cpu(procs: list[Proc]) -> tuple[float, float]:
        """CPU seconds used so far by every PostgreSQL process of the machine and by ``procs``."""
        return postgres_cpu_seconds(), sum(cpu_seconds(p.popen.pid) for p in procs)

    def wait_count(
        self, dsn: str, sql: str, target: int, timeout: float, procs: list[Proc], vacuum: str | None = None
    ) -> None:
        """Wait until ``sql`` counts ``target``. With ``vacuum`` (tables), VACUUM them every
        VACUUM_EVERY seconds meanwhile, as autovacuum would (it may be off on the server).
        ``self.waited_cpu`` is then the CPU seconds (every PostgreSQL process of the machine, ``procs``)
        used while it waited: the vacuums and this loop's count queries are in the PostgreSQL figure."""
        pg0, w0 = self._cpu(procs)
        deadline = time.monotonic() + timeout
        stop = threading.Event()
        vacuumer = None
        if vacuum and self.cfg.vacuum:
            vacuumer = threading.Thread(target=self._vacuum_loop, args=(dsn, vacuum, stop), daemon=True)
            vacuumer.start()
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while True:
                    n = conn.execute(sql).fetchone()[0]
                    if n >= target:
                        pg1, w1 = self._cpu(procs)
                        self.waited_cpu = (pg1 - pg0, w1 - w0)
                        return
                    if time.monotonic() > deadline:
                        tails = "\n".join(p.output()[-3000:] for p in procs)
                        raise RuntimeError(f"timed out with {n}/{target} done\n{tails}")
                    time.sleep(0.25)
        finally:
            stop.set()
            if vacuumer is not None:
                vacuumer.join()

    @staticmethod
    def _vacuum_loop(dsn: str, tables: str, stop: threading.Event) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.wait(VACUUM_EVERY):
                conn.execute(f"VACUUM (ANALYZE) {tables}")

    # -- workload 1: throughput ------------------------------------------------------------------
    def lf_throughput(self, n_procs: int) -> float:
        from sqlalchemy import text

        from app.db import transaction
        from app.ledger.hints import publish_after_commit
        from app.ledger.states import DEFAULT_MAX_ATTEMPTS, JobType

        n = self.cfg.jobs
        self.execute(self.lf_dsn, f"TRUNCATE {LEDGER_TABLES} RESTART IDENTITY CASCADE")
        procs = self.lf_workers(n_procs, self.redis_url)
        time.sleep(0.5)
        with transaction() as conn:  # 20k jobs in one transaction, as enqueue() would write them
            conn.execute(
                text(
                    """INSERT INTO workflow_jobs (type, queue, payload, max_attempts, execution_timeout_ms,
                                               operation_key, trace_id)
                       SELECT 'delay_wake', :q, '{}'::jsonb, :ma, 600000, md5('op' || g), md5('tr' || g)
                       FROM generate_series(1, :n) g"""
                ),
                {"q": QUEUE, "ma": DEFAULT_MAX_ATTEMPTS[JobType.DELAY_WAKE], "n": n},
            )
            publish_after_commit(conn, [QUEUE])
        self.execute(self.lf_dsn, "ANALYZE workflow_jobs")  # see README: autovacuum may be off
        self.wait_count(
            self.lf_dsn,
            "SELECT count(*) FROM workflow_jobs WHERE status = 'succeeded'",
            n,
            60 + n / 20,
            procs,
            vacuum="workflow_jobs, workflow_job_executions",
        )
        count, secs, claims = self.rows(
            self.lf_dsn,
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(started_at)),"
            # the jobs of one claim share their attempt's start (the claiming statement's now())
            " count(DISTINCT (worker_id, started_at)) FROM workflow_job_executions",
        )[0]
        log(f"  ledgerflow: {count / max(claims, 1):.2f} jobs per claiming pass")
        for p in procs:
            self.stop(p)
        return count / float(secs)

    def pq_throughput(self, n_procs: int) -> float:
        n = self.cfg.jobs
        self.execute(self.pq_dsn, f"TRUNCATE {PEER_TABLES} RESTART IDENTITY CASCADE")
        procs = self.pq_workers(n_procs)
        with psycopg.connect(self.pq_dsn) as conn:  # one transaction, like batch_defer
            conn.execute(
                "INSERT INTO procrastinate_jobs (queue_name, task_name, args) "
                "SELECT 'bench', 'noop', '{}'::jsonb FROM generate_series(1, %s)",
                (n,),
            )
        self.execute(self.pq_dsn, "ANALYZE procrastinate_jobs")  # see README: autovacuum may be off
        self.wait_count(
            self.pq_dsn,
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
            n,
            60 + n / 20,
            procs,
            vacuum="procrastinate_jobs, procrastinate_events",
        )
        count, secs = self.rows(
            self.pq_dsn,
            """SELECT count(*) FILTER (WHERE type = 'succeeded'),
                      extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')
                                       - min(at) FILTER (WHERE type = 'started'))
               FROM procrastinate_events""",
        )[0]
        for p in procs:
            self.stop(p)
        return count / float(secs)

    def pgq_throughput(self, n_procs: int) -> float:
        """pgqueuer: jobs/s from its first ``picked`` log row to its last ``successful`` one (DB time)."""
        from bench import peer_pgq

        n = self.cfg.jobs
        self.execute(self.pgq_dsn, f"TRUNCATE {peer_pgq.TABLES} RESTART IDENTITY")
        procs = self.pgq_workers(n_procs)
        peer_pgq.enqueue_batch(self.pgq_dsn, n)  # one transaction: Queries.enqueue with lists
        self.execute(self.pgq_dsn, f"ANALYZE {peer_pgq.QUEUE_TABLE}")  # see README: autovacuum may be off
        self.wait_count(
            self.pgq_dsn,
            f"SELECT count(*) FROM {peer_pgq.LOG_TABLE} WHERE status = 'successful'",
            n,
            60 + n / 20,
            procs,
            vacuum=f"{peer_pgq.QUEUE_TABLE}, {peer_pgq.LOG_TABLE}",
        )
        count, secs = self.rows(
            self.pgq_dsn,
            f"""SELECT count(*) FILTER (WHERE status = 'successful'),
                       extract(epoch FROM max(created) FILTER (WHERE status = 'successful')
                                        - min(created) FILTER (WHERE status = 'picked'))
                FROM {peer_pgq.LOG_TABLE}""",
        )[0]
        for p in procs:
            self.stop(p)
        return count / float(secs)

    def throughput(self) -> None:
        systems: list[tuple[str, Callable[[int], float]]] = [("ledgerflow", self.lf_throughput)]
        if "procrastinate" in self.cfg.peers:
            systems.append(("procrastinate", self.pq_throughput))
        if "pgqueuer" in self.cfg.peers:
            systems.append(("pgqueuer", self.pgq_throughput))
        for rep in range(self.cfg.repeat):
            for name, fn in systems:
                for n_procs in self.cfg.procs:
                    log(
                        f"throughput {name}: {self.cfg.jobs} no-op jobs, {n_procs} process(es)"
                        f" (run {rep + 1})"
                    )
                    rate = fn(n_procs)
                    pg_ms, workers_ms = (s * 1000 / self.cfg.jobs for s in self.waited_cpu)
                    self.res.throughput.setdefault(name, {}).setdefault(n_procs, []).append(rate)
                    self.res.cpu_per_job.setdefault(name, {}).setdefault(n_procs, []).append(
                        (pg_ms, workers_ms)
                    )
                    self.res.load.append((f"throughput {name} x{n_procs}", loadavg()))
                    log(
                        f"  -> {rate:,.0f} jobs/s; CPU per job: PostgreSQL {pg_ms:.3f} ms, workers {workers_ms:.3f} ms"
                    )

    # -- workload 2: idle enqueue -> start latency -----------------------------------------------
    def _client(self, system: str, env: dict[str, str]) -> None:
        argv = [
            sys.executable,
            "-m",
            "bench.latency_client",
            system,
            "--n",
            str(self.cfg.lat_n),
            "--rate",
            str(self.cfg.lat_rate),
            "--warmup",
            "5",
        ]
        proc = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"latency client failed:\n{proc.stdout}\n{proc.stderr}")

    def lf_latency(self, redis_url: str | None) -> list[float]:
        total = self.cfg.lat_n + 5
        self.execute(self.lf_dsn, f"TRUNCATE {LEDGER_TABLES} RESTART IDENTITY CASCADE")
        procs = self.lf_workers(1, redis_url)
        time.sleep(1.0)
        self._client("ledger", self.lf_env(redis_url))
        self.wait_count(
            self.lf_dsn, "SELECT count(*) FROM workflow_jobs WHERE status = 'succeeded'", total, 30, procs
        )
        ms = [
            r[0]
            for r in self.rows(
                self.lf_dsn,
                """SELECT extract(epoch FROM e.started_at - j.created_at) * 1000
               FROM workflow_jobs j JOIN workflow_job_executions e ON e.job_id = j.id AND e.attempt = 1
               WHERE NOT (j.payload ->> 'warm')::boolean""",
            )
        ]
        for p in procs:
            self.stop(p)
        return [float(x) for x in ms]

    def pq_latency(self) -> list[float]:
        total = self.cfg.lat_n + 5
        self.execute(self.pq_dsn, f"TRUNCATE {PEER_TABLES} RESTART IDENTITY CASCADE")
        procs = self.pq_workers(1)
        env = self.base_env()
        env["BENCH_PQ_DSN"] = self.pq_dsn
        self._client("peer", env)
        self.wait_count(
            self.pq_dsn,
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
            total,
            30,
            procs,
        )
        ms = [
            r[0]
            for r in self.rows(
                self.pq_dsn,
                """SELECT extract(epoch FROM s.at - d.at) * 1000
               FROM procrastinate_jobs j
               JOIN procrastinate_events d ON d.job_id = j.id AND d.type = 'deferred'
               JOIN procrastinate_events s ON s.job_id = j.id AND s.type = 'started'
               WHERE NOT (j.args ->> 'warm')::boolean""",
            )
        ]
        for p in procs:
            self.stop(p)
        return [float(x) for x in ms]

    def pgq_latency(self) -> list[float]:
        """pgqueuer: its ``picked`` log row minus its ``queued`` log row per job (both DB time)."""
        from bench import peer_pgq

        warmup = 5
        total = self.cfg.lat_n + warmup
        self.execute(self.pgq_dsn, f"TRUNCATE {peer_pgq.TABLES} RESTART IDENTITY")
        procs = self.pgq_workers(1)
        env = self.base_env()
        env["BENCH_PGQ_DSN"] = self.pgq_dsn
        self._client("pgq", env)
        log_table = peer_pgq.LOG_TABLE
        self.wait_count(
            self.pgq_dsn,
            f"SELECT count(*) FROM {log_table} WHERE status = 'successful'",
            total,
            30,
            procs,
        )
        ms = [
            r[0]
            for r in self.rows(
                self.pgq_dsn,
                f"""SELECT extract(epoch FROM p.created - q.created) * 1000
                FROM {log_table} q JOIN {log_table} p ON p.job_id = q.job_id AND p.status = 'picked'
                WHERE q.status = 'queued'
                  AND q.job_id NOT IN (SELECT job_id FROM {log_table} WHERE status = 'queued'
                                       ORDER BY job_id LIMIT %s)""",
                (warmup,),
            )
        ]
        for p in procs:
            self.stop(p)
        return [float(x) for x in ms]

    def latency(self) -> None:
        def record(key: str, ms: list[float]) -> None:
            self.res.latency[key] = {
                "n": len(ms),
                "p50": percentile(ms, 50),
                "p90": percentile(ms, 90),
                "p99": percentile(ms, 99),
                "max": max(ms) if ms else float("nan"),
            }
            self.res.load.append((f"latency {key}", loadavg()))
            log(f"  -> p50 {percentile(ms, 50):.1f} ms, p99 {percentile(ms, 99):.1f} ms")

        n, rate = self.cfg.lat_n, self.cfg.lat_rate
        if self.redis_url:
            log(f"latency ledgerflow with hints: {n} jobs at ~{rate:g}/s, 1 worker process")
            record("ledgerflow_hints", self.lf_latency(self.redis_url))
        else:
            self.res.notes.append("REDIS_URL unset: the with-hints latency was not measured")
        port = closed_port()
        log(f"latency ledgerflow with Redis down (REDIS_URL -> closed port {port}): {n} jobs at ~{rate:g}/s")
        record("ledgerflow_redis_down", self.lf_latency(f"redis://127.0.0.1:{port}/0"))
        if "procrastinate" in self.cfg.peers:
            log(f"latency procrastinate (LISTEN/NOTIFY): {n} jobs at ~{rate:g}/s, 1 worker process")
            record("procrastinate", self.pq_latency())
        if "pgqueuer" in self.cfg.peers:
            log(f"latency pgqueuer (LISTEN/NOTIFY): {n} jobs at ~{rate:g}/s, 1 worker process")
            record("pgqueuer", self.pgq_latency())

    # -- workload 3: claim latency vs pending backlog --------------------------------------------
    def claim(self) -> None:
        from app.db import get_engine
        from bench.claim import RAW_CLAIM, explain_claim, time_claims

        engine = get_engine()
        self.execute(self.lf_dsn, f"TRUNCATE {LEDGER_TABLES} RESTART IDENTITY CASCADE")
        have = 0
        plans: dict[int, str] = {}
        for size in self.cfg.claim_sizes:
            t0 = time.monotonic()
            with psycopg.connect(self.lf_dsn, autocommit=True) as conn:
                conn.execute(
                    """INSERT INTO workflow_jobs (type, queue, payload, priority, run_at, max_attempts,
                                                  execution_timeout_ms, operation_key, trace_id)
                       SELECT 'delay_wake', %s, '{}'::jsonb, 0,
                              now() - (g %% 3600) * interval '1 second' - interval '1 second',
                              3, 600000, md5('op' || g), md5('tr' || g)
                       FROM generate_series(%s::int, %s::int) g""",
                    (QUEUE, have + 1, size),
                )
                conn.execute("VACUUM ANALYZE workflow_jobs")
            have = size
            log(f"claim latency: {size:,} pending rows (inserted in {time.monotonic() - t0:.1f} s)")
            samples = time_claims(engine, self.lf_dsn, self.cfg.claim_samples, raw=RAW_CLAIM)
            self.res.claim[size] = {
                "n": len(samples),
                "p50": percentile(samples, 50),
                "p90": percentile(samples, 90),
                "p99": percentile(samples, 99),
            }
            self.res.load.append((f"claim {size}", loadavg()))
            plans[size] = explain_claim(self.lf_dsn)
            log(f"  -> p50 {percentile(samples, 50):.3f} ms, p99 {percentile(samples, 99):.3f} ms")
        self.plans = plans

    # -- workload 4: workflow starts through the web process ---------------------------------------
    def starts(self) -> None:
        """``python -m bench.starts`` (its own database and gunicorn servers, beside a bare Flask endpoint on
        the same settings); its table joins the report."""
        argv = [
            sys.executable,
            "-m",
            "bench.starts",
            "--seconds",
            "4" if self.cfg.quick else "8",
            "--clients",
            "1,8" if self.cfg.quick else "1,2,8",
        ]
        log(f"workflow starts: {' '.join(argv[1:])}")
        env = base_env() | {"DATABASE_URL": self.server}
        out = subprocess.run(
            argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
        )
        if out.returncode != 0:
            self.res.notes.append(f"bench.starts failed ({out.returncode}): {out.stderr.strip()[-500:]}")
            return
        self.res.starts = [line for line in out.stdout.splitlines() if line.strip()]
        self.res.load.append(("starts", loadavg()))

    # -- workload 5: workflows end to end, beside DBOS and Absurd ----------------------------------
    def workflows(self) -> None:
        """``python -m bench.workflows`` (its own scratch databases and processes per engine and shape;
        its progress goes to stderr as it runs); its tables join the report."""
        argv = [sys.executable, "-m", "bench.workflows", "--shape", "all"]
        if self.cfg.quick:
            argv += ["--n", "30", "--probe", "3"]
        if not self.cfg.peers:
            argv += ["--engines", "ledgerflow"]
        elif not self.cfg.quick:
            argv += ["--engines", "all"]
        log(f"workflows: {' '.join(argv[1:])}")
        env = base_env() | {"DATABASE_URL": self.server}
        env.pop("LEDGERFLOW_REDIS_NAMESPACE", None)
        out = subprocess.run(
            argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True, timeout=7200, check=False
        )
        if out.returncode != 0:
            self.res.notes.append(f"bench.workflows failed ({out.returncode}): see its output on stderr")
            return
        self.res.workflows = out.stdout.rstrip().splitlines()
        self.res.load.append(("workflows", loadavg()))

    # -- report ----------------------------------------------------------------------------------
    @staticmethod
    def _row(label: str, lf: float, peers: dict[str, float | None], fmt: str) -> str:
        """One table row: ledgerflow, one cell per peer (in PEERS order), then ledgerflow / peer each."""
        cells = [fmt.format(v) if v is not None else "-" for v in peers.values()]
        ratios = [f"{lf / v:.2f}x" if v else "-" for v in peers.values()]
        return ROW.format(label, fmt.format(lf), *cells, *ratios)

    def _median_cpu(self, system: str, n_procs: int, i: int) -> float | None:
        runs = self.res.cpu_per_job.get(system, {}).get(n_procs)
        return statistics.median(r[i] for r in runs) if runs else None

    def report(self) -> str:
        r, cfg = self.res, self.cfg
        lines: list[str] = []
        best = f"best of {cfg.repeat} runs" if cfg.repeat > 1 else "one run"
        lines.append(
            f"Ledgerflow benchmark  ({'--quick' if cfg.quick else 'full'}; {r.started}; "
            f"{os.cpu_count()} CPUs; load at start {r.load[0][1] if r.load else loadavg()})"
        )
        lines.append(ROW.format("workload", "ledgerflow", *PEERS, "vs procr.", "vs pgq"))
        lines.append("-" * len(lines[-1]))
        peers = [p for p in PEERS if p in cfg.peers]
        lf_t = r.throughput.get("ledgerflow", {})
        for n_procs in cfg.procs if r.throughput else []:
            a = max(lf_t.get(n_procs, [float("nan")]))
            rates: dict[str, float | None] = {
                p: max(r.throughput[p][n_procs]) if n_procs in r.throughput.get(p, {}) else None
                for p in PEERS
            }
            lines.append(self._row(f"no-op throughput, {n_procs} proc (jobs/s)", a, rates, "{:,.0f}"))
            for i, what in ((0, "PostgreSQL"), (1, "worker")):
                lf_cpu = self._median_cpu("ledgerflow", n_procs, i)
                cpu = {p: self._median_cpu(p, n_procs, i) for p in PEERS}
                if lf_cpu is not None:
                    lines.append(
                        self._row(f"  {what} CPU per job, {n_procs} proc (ms)", lf_cpu, cpu, "{:.3f}")
                    )
        if r.throughput:
            lines.append(
                f"  ({cfg.jobs:,} jobs inserted in one transaction; first pick-up -> last completion by DB "
                f"timestamps; {best}; vs = ledgerflow / peer, higher is better;\n"
                f"   ledgerflow and procrastinate {SLOTS} slots per process; pgqueuer dequeue batch {PGQ_BATCH}, "
                f"{f'at most {cfg.pgq_max_tasks} tasks' if cfg.pgq_max_tasks else 'no task cap'} per process;\n"
                "   CPU per job: median of the runs, from the insert to the last completion, every PostgreSQL "
                "process of the machine (the 5 s vacuums included) and the worker processes; lower is better)"
            )
        lat = r.latency
        for key, label in (("ledgerflow_hints", "with Redis hints"), ("ledgerflow_redis_down", "Redis down")):
            if key not in lat:
                continue
            for q in ("p50", "p99"):
                a = lat[key][q]
                vals = {p: lat[p][q] if p in lat and key == "ledgerflow_hints" else None for p in PEERS}
                lines.append(self._row(f"idle enqueue->start {q}, {label} (ms)", a, vals, "{:,.1f}"))
        if lat:
            lines.append(
                f"  ({cfg.lat_n} single jobs at ~{cfg.lat_rate:g}/s (not 1/s, to keep the run short), "
                "1 worker process; start - creation by DB time; peers wake by LISTEN/NOTIFY; "
                "vs = ledgerflow / peer, lower is better)"
            )
        if r.claim:
            base = r.claim[min(r.claim)]["p50"]
            for size, c in sorted(r.claim.items()):
                lines.append(
                    ROW.format(
                        f"claim 4 jobs p50, {size:,} pending (ms)",
                        f"{c['p50']:.3f}",
                        *("-" for _ in PEERS),
                        f"{c['p50'] / base:.2f}x",
                        "",
                    ).rstrip()
                )
            lines.append(
                f"  (ledgerflow only: transitions.claim in a rolled-back transaction, {cfg.claim_samples} "
                f"samples; the ratio here = p50 / p50 at {min(r.claim):,})"
            )
        if r.starts:
            lines.append(
                "workflow starts, POST /v1/workflows on the Procfile's gunicorn settings (bench.starts):"
            )
            lines.extend("  " + line for line in r.starts)
        if r.workflows:
            lines.extend(r.workflows)
        if not peers:
            lines.append("  (no peer was run: --no-peer or an empty --peers)")
        lines.append(
            "load average (1/5/15 min) during the runs: " + "; ".join(f"{k}: {v}" for k, v in r.load)
        )
        lines.extend(f"note: {n}" for n in r.notes)
        return "\n".join(lines)

    def save(self, table: str) -> Path:
        out = ROOT / "bench" / "results"
        out.mkdir(exist_ok=True)
        path = out / f"bench-{time.strftime('%Y%m%d-%H%M%S')}{'-quick' if self.cfg.quick else ''}.json"
        doc = {
            "config": self.cfg.__dict__ | {"workloads": sorted(self.cfg.workloads)},
            "results": {
                "started": self.res.started,
                "load": self.res.load,
                "throughput": self.res.throughput,
                "latency": self.res.latency,
                "claim": self.res.claim,
                "cpu_per_job": self.res.cpu_per_job,
                "starts": self.res.starts,
                "workflows": self.res.workflows,
                "notes": self.res.notes,
            },
            "claim_plans": getattr(self, "plans", {}),
            "table": table,
        }
        path.write_text(json.dumps(doc, indent=2, default=str))
        return path


def parse(argv: list[str] | None) -> Config:
    p = argparse.ArgumentParser(
        prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a small smoke run (about 2 minutes)")
    p.add_argument(
        "--only",
        action="append",
        choices=["throughput", "latency", "claim", "starts", "workflows"],
        help="run only these workloads (repeatable)",
    )
    p.add_argument("--no-peer", action="store_true", help="skip both peers (procrastinate and pgqueuer)")
    p.add_argument(
        "--peers",
        default=",".join(PEERS),
        help="comma-separated peers to run (default: procrastinate,pgqueuer)",
    )
    p.add_argument(
        "--pgq-max-tasks",
        type=int,
        default=PGQ_MAX_TASKS,
        help=f"pgqueuer --max-concurrent-tasks per process (0 = no cap; >= {2 * PGQ_BATCH} otherwise)",
    )
    p.add_argument("--repeat", type=int, default=None, help="throughput runs per point (best is reported)")
    p.add_argument("--jobs", type=int, default=None, help="jobs per throughput run")
    p.add_argument("--procs", default=None, help="comma-separated worker process counts, e.g. 1,2,4")
    p.add_argument("--latency-jobs", type=int, default=None)
    p.add_argument("--latency-rate", type=float, default=None, help="jobs per second in the latency runs")
    p.add_argument("--claim-sizes", default=None, help="comma-separated pending row counts")
    p.add_argument("--claim-samples", type=int, default=None)
    p.add_argument(
        "--no-vacuum", action="store_true", help="do not VACUUM the job tables during throughput runs"
    )
    a = p.parse_args(argv)
    q = a.quick
    peers = [x.strip() for x in a.peers.split(",") if x.strip()]
    if unknown := set(peers) - set(PEERS):
        p.error(f"unknown peer(s) {', '.join(sorted(unknown))}; choose from {', '.join(PEERS)}")
    if a.pgq_max_tasks and a.pgq_max_tasks < 2 * PGQ_BATCH:
        p.error(f"--pgq-max-tasks must be 0 or at least {2 * PGQ_BATCH} (pgqueuer: twice the batch size)")
    return Config(
        quick=q,
        jobs=a.jobs or (2_000 if q else 20_000),
        procs=[int(x) for x in a.procs.split(",")] if a.procs else ([1, 4] if q else [1, 2, 4]),
        repeat=a.repeat or (1 if q else 2),
        lat_n=a.latency_jobs or (30 if q else 200),
        lat_rate=a.latency_rate or (10.0 if q else 5.0),
        claim_sizes=[int(x) for x in a.claim_sizes.split(",")]
        if a.claim_sizes
        else ([10_000, 100_000] if q else [10_000, 100_000, 1_000_000]),
        claim_samples=a.claim_samples or (100 if q else 400),
        peers=[] if a.no_peer else peers,
        workloads=set(a.only or ["throughput", "latency", "claim", "starts", "workflows"]),
        vacuum=not a.no_vacuum,
        pgq_max_tasks=a.pgq_max_tasks,
    )


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # run the cleanup (workers, databases, Redis keys)


def main(argv: list[str] | None = None) -> None:
    cfg = parse(argv)
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    if not os.environ.get("DATABASE_URL"):
        sys.exit("DATABASE_URL is not set: run `make bench` (it starts embedded services) or export it")
    random.seed()
    bench = Bench(cfg)
    t0 = time.monotonic()
    try:
        bench.setup()
        bench.res.load.append(("start", loadavg()))
        if "throughput" in cfg.workloads:
            bench.throughput()
        if "latency" in cfg.workloads:
            bench.latency()
        if "claim" in cfg.workloads:
            bench.claim()
        if "starts" in cfg.workloads:
            bench.starts()
        if "workflows" in cfg.workloads:
            bench.workflows()
    finally:
        bench.teardown()
    table = bench.report()
    path = bench.save(table)
    print(table)
    print(f"(total {time.monotonic() - t0:.0f} s; raw numbers and claim plans in {path.relative_to(ROOT)})")
