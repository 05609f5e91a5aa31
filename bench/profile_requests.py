"""CPU per API request of the web app, measured in-process: the real app (``web.create_app``) through
Flask's test client on a real PostgreSQL and Redis, a TASK -> TASK workflow at a time as ``TaskWorker``
runs it (start, claim, then each batch completion claims for the slot it freed: a's completion claims b,
b's claims nothing), without gunicorn and without HTTP.

    PYTHONPATH=. .venv/bin/python -m bench.profile_requests [--n 400] [--warmup 40] [--profile]
        [--top 25] [--sort tottime] [--kinds start,claim,complete]

``DATABASE_URL`` names the server (a scratch database is created, migrated and dropped); ``REDIS_URL``
is used as the web process would (the rate limiter; without it the limiter keeps its windows in memory).
The run uses ``bench.starts``' settings (log level WARNING, ``LEDGERFLOW_METRICS=0``, a rate limit one
credential does not reach) unless the environment sets them.

Prints, per request kind, the median and mean CPU of this thread per request (``time.thread_time``: no
network wait, little noise from other processes on a shared machine), the wall time, and the SQL
statements of one steady-state request (psycopg cursor executions, as ``bench.starts`` counts them).
With ``--profile`` the same loop runs once more under cProfile, one profile per kind, and prints each
kind's ``--top`` functions (by ``--sort``: tottime or cumulative). Numbers, not assertions; not a test."""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import signal
import statistics
import sys
import sysconfig
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from actors.handler_modules import BUILTIN_HANDLER_MODULES
from app.ids import new_node_id
from app.ledger import handlers
from app.ledger.context import JobContext
from app.ledger.pool import LedgerPool
from app.ledger.states import Pool
from app.sql import COMMIT, QUERIES
from bench.run import scratch_database

KINDS = ("start", "claim", "complete", "timer")
QUEUE = "bench.prof"
SHAPES = {
    "task-task": [
        {"key": "a", "kind": "TASK", "queue": QUEUE},
        {"key": "b", "kind": "TASK", "queue": QUEUE, "after": ["a"]},
    ],
    # a TIMER of 0 s: its delay_wake job is due when a's completion commits, so the loop runs it at once
    "task-timer-task": [
        {"key": "a", "kind": "TASK", "queue": QUEUE},
        {"key": "t", "kind": "TIMER", "delay_seconds": 0, "after": ["a"]},
        {"key": "b", "kind": "TASK", "queue": QUEUE, "after": ["t"]},
    ],
    # bench.workflows' mapping shape: b's input maps a's output (each task outputs {"ok": true, "value": 1})
    "mapping": [
        {"key": "a", "kind": "TASK", "queue": QUEUE},
        {
            "key": "b",
            "kind": "TASK",
            "queue": QUEUE,
            "after": ["a"],
            "input": {"x": "$.steps.a.output.value"},
        },
    ],
}


class Session:
    """The app, a client credential (definitions and starts) and a task worker credential."""

    def __init__(self, url: str, shape: str) -> None:
        from app.auth import Scope, create_credential
        from app.db import get_engine, transaction
        from app.settings import get_settings
        from web import create_app

        os.environ["DATABASE_URL"] = url
        get_settings.cache_clear()
        ns = "prof-" + uuid.uuid4().hex[:6]
        with transaction(get_engine()) as conn:
            client = create_credential(
                conn,
                namespace=ns,
                name="client",
                scopes=[
                    Scope.DEFINITIONS_PUBLISH,
                    Scope.DEFINITIONS_READ,
                    Scope.WORKFLOWS_START,
                    Scope.WORKFLOWS_READ,
                    Scope.TASKS_SUBMIT,
                ],
            )
            worker = create_credential(conn, namespace=ns, name="worker", scopes=[Scope.TASKS_WORK])
        self.client_auth = {"Authorization": f"Bearer {client.token}"}
        self.worker_auth = {"Authorization": f"Bearer {worker.token}"}
        self.http = create_app().test_client()
        d = self.post("/v1/workflow-definitions", {"name": "prof"}, self.client_auth)["data"]
        def_id = d["definition"]["id"] if "definition" in d else d["id"]
        doc = {"version": "v1", "input_schema": {}, "deadline_seconds": 3600, "steps": SHAPES[shape]}
        self.post(f"/v1/workflow-definitions/{def_id}/versions", doc, self.client_auth, status=(200, 201))
        self.start_body = {"definition_id": def_id, "version": "v1", "input": {"n": 1}}
        self.timers = shape == "task-timer-task"
        handlers.load_modules(BUILTIN_HANDLER_MODULES)
        self.pool = LedgerPool(
            Pool.ADVANCE, settings=get_settings(), engine=get_engine(), worker_id=new_node_id()
        )

    def post(self, path: str, body: Any, auth: dict[str, str], status: tuple[int, ...] = (200, 201)) -> Any:
        r = self.http.post(path, json=body, headers={**auth, "Idempotency-Key": uuid.uuid4().hex})
        if r.status_code not in status:
            raise RuntimeError(f"{path}: {r.status_code} {r.get_data(as_text=True)[:300]}")
        return r.get_json()

    # one request of each kind
    def start(self) -> Any:
        return self.post("/v1/workflows", self.start_body, self.client_auth)

    def claim(self) -> Any:
        body = {"queues": [QUEUE], "max_tasks": 1, "wait_seconds": 0}
        tasks = self.post("/v1/tasks/claim", body, self.worker_auth)["data"]["tasks"]
        if len(tasks) != 1:
            raise RuntimeError(f"claimed {len(tasks)} tasks, expected 1")
        return tasks[0]

    def complete(self, task: dict) -> list[dict]:
        """Complete ``task`` and claim one more in the same request, as ``TaskWorker`` does (the slot the
        completion freed); the tasks it claimed."""
        item = {"id": task["id"], "epoch": task["epoch"], "output": {"ok": True, "value": 1}}
        body = {"tasks": [item], "claim": {"queues": [QUEUE], "max_tasks": 1}}
        data = self.post("/v1/tasks/complete", body, self.worker_auth)["data"]
        if data["results"][0]["status"] != 200:
            raise RuntimeError(f"complete: {data['results'][0]}")
        return data["claimed"]

    def timer(self) -> None:
        """The TIMER's ``delay_wake`` job as a ``worker-advance`` pool runs it, in this thread: the pass
        that claims it, its handler's transaction, the pass that settles it."""
        claimed = self.pool._settle_and_claim([], 1)
        if [j["type"] for j in claimed] != ["delay_wake"]:
            raise RuntimeError(f"the pool claimed {[j['type'] for j in claimed]}, expected one delay_wake")
        done = self.pool._run_handler(JobContext.from_claim(claimed[0], self.pool.engine))
        if done.kind != "succeeded" or self.pool._settle_and_claim([done], 0):
            raise RuntimeError(f"the delay_wake job: {done.kind} {done.error}")


def one_workflow(
    s: Session, measure: Callable[[str, Callable[[], Any]], Any], starts_only: bool = False
) -> None:
    """start -> claim -> complete -> claim -> complete, each request through ``measure(kind, call)``
    (``starts_only``: the start alone, its tasks left pending). With a TIMER between the tasks, a's
    completion claims nothing; the timer's job runs (kind ``timer``), then a claim takes b."""
    measure("start", s.start)
    if starts_only:
        return
    task = measure("claim", s.claim)
    for step in ("b", None):  # a's completion claims b (created by it); b's claims nothing
        claimed = measure("complete", lambda t=task: s.complete(t))
        expected = [step] if step and not s.timers else []
        if [c["step_key"] for c in claimed] != expected:
            raise RuntimeError(f"the completion claimed {claimed}, expected {expected}")
        if step and s.timers:
            measure("timer", s.timer)
            claimed = [measure("claim", s.claim)]
        task = claimed[0] if claimed else task


def statements(s: Session, show: int = 0) -> dict[str, tuple[int, int]]:
    """SQL statements (psycopg cursor executions) and round trips of one steady-state request of each
    kind. A round trip is a wait for the server's answer: a statement sent outside a pipeline, a
    pipeline's sync, a transaction command the driver sends on its own outside a pipeline (its BEGIN, its
    COMMIT).
    ``show``: also print each statement's first ``show`` characters, in order, per kind."""
    import psycopg

    counts = {k: [0, 0] for k in KINDS}
    execute, wait, command = psycopg.Cursor.execute, psycopg.Connection.wait, psycopg.Connection._exec_command
    current: list[str] = []

    def counted(self, query, *args, **kwargs):  # psycopg's signature
        counts[current[0]][0] += query != COMMIT  # a transaction command (pipelined): not a statement
        if show:
            sql = query if isinstance(query, str) else repr(query)
            names = {q.sql: q.name for q in QUERIES.values()}  # app.sql's named statements
            name = names.get(sql, "(unnamed)" if query != COMMIT else "")
            print(f"  {current[0]:>8} {name:<34} {' '.join(sql.split())[:show]}")
        return execute(self, query, *args, **kwargs)

    def waited(self, gen, *args, **kwargs):
        name = getattr(gen, "__qualname__", "")
        if name == "BasePipeline._exit_gen" or (name == "BaseCursor._execute_gen" and self._pipeline is None):
            counts[current[0]][1] += 1
        return wait(self, gen, *args, **kwargs)

    def commanded(self, *args, **kwargs):  # BEGIN / COMMIT / ROLLBACK: psycopg waits for each at once
        if (
            self._pipeline is None
        ):  # in a pipeline (app.sql: a BEGIN with its first statement) the sync counts
            counts[current[0]][1] += 1
        return command(self, *args, **kwargs)

    calls: Counter[str] = Counter()

    def measure(kind: str, call: Callable[[], Any]) -> Any:
        current[:] = [kind]
        calls[kind] += 1
        return call()

    psycopg.Cursor.execute = counted  # type: ignore[method-assign]
    psycopg.Connection.wait = waited  # type: ignore[method-assign]
    psycopg.Connection._exec_command = commanded  # type: ignore[method-assign]
    try:
        one_workflow(s, measure)
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]
        psycopg.Connection.wait = wait  # type: ignore[method-assign]
        psycopg.Connection._exec_command = command  # type: ignore[method-assign]
    return {k: (n // calls[k], trips // calls[k]) for k, (n, trips) in counts.items() if calls[k]}


def sample_profile(s: Session, args: argparse.Namespace) -> None:
    """Sample the stack every ``--interval-ms`` of this process's CPU time (``ITIMER_PROF``: user and
    system time, so a wait for PostgreSQL costs nothing and a syscall counts), per request kind; print
    each kind's functions by self or total share of the samples. Unlike cProfile it adds no cost per
    function call, so many small calls are not overweighted."""
    here = sys._getframe()
    samples: dict[str, Counter[tuple[tuple[str, str], ...]]] = {k: Counter() for k in KINDS}
    current: list[str | None] = [None]

    def on_sample(signum: int, frame: FrameType | None) -> None:
        kind = current[0]
        if kind is None or frame is None:
            return
        stack = []
        while frame is not None and frame.f_code is not here.f_code:
            code = frame.f_code
            stack.append((code.co_filename, code.co_qualname))
            frame = frame.f_back
        samples[kind][tuple(stack)] += 1

    cpu: Counter[str] = Counter()
    calls: Counter[str] = Counter()

    def sampled(kind: str, call: Callable[[], Any]) -> Any:
        current[0] = kind
        calls[kind] += 1
        c0 = time.thread_time()
        try:
            return call()
        finally:
            current[0] = None
            cpu[kind] += time.thread_time() - c0

    root = str(Path(__file__).resolve().parent.parent) + "/"
    site = str(Path(sysconfig.get_paths()["purelib"])) + "/"
    stdlib = str(Path(sysconfig.get_paths()["stdlib"])) + "/"

    def name(where: tuple[str, str]) -> str:
        path = where[0].replace(site, "").replace(root, "").replace(stdlib, "")
        return f"{where[1]} ({path})"

    signal.signal(signal.SIGPROF, on_sample)
    signal.setitimer(signal.ITIMER_PROF, args.interval_ms / 1000, args.interval_ms / 1000)
    try:
        for _ in range(args.n):
            one_workflow(s, sampled, args.starts_only)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
    if args.collapsed:  # flamegraph.pl's input: root;...;leaf count
        with open(args.collapsed, "w") as f:
            for k in KINDS:
                for stack, n in samples[k].items():
                    f.write(";".join([k, *(name(w) for w in reversed(stack))]) + f" {n}\n")
    for k in args.kinds.split(","):
        total = sum(samples[k].values())
        if not total:
            continue
        own: Counter[str] = Counter()
        inclusive: Counter[str] = Counter()
        for stack, n in samples[k].items():
            own[name(stack[0])] += n
            for where in {name(w) for w in stack}:
                inclusive[where] += n
        # the kernel delivers the signal at its tick at the earliest (every 1-4 ms of CPU, not every
        # --interval-ms): a function's µs are its share of the samples times the CPU measured per request
        per = cpu[k] * 1e6 / calls[k]
        print(f"\n===== {k}: {total} samples, {per:.0f} µs CPU per request (under the sampler)")
        print(f"| {args.sort} % | µs per request | function |\n|---|---|---|")
        for where, n in (own if args.sort == "self" else inclusive).most_common(args.top):
            print(f"| {100 * n / total:.1f} | {n * per / total:.0f} | {where} |")


def c_profile(s: Session, args: argparse.Namespace) -> None:
    """The loop again under cProfile (timed by this thread's CPU time), one profile per kind."""
    profiles = {k: cProfile.Profile(time.thread_time) for k in KINDS}
    calls: Counter[str] = Counter()

    def profiled(kind: str, call: Callable[[], Any]) -> Any:
        calls[kind] += 1
        prof = profiles[kind]
        prof.enable()
        try:
            return call()
        finally:
            prof.disable()

    for _ in range(args.n):
        one_workflow(s, profiled, args.starts_only)
    sort = "cumulative" if args.sort in ("total", "cumulative") else "tottime"
    for k in args.kinds.split(","):
        out = io.StringIO()
        pstats.Stats(profiles[k], stream=out).sort_stats(sort).print_stats(args.top)
        print(f"\n===== {k}: cProfile, {sort}, per {calls[k]} requests")
        print(out.getvalue())


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.profile_requests")
    p.add_argument(
        "--n", type=int, default=400, help="workflows measured (each: 1 start, 2 claims, 2 completes)"
    )
    p.add_argument("--warmup", type=int, default=40)
    p.add_argument("--shape", choices=sorted(SHAPES), default="task-task")
    p.add_argument(
        "--profile",
        choices=("sample", "cprofile"),
        help="then run the loop again under a profiler: sample (CPU-time sampling, unbiased) or cprofile",
    )
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--sort", default="self", help="sample: self or total; cprofile: tottime or cumulative")
    p.add_argument(
        "--collapsed", metavar="FILE", help="sample: also write the stacks (flamegraph.pl's input)"
    )
    p.add_argument("--interval-ms", type=float, default=0.5, help="sample: CPU time between samples (asked)")
    p.add_argument("--kinds", default=",".join(KINDS), help="the kinds whose profile is printed")
    p.add_argument(
        "--show-sql",
        type=int,
        default=0,
        metavar="CHARS",
        help="print the statements of one steady-state workflow, in order (their first CHARS characters)",
    )
    p.add_argument(
        "--starts-only",
        action="store_true",
        help="the measured loops make starts alone (for an outside profiler: py-spy, perf, strace -c)",
    )
    args = p.parse_args()
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("LEDGERFLOW_METRICS", "0")
    os.environ.setdefault("LEDGERFLOW_RATE_LIMIT", "100000/second")

    with scratch_database("lf_prof") as url:
        try:
            _measure(url, args)
        finally:
            from app.db import get_engine

            get_engine().dispose()  # the app's connections, before the database is dropped
            # the in-process app's LISTEN connection ends with the database: not news here
            logging.getLogger("web.listener").setLevel(logging.ERROR)


def _measure(url: str, args: argparse.Namespace) -> None:
    """The measurement (and the profile, if asked) in the scratch database ``url``."""
    s = Session(url.replace("+psycopg", ""), args.shape)
    for _ in range(args.warmup):
        one_workflow(s, lambda kind, call: call())

    cpu: dict[str, list[float]] = {k: [] for k in KINDS}
    wall: dict[str, list[float]] = {k: [] for k in KINDS}

    def timed(kind: str, call: Callable[[], Any]) -> Any:
        c0, w0 = time.thread_time(), time.perf_counter()
        out = call()
        cpu[kind].append(time.thread_time() - c0)
        wall[kind].append(time.perf_counter() - w0)
        return out

    for _ in range(args.n):
        one_workflow(s, timed, args.starts_only)
    counted = statements(s, args.show_sql)
    print(f"{args.n} workflows ({args.shape}) after {args.warmup} warm-up; CPU of the request thread")
    print("| request | n | CPU µs p50 | CPU µs mean | wall ms p50 | SQL statements | round trips |")
    print("|---|---|---|---|---|---|---|")
    total = 0.0
    for k in [k for k in KINDS if cpu[k]]:
        med, mean = statistics.median(cpu[k]) * 1e6, statistics.fmean(cpu[k]) * 1e6
        total += mean * len(cpu[k]) / args.n
        print(
            f"| {k} | {len(cpu[k])} | {med:.0f} | {mean:.0f} | {statistics.median(wall[k]) * 1000:.2f} "
            f"| {counted[k][0]} | {counted[k][1]} |"
        )
    if not args.starts_only:
        n = sum(len(cpu[k]) for k in KINDS) / args.n
        print(f"CPU per workflow ({n:g} requests / jobs): {total / 1000:.2f} ms")

    if args.profile == "sample":
        sample_profile(s, args)
    elif args.profile == "cprofile":
        c_profile(s, args)


if __name__ == "__main__":
    main()
