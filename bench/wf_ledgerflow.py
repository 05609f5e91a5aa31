"""Ledgerflow in the workflow benchmark (``bench/workflows.py``): the Procfile's real processes over a
scratch database, workflows started by the SDK's ``Client`` over HTTP, tasks served by the SDK's own
``TaskWorker``, exactly as a user runs them.

- ``web``: gunicorn with ``gunicorn.conf.py`` and 2 workers (the Procfile's command, bound to a free
  local port); ``worker-advance`` and ``worker-outbound``: ``ledgerflow worker --pool advance|outbound``.
  Default settings: the rate limit (``LEDGERFLOW_RATE_LIMIT``) is the default one unless
  ``rate_limit=False`` (``off``), metrics on with a fresh shared ``PROMETHEUS_MULTIPROC_DIR`` (what
  ``ledgerflow dev`` sets), Redis hints in a private namespace; logs at WARNING.
- Two credentials: one for the 4 client threads (definitions + starts), one for the task workers.
- Task workers: ``TaskWorker(client, concurrency=4)`` when the SDK has that parameter, otherwise 4
  threads each running a ``TaskWorker`` (one task at a time each); ``wait_seconds`` stays the default.
- The ``fanout`` shape: the first task outputs ``{"items": [0..99]}``, the ``for_each`` step runs one
  task per element on its own queue (``bench_wf_elements``, served by its own
  ``TaskWorker(concurrency=4)``: 4 elements at once, as the peers' element workers), every element of
  a workflow open at once (``max_parallel`` 100, as the peers enqueue or spawn all 100 before awaiting).
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import redis
from sqlalchemy import create_engine

from app.auth import Scope, create_credential
from app.db import transaction
from bench.run import (
    Proc,
    base_env,
    children,
    closed_port,
    libpq,
    log,
    scratch_database,
    spawn_logged,
    terminate,
    wait_ready,
)
from bench.wf_common import (
    ELEMENT_QUEUE,
    FANOUT_PARALLEL,
    QUEUE,
    TIMER_SECONDS,
    Monitor,
    RunResult,
    Shape,
    Started,
    mapped_value,
    measure,
    padded,
    start_all,
    wait_count,
)
from ledgerflow.client import Client, Task, TaskWorker

ROOT = Path(__file__).resolve().parent.parent
WORKER_SLOTS = 4
ADVANCE_WORKERS = int(os.environ.get("BENCH_ADVANCE_WORKERS", "1"))
if ADVANCE_WORKERS < 1:  # without one no timer would fire: the run would only time out
    raise SystemExit("BENCH_ADVANCE_WORKERS must be at least 1")


def definition(shape: Shape) -> dict:
    """The shape as a Ledgerflow definition: TASK steps on one queue, each after the previous step; a
    fan-out is a TASK step with ``for_each`` over the first step's ``output.items``, its elements on
    their own queue, ``FANOUT_PARALLEL`` of a workflow's elements open at once."""
    steps: list[dict] = []
    last_task = ""
    for kind, key in shape.plan():
        step: dict[str, Any]
        if kind == "task":
            step = {"key": key, "kind": "TASK", "queue": QUEUE}
        elif kind == "fanout":
            step = {
                "key": key,
                "kind": "TASK",
                "queue": ELEMENT_QUEUE,
                "for_each": {
                    "items": f"$.steps.{steps[-1]['key']}.output.items",
                    "max_items": shape.fanout,
                    "max_parallel": FANOUT_PARALLEL,
                },
            }
        else:
            step = {"key": key, "kind": "TIMER", "delay_seconds": int(TIMER_SECONDS)}
        if steps:
            step["after"] = [steps[-1]["key"]]
        if shape.mapping and kind == "task":
            if last_task:
                step["input"] = {"x": f"$.steps.{last_task}.output.value"}
            last_task = key
        steps.append(step)
    return {"version": "v1", "input_schema": {}, "deadline_seconds": 3600, "steps": steps}


def worker_has_concurrency() -> bool:
    """Does the SDK's TaskWorker take ``concurrency=N``?"""
    return "concurrency" in inspect.signature(TaskWorker).parameters


class Answers:
    """The answers of a group of clients by status code (the SDK retries 429s itself: this is where they
    show), counted by ``CountingClient``, which the SDK's own default connections serve (a transport given
    to ``Client`` would send through httpx instead: ~0.7 ms more of the client's CPU per request)."""

    def __init__(self) -> None:
        self.status: dict[int, int] = {}
        self._lock = threading.Lock()

    def count(self, status: int) -> None:
        with self._lock:
            self.status[status] = self.status.get(status, 0) + 1

    def client(self, base: str, token: str) -> Client:
        return CountingClient(base, token, answers=self)


class CountingClient(Client):
    """``Client`` whose every answer is counted in ``answers`` (retried ones too)."""

    def __init__(self, base: str, token: str, *, answers: Answers) -> None:
        super().__init__(base, token)
        self._answers = answers

    def _send(self, *args: Any, **kwargs: Any) -> Any:
        resp = super()._send(*args, **kwargs)
        self._answers.count(resp.status_code)
        return resp


class Workers:
    """The task workers of the run, in threads of this process; ``entered[(workflow_id, step_key)]``
    is the wall-clock time each task function was entered (for the step hop). Each queue of ``queues``
    gets its own ``WORKER_SLOTS``; with ``items``, the first step's task outputs ``{"items": [0, ...]}``
    (the array a fan-out runs over)."""

    def __init__(
        self,
        base: str,
        token: str,
        answers: Answers,
        queues: tuple[str, ...] = (QUEUE,),
        items: int = 0,
        mapping: bool = False,
    ) -> None:
        self.entered: dict[tuple[str, str], float] = {}
        self.items = items
        self.mapping = mapping
        self.unmapped = 0  # mapping shape: tasks after the first whose input x was not the previous value
        self.clients: list[Client] = []
        self.workers: list[TaskWorker] = []
        self.threads: list[threading.Thread] = []
        self.failure: list[BaseException] = []
        self.concurrency = worker_has_concurrency()
        n_workers = 1 if self.concurrency else WORKER_SLOTS
        for queue in queues:
            for _ in range(n_workers):
                client = answers.client(base, token)
                kwargs = {"concurrency": WORKER_SLOTS} if self.concurrency else {}
                worker = TaskWorker(client, **kwargs)
                worker.register(queue, self._task)
                self.clients.append(client)
                self.workers.append(worker)

    def _task(self, task: Task) -> dict:
        self.entered[(task.workflow_id, task.step_key)] = time.time()
        if self.items and task.step_key == "s1":
            return {"items": list(range(self.items))}
        if not self.mapping:
            return padded({"ok": True})
        x = task.input.get("x") if isinstance(task.input, dict) else None
        if task.step_key != "s1" and not isinstance(x, int):
            self.unmapped += 1
        return mapped_value(x)

    def start(self) -> None:
        def loop(w: TaskWorker) -> None:
            try:
                w.run()
            except BaseException as exc:  # reported by stop()
                self.failure.append(exc)

        for w in self.workers:
            t = threading.Thread(target=loop, args=(w,), name="bench-task-worker", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self) -> None:
        for w in self.workers:
            w.stop()
        for t in self.threads:
            t.join(30)
        for c in self.clients:
            c.close()
        if self.failure:
            raise RuntimeError(f"a task worker stopped: {self.failure[0]!r}")


def starts(base: str, token: str, def_id: str, n: int, answers: Answers) -> Started:
    """``n`` workflows started through the SDK's Client (see wf_common.start_all)."""
    return start_all(
        n,
        lambda: answers.client(base, token),
        lambda c, i: c.start_workflow(def_id, "v1", padded({"i": i})).instance.id,
        lambda c: c.close(),
    )


DONE_SQL = "SELECT count(*) FROM workflow_instances WHERE id = ANY(%s) AND state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"


def done_times(mon: Monitor, ids: list[str]) -> dict[str, tuple[float, str]]:
    return {
        r[0]: (float(r[1]) if r[1] is not None else float("nan"), r[2])
        for r in mon.rows(
            "SELECT id, extract(epoch FROM completed_at), state FROM workflow_instances WHERE id = ANY(%s)",
            (ids,),
        )
    }


def timer_lateness(mon: Monitor, ids: list[str]) -> list[float]:
    """Fire time minus due time of each TIMER, in ms: the ledger's own record of the ``delay_wake``
    job's first attempt (``workflow_job_executions.started_at - due_at``, the job's ``run_at``); if no
    such rows exist, the wait's ``resolved_at - deadline_at``."""
    rows = mon.rows(
        """SELECT extract(epoch FROM e.started_at - e.due_at) * 1000
           FROM workflow_jobs j JOIN workflow_job_executions e ON e.job_id = j.id
           WHERE j.type = 'delay_wake' AND j.payload->>'wake' = 'timer' AND e.attempt = 1
             AND j.instance_id = ANY(%s)""",
        (ids,),
    )
    if not rows:
        rows = mon.rows(
            """SELECT extract(epoch FROM resolved_at - deadline_at) * 1000 FROM workflow_waits
               WHERE kind = 'TIMER' AND resolved_at IS NOT NULL AND instance_id = ANY(%s)""",
            (ids,),
        )
    return [float(r[0]) for r in rows]


def step_hops(
    mon: Monitor, ids: list[str], shape: Shape, entered: dict[tuple[str, str], float]
) -> list[float]:
    """From a task's completion (``workflow_tasks.completed_at``: ``now()`` of the completing
    transaction) to the next TASK step's task function being entered in the worker, in ms, for each
    pair of consecutive TASK steps (none across a TIMER)."""
    done = {
        (r[0], r[1]): float(r[2])
        for r in mon.rows(
            "SELECT instance_id, step_key, extract(epoch FROM completed_at) FROM workflow_tasks "
            "WHERE instance_id = ANY(%s) AND completed_at IS NOT NULL",
            (ids,),
        )
    }
    plan = shape.plan()
    pairs = [(a[1], b[1]) for a, b in zip(plan, plan[1:], strict=False) if a[0] == b[0] == "task"]
    out = []
    for wf in ids:
        for prev, nxt in pairs:
            if (wf, prev) in done and (wf, nxt) in entered:
                out.append((entered[(wf, nxt)] - done[(wf, prev)]) * 1000)
    return out


def serve(env: dict[str, str], logs: Path) -> tuple[list[Proc], str]:
    """The Procfile's web, worker-advance and worker-outbound; returns them and the web's base URL."""
    port = closed_port()
    gunicorn = str(Path(sys.executable).with_name("gunicorn"))
    exe = Path(sys.executable).with_name("ledgerflow")
    lf = [str(exe)] if exe.exists() else [sys.executable, "-m", "ledgerflow.cli"]
    web = spawn_logged(
        [
            gunicorn,
            "--config",
            "gunicorn.conf.py",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--no-control-socket",
            "web:create_app()",
        ],
        env,
        logs / "web.log",
    )
    # BENCH_ADVANCE_WORKERS: how many worker-advance processes (default 1, the Procfile's; more is how an
    # operator scales the pool, the seed's 4 slots per process each)
    pools = ["advance"] * ADVANCE_WORKERS + ["outbound"]
    workers = [
        spawn_logged([*lf, "worker", "--pool", pool], env, logs / f"worker-{pool}-{k}.log")
        for k, pool in enumerate(pools)
    ]
    procs = [web, *workers]
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if web.popen.poll() is not None or time.monotonic() > deadline:
            for p in procs:
                terminate(p)
            raise RuntimeError(f"the web process did not start:\n{web.output()[-3000:]}")
        time.sleep(0.2)
    wait_ready(workers, "ledgerflow worker", timeout=90)
    return procs, base


def run_ledgerflow(
    shape: Shape,
    n: int,
    *,
    warmup: int,
    probe: int,
    rate_limit: bool,
    counts_only: bool = False,
    label: str = "ledgerflow",
    idle: float = 0.0,
) -> RunResult:
    """One Ledgerflow run of ``n`` workflows of ``shape`` (see the module docstring and wf_common);
    ``n = 0`` with ``idle`` seconds: an empty window, what the engine writes with no workflow."""
    res = RunResult(engine=label, shape=shape.name, n=n)
    uid = uuid.uuid4().hex[:6]
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"lf-bench-wf-{uid}"
    (tmp / "prom").mkdir(parents=True)
    redis_url = os.environ.get("REDIS_URL") or None
    ns = f"lf-bench-wf-{uid}"
    logging.getLogger("ledgerflow").setLevel(logging.WARNING)  # no INFO line per task (as LOG_LEVEL below)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING)
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, tmp, ignore_errors=True)
        url = stack.enter_context(scratch_database("lf_bench_wf"))
        dsn = libpq(url)
        engine = create_engine(url)
        with transaction(engine) as conn:
            client_token = create_credential(
                conn,
                namespace=ns,
                name="bench-clients",
                scopes=[
                    Scope.DEFINITIONS_PUBLISH,
                    Scope.DEFINITIONS_READ,
                    Scope.WORKFLOWS_START,
                    Scope.WORKFLOWS_READ,
                    Scope.TASKS_SUBMIT,
                ],
            ).token
            worker_token = create_credential(
                conn, namespace=ns, name="bench-workers", scopes=[Scope.TASKS_WORK]
            ).token
        engine.dispose()
        env = base_env() | {
            "DATABASE_URL": dsn,
            "LEDGERFLOW_REDIS_NAMESPACE": ns,
            "PROMETHEUS_MULTIPROC_DIR": str(tmp / "prom"),
        }
        env.pop("LEDGERFLOW_HANDLERS", None)
        env.pop("LEDGERFLOW_RATE_LIMIT", None)
        if not rate_limit:
            env["LEDGERFLOW_RATE_LIMIT"] = "off"
        if redis_url:
            env["REDIS_URL"] = redis_url
        procs, base = serve(env, tmp)
        stack.callback(lambda: [terminate(p) for p in procs])
        if redis_url:
            stack.callback(_clean_redis, redis_url, ns)
        mon = Monitor(dsn)
        stack.callback(mon.close)
        admin = Client(base, client_token)
        def_id = admin.ensure_definition(f"bench-{shape.name}", definition(shape))["id"]
        admin.close()
        starts_t, workers_t = Answers(), Answers()
        queues = (QUEUE, ELEMENT_QUEUE) if shape.fanout else (QUEUE,)
        workers = Workers(base, worker_token, workers_t, queues, items=shape.fanout, mapping=shape.mapping)
        workers.start()
        stopped = False

        def stop_all() -> None:
            """Every process and connection of the engine, quickly (what runs meanwhile is counted): the
            task workers are told to stop, the web process gets gunicorn's quick shutdown (SIGINT: the
            waiting long polls end at once instead of after their 10 s), then the pools get SIGTERM."""
            nonlocal stopped
            if stopped:
                return
            stopped = True
            for w in workers.workers:
                w.stop()
            quiet = logging.getLogger("ledgerflow.worker")
            level = quiet.level
            quiet.setLevel(logging.ERROR)  # "cannot reach the server" while it shuts down is expected
            stack.callback(quiet.setLevel, level)
            web = procs[0]
            if web.popen.poll() is None:
                web.popen.send_signal(signal.SIGINT)
            try:
                workers.stop()
            finally:
                for p in procs:
                    terminate(p)

        stack.callback(stop_all)
        timeout = 120 + n * shape.units * 0.5

        def probe_then_reset() -> None:
            if probe and not counts_only:
                log(f"{label} {shape.name}: idle probe, {probe} workflows one at a time")
                idle_probe(res, mon, base, client_token, def_id, shape, probe, workers, starts_t)
            starts_t.status.clear()
            workers_t.status.clear()

        started = measure(
            res,
            mon,
            start=lambda k: starts(base, client_token, def_id, k, starts_t),
            done_sql=DONE_SQL,
            timeout=timeout,
            stop=stop_all,
            engine_pids=lambda: [pid for p in procs for pid in children(p.popen.pid)],
            warmup=warmup,
            before_settle=probe_then_reset,
            idle=idle,
            what=f" (task workers: {'TaskWorker(concurrency=4)' if workers.concurrency else '4 threads x TaskWorker'}; "
            f"rate limit {'default' if rate_limit else 'off'})",
        )
        ids = [s[0] for s in started]
        res.http_429 = starts_t.status.get(429, 0) + workers_t.status.get(429, 0)
        res.http_requests = sum(starts_t.status.values()) + sum(workers_t.status.values())
        if res.http_429:
            res.notes.append(
                f"429 answers (retried by the SDK): {starts_t.status.get(429, 0)} to starts, "
                f"{workers_t.status.get(429, 0)} to the task workers"
            )
        if workers.unmapped:
            res.notes.append(f"{workers.unmapped} tasks did not get the previous task's value as input")
        if ids:
            res.record(started, done_times(mon, ids), ok="SUCCEEDED")
            if shape.timer:
                res.timer_late_ms = timer_lateness(mon, ids)
    return res


def idle_probe(
    res: RunResult,
    mon: Monitor,
    base: str,
    token: str,
    def_id: str,
    shape: Shape,
    k: int,
    workers: Workers,
    answers: Answers,
) -> None:
    """``k`` workflows one at a time on the otherwise idle engine (every task worker waits in a long
    poll): the step hop (target 2), timer lateness (target 1) and start -> done latency."""
    ids: list[str] = []
    latency: list[float] = []
    with answers.client(base, token) as c:
        for i in range(k):
            time.sleep(0.3)  # idle: the workers are back in their long polls
            t0 = time.time()
            wid = c.start_workflow(def_id, "v1", {"probe": i}).instance.id
            wait_count(mon, DONE_SQL, [wid], 60 + 10 * shape.units, every=0.005)
            ids.append(wid)
            latency.append((done_times(mon, [wid])[wid][0] - t0) * 1000)
    res.probe_n = k
    res.probe_latency_ms = latency
    res.probe_hop_ms = step_hops(mon, ids, shape, workers.entered)
    if shape.timer:
        res.probe_timer_late_ms = timer_lateness(mon, ids)


def _clean_redis(redis_url: str, ns: str) -> None:
    try:
        client = redis.Redis.from_url(redis_url, socket_connect_timeout=2)
        for key in client.scan_iter(f"{ns}*"):
            client.delete(key)
    except Exception as exc:
        log(f"could not clean redis namespace {ns}: {exc}")
