"""The peers of the workflow benchmark (``bench/workflows.py``), each in its own idiom, against its own
scratch database on the same PostgreSQL server. Needs the ``bench`` extra (``dbos``, ``absurd-sdk``,
``absurdctl``).

- **DBOS 3.4** (``dbos``): one ``@DBOS.workflow`` whose TASK steps are ``@DBOS.step`` calls and whose
  TIMER is ``DBOS.sleep``; its system database is the scratch database (``system_database_url``).
  ``dbos``: ``DBOS.start_workflow`` from 4 client threads of the process that hosts DBOS (the workflows
  run in that process's executor). ``dbos-client``: ``DBOSClient.enqueue`` from 4 client threads onto a
  queue served by one worker process (``python -m bench.wf_peers dbos-worker DSN``: DBOS launched with
  the queue registered, default settings: no concurrency limit, 1 s polling).
- **Absurd 0.5.1** (``absurd-sdk``): its schema installed with ``absurdctl init`` (the SQL bundled in
  the absurdctl wheel; it runs ``psql``) and ``absurdctl create-queue``; one task whose TASK steps are
  ``ctx.step`` and whose TIMER is ``ctx.sleep_for``; spawned with ``Absurd.spawn`` from 4 client
  threads; served by 4 worker threads, each an ``Absurd`` client with its own connection running
  ``start_worker()`` (defaults: one task at a time, 0.25 s poll, 120 s claim timeout).
- The ``fanout`` shape (the elements on the queue ``bench_wf_elements``, 4 at once in each engine):
  DBOS's workflow enqueues each element (a ``@DBOS.step``) on that queue (``worker_concurrency=4``,
  ``polling_interval_sec=0.01``; ``dbos-nolimit``: the queue's defaults) and awaits every handle;
  Absurd's task spawns the elements as tasks on that queue in one ``ctx.step`` and awaits each with
  ``ctx.await_task_result`` (4 more worker threads serve it).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import psycopg
from absurd_sdk import Absurd
from dbos import DBOS, DBOSClient, EnqueueOptions

from bench import wf_common
from bench.run import Proc, base_env, libpq, spawn_logged, terminate, wait_ready, with_database
from bench.wf_common import (
    ELEMENT_QUEUE,
    QUEUE,
    SHAPES,
    TIMER_SECONDS,
    Monitor,
    RunResult,
    Shape,
    mapped_value,
    measure,
    padded,
    start_all,
)

ROOT = Path(__file__).resolve().parent.parent
WORKER_THREADS = 4
TASK_NAME = "bench_wf"
ELEMENT_TASK = "bench_wf_element"
# DBOS's element queue poll (its default is 1 s, which with 4 elements at once would cap it at ~4
# elements/s: a setting no one would run this shape with)
DBOS_QUEUE_POLL = 0.01


@contextmanager
def plain_database(prefix: str) -> Iterator[str]:
    """An empty scratch database on the server named by DATABASE_URL (libpq URL), dropped at the end."""
    server = libpq(os.environ["DATABASE_URL"])
    name = f"{prefix}_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(with_database(server, "postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(server, name)
    finally:
        with psycopg.connect(with_database(server, "postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# ---------------------------------------------------------------------------------------------- DBOS
@DBOS.step()
def bench_step(key: str) -> dict:
    return padded({"ok": True})


@DBOS.step()
def bench_items(n: int) -> dict:
    """The fan-out shape's first step: the array the elements run over."""
    return {"items": list(range(n))}


@DBOS.step()
def bench_element(item: int) -> dict:
    return {"ok": True}


@DBOS.step()
def bench_map_step(key: str, x: int | None) -> dict:
    return mapped_value(x)


@DBOS.workflow()
def bench_workflow(shape: str, payload: dict | None = None) -> dict:
    """``payload``: the workflow's input beside its shape (``padded``: what the other engines' inputs carry)."""
    s = SHAPES[shape]
    items: list[int] = []
    x = None
    for kind, key in s.plan():
        if kind == "task" and key == "s1" and s.fanout:
            items = bench_items(s.fanout)["items"]
        elif kind == "task" and s.mapping:
            x = bench_map_step(key, x)["value"]
        elif kind == "task":
            bench_step(key)
        elif kind == "fanout":
            # DBOS's idiom: enqueue every element on a queue, then await the handles in order
            queue = DBOS.retrieve_queue(ELEMENT_QUEUE)
            handles = [queue.enqueue(bench_element, item) for item in items]
            [h.get_result() for h in handles]
        else:
            DBOS.sleep(TIMER_SECONDS)
    return {"ok": True}


def _inputs(shape: Shape, i: int) -> tuple:
    """``bench_workflow``'s arguments: the shape, and with ``--payload-bytes`` the padded input the other
    engines' workflows get (``{"i": i}`` and the pad); without it the shape alone, as every earlier run."""
    return (shape.name, padded({"i": i})) if wf_common.PAYLOAD_BYTES else (shape.name,)


def dbos_element_queue(limit: bool = True) -> None:
    """The fan-out shape's element queue: ``WORKER_THREADS`` elements at once per process (the other
    engines' element slots), polled every ``DBOS_QUEUE_POLL`` s; ``limit=False``: DBOS's queue
    defaults (no concurrency limit: every element dequeued runs in its own executor thread; 1 s poll)."""
    if limit:
        DBOS.register_queue(
            ELEMENT_QUEUE, worker_concurrency=WORKER_THREADS, polling_interval_sec=DBOS_QUEUE_POLL
        )
    else:
        DBOS.register_queue(ELEMENT_QUEUE)


DBOS_DONE = (
    "SELECT count(*) FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s) "
    "AND status IN ('SUCCESS', 'ERROR', 'CANCELLED', 'MAX_RECOVERY_ATTEMPTS_EXCEEDED')"
)


def dbos_config(dsn: str) -> dict:
    return {"name": "lf-bench-wf", "system_database_url": dsn, "log_level": "WARNING"}


def dbos_worker(dsn: str) -> None:
    """``python -m bench.wf_peers dbos-worker DSN``: DBOS with the queue, until SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    DBOS(config=dbos_config(dsn))  # type: ignore[arg-type]
    DBOS.launch()
    DBOS.register_queue(QUEUE)
    dbos_element_queue()
    print("ready", flush=True)
    stop.wait()
    DBOS.destroy()


def run_dbos(shape: Shape, n: int, *, warmup: int, client: bool, element_limit: bool = True) -> RunResult:
    """``element_limit=False`` (the fan-out shape only): the element queue at DBOS's defaults."""
    engine = "dbos-client" if client else ("dbos" if element_limit else "dbos-nolimit")
    res = RunResult(engine=engine, shape=shape.name, n=n)
    timeout = 120 + n * shape.units * 0.5
    with ExitStack() as stack:
        dsn = stack.enter_context(plain_database("lf_bench_wf_dbos"))
        DBOS(config=dbos_config(dsn))  # type: ignore[arg-type]
        DBOS.launch()  # creates the schema (the client process needs it)
        if shape.fanout:
            dbos_element_queue(element_limit)
        worker: Proc | None = None
        if client:
            DBOS.destroy()
            env = base_env()
            logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lf-bench-wf-dbos-")))
            worker = spawn_logged(
                [sys.executable, "-m", "bench.wf_peers", "dbos-worker", dsn], env, logs / "worker.log"
            )
            stack.callback(terminate, worker)
            wait_ready([worker], "DBOS worker", timeout=90)
            name = bench_workflow.dbos_function_name  # type: ignore[attr-defined]
            options: EnqueueOptions = {"workflow_name": name, "queue_name": QUEUE}

            def make() -> object:
                return DBOSClient(system_database_url=dsn)

            def start(c: object, i: int) -> str:
                return c.enqueue(options, *_inputs(shape, i)).get_workflow_id()  # type: ignore[attr-defined]

            def close(c: object) -> None:
                c.destroy()  # type: ignore[attr-defined]
        else:
            stack.callback(DBOS.destroy)

            def make() -> object:
                return None

            def start(c: object, i: int) -> str:
                return DBOS.start_workflow(bench_workflow, *_inputs(shape, i)).get_workflow_id()

            def close(c: object) -> None:
                return None

        mon = Monitor(dsn)
        stack.callback(mon.close)

        def stop() -> None:
            if worker is not None:
                terminate(worker)
            else:
                DBOS.destroy()

        started = measure(
            res,
            mon,
            start=lambda k: start_all(k, make, start, close),
            done_sql=DBOS_DONE,
            timeout=timeout,
            stop=stop,
            engine_pids=lambda: [worker.popen.pid] if worker is not None else [],
            warmup=warmup,
        )
        ids = [s[0] for s in started]
        rows = mon.rows(
            "SELECT workflow_uuid, status, completed_at, updated_at FROM dbos.workflow_status "
            "WHERE workflow_uuid = ANY(%s)",
            (ids,),
        )
        res.record(started, {r[0]: ((r[2] or r[3]) / 1000.0, r[1]) for r in rows}, ok="SUCCESS")
        if shape.timer:
            # the sleep's row holds its wake-up time as completion (record_sleep); the next step's row its start
            res.timer_late_ms = [
                float(r[0])
                for r in mon.rows(
                    """SELECT nx.started_at_epoch_ms - sl.completed_at_epoch_ms
                       FROM dbos.operation_outputs sl JOIN dbos.operation_outputs nx
                         ON nx.workflow_uuid = sl.workflow_uuid AND nx.function_id = sl.function_id + 1
                       WHERE sl.function_name = 'DBOS.sleep' AND sl.workflow_uuid = ANY(%s)""",
                    (ids,),
                )
            ]
    return res


# -------------------------------------------------------------------------------------------- Absurd
def _work() -> dict:
    return padded({"ok": True})


def absurd_task(app: Absurd, params: dict, ctx: object) -> dict:
    s = SHAPES[params["shape"]]
    items: list[int] = []
    x = None
    for kind, key in s.plan():
        if kind == "task" and key == "s1" and s.fanout:
            items = ctx.step(key, lambda: {"items": list(range(s.fanout))})["items"]  # type: ignore[attr-defined]
        elif kind == "task" and s.mapping:
            x = ctx.step(key, lambda x=x: mapped_value(x))["value"]  # type: ignore[attr-defined]
        elif kind == "task":
            ctx.step(key, _work)  # type: ignore[attr-defined]
        elif kind == "fanout":
            # Absurd's idiom: spawn every element as a task on another queue (the spawns in one step, so
            # a retried run does not spawn them again), then await each one's result
            ids = ctx.step("spawn", functools.partial(_spawn_elements, app, items))  # type: ignore[attr-defined]
            for tid in ids:
                ctx.await_task_result(tid, queue_name=ELEMENT_QUEUE)  # type: ignore[attr-defined]
        else:
            ctx.sleep_for(key, TIMER_SECONDS)  # type: ignore[attr-defined]
    return {"ok": True}


def _spawn_elements(app: Absurd, items: list[int]) -> list[str]:
    return [str(app.spawn(ELEMENT_TASK, {"item": item}, queue=ELEMENT_QUEUE)["task_id"]) for item in items]


def absurd_element(params: dict, ctx: object) -> dict:
    return {"ok": True}


def absurd_install(dsn: str) -> None:
    """``absurdctl init`` (its bundled absurd.sql, no download) and ``absurdctl create-queue``."""
    ctl = str(Path(sys.executable).with_name("absurdctl"))
    for args in (["init"], ["create-queue", QUEUE], ["create-queue", ELEMENT_QUEUE]):
        out = subprocess.run([ctl, *args, "-d", dsn], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"absurdctl {' '.join(args)} failed: {out.stdout}{out.stderr}")
        if args == ["init"] and "bundled" not in out.stdout:
            raise RuntimeError(f"absurdctl init did not use its bundled SQL: {out.stdout}")


def run_absurd(shape: Shape, n: int, *, warmup: int) -> RunResult:
    res = RunResult(engine="absurd", shape=shape.name, n=n)
    timeout = 120 + n * shape.units * 0.5
    t, r, c = (f'absurd."{p}_{QUEUE}"' for p in "trc")
    done_sql = f"SELECT count(*) FROM {t} WHERE task_id::text = ANY(%s) AND state IN ('completed', 'failed', 'cancelled')"
    with ExitStack() as stack:
        dsn = stack.enter_context(plain_database("lf_bench_wf_absurd"))
        absurd_install(dsn)
        workers: list[Absurd] = []
        threads: list[threading.Thread] = []
        for i in range(WORKER_THREADS):
            app = Absurd(dsn, queue_name=QUEUE)
            app.register_task(TASK_NAME)(functools.partial(absurd_task, app))
            workers.append(app)
            th = threading.Thread(target=app.start_worker, kwargs={"worker_id": f"bench-{i}"}, daemon=True)
            th.start()
            threads.append(th)
        if shape.fanout:  # the elements' queue: as many worker threads again
            for i in range(WORKER_THREADS):
                app = Absurd(dsn, queue_name=ELEMENT_QUEUE)
                app.register_task(ELEMENT_TASK, queue=ELEMENT_QUEUE)(absurd_element)
                workers.append(app)
                th = threading.Thread(
                    target=app.start_worker, kwargs={"worker_id": f"bench-el-{i}"}, daemon=True
                )
                th.start()
                threads.append(th)
        stopped = False

        def stop_workers() -> None:
            nonlocal stopped
            if stopped:
                return
            stopped = True
            for app in workers:
                app.stop_worker()
            for th in threads:
                th.join(30)
            for app in workers:
                app.close()

        stack.callback(stop_workers)

        def make() -> object:
            return Absurd(dsn, queue_name=QUEUE)

        def start(cl: object, i: int) -> str:
            return str(cl.spawn(TASK_NAME, padded({"shape": shape.name, "i": i}), queue=QUEUE)["task_id"])  # type: ignore[attr-defined]

        def close(cl: object) -> None:
            cl.close()  # type: ignore[attr-defined]

        mon = Monitor(dsn)
        stack.callback(mon.close)
        started = measure(
            res,
            mon,
            start=lambda k: start_all(k, make, start, close),
            done_sql=done_sql,
            timeout=timeout,
            stop=stop_workers,
            warmup=warmup,
            what=f", {WORKER_THREADS} worker threads",
        )
        ids = [s[0] for s in started]
        rows = mon.rows(
            f"""SELECT tk.task_id::text, tk.state, extract(epoch FROM rn.completed_at)
                FROM {t} tk LEFT JOIN {r} rn ON rn.run_id = tk.last_attempt_run WHERE tk.task_id::text = ANY(%s)""",
            (ids,),
        )
        res.record(
            started,
            {x[0]: (float(x[2]) if x[2] is not None else float("nan"), x[1]) for x in rows},
            ok="completed",
        )
        if shape.timer:
            # the sleep's checkpoint holds its wake-up time; the run's last claim (started_at) is the resume
            res.timer_late_ms = [
                float(x[0])
                for x in mon.rows(
                    f"""SELECT extract(epoch FROM rn.started_at - (ck.state #>> '{{}}')::timestamptz) * 1000
                        FROM {t} tk JOIN {r} rn ON rn.run_id = tk.last_attempt_run
                        JOIN {c} ck ON ck.task_id = tk.task_id AND ck.checkpoint_name = 'wait'
                        WHERE tk.task_id::text = ANY(%s)""",
                    (ids,),
                )
            ]
    return res


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "dbos-worker":
        dbos_worker(sys.argv[2])
    else:
        sys.exit("usage: python -m bench.wf_peers dbos-worker DSN")
