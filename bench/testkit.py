"""What the test kit (``ledgerflow.testing``, docs/testing.md) costs a test suite, in wall seconds.

    PYTHONPATH=. .venv/bin/ledgerflow env -- .venv/bin/python -m bench.testkit [--starts 3] [--tests 20]

- *first start*: ``LedgerflowServer.start()`` — its own database created and migrated, then the web
  process and the advance pool until each said it is ready (the outbound pool and the scheduler start
  after them, unwaited),
  ``--starts`` times, each on a new database;
- *per test*: what ``ledgerflow_env`` adds to a test — a namespace with its credential, a client and a
  task worker, then their close — ``--tests`` times on one server, each test running one one-task
  workflow (whose own time is reported apart, it is the test's, not the kit's);
- *time skipping*: a workflow with a 1 h TIMER, a TASK retried after a 10 min backoff and a SIGNAL with a
  1 day timeout, run to its end with ``skip_time`` (the wall time from its start to its end).

Also the CPU seconds each part used until the server was ready (``/proc/<pid>/stat``), which do not depend
on the machine's load as the wall times do. Prints median and max. Numbers only, never assertions (the machine is shared).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from bench.run import cpu_seconds, loadavg
from ledgerflow.client import Task
from ledgerflow.testing import LedgerflowEnv, LedgerflowServer

ONE_TASK = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 600,
    "steps": [{"key": "t", "kind": "TASK", "queue": "bench.t"}],
    "output": {"ok": "$.steps.t.output.ok"},
}
A_DAY = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 3 * 86400,
    "signals": [{"name": "ok", "payload_version": "v1", "schema": {"type": "object"}}],
    "steps": [
        {"key": "timer", "kind": "TIMER", "delay_seconds": 3600},
        {
            "key": "task",
            "kind": "TASK",
            "queue": "bench.retry",
            "after": ["timer"],
            "retry": {"max_attempts": 2, "backoff_seconds": 600},
        },
        {
            "key": "signal",
            "kind": "SIGNAL",
            "after": ["task"],
            "signal": "ok",
            "payload_version": "v1",
            "correlation": "c",
            "timeout_seconds": 86400,
        },
    ],
}


def _line(name: str, values: list[float]) -> str:
    return (
        f"{name:<44} median {statistics.median(values):7.3f} s   max {max(values):7.3f} s   (n={len(values)})"
    )


def _one_test(server: LedgerflowServer) -> tuple[float, float]:
    """(the kit's share, the workflow's own time) of one test that runs a one-task workflow."""
    began = time.monotonic()
    env = server.environment("bench")
    set_up = time.monotonic() - began

    @env.task("bench.t")
    def t(task: Task) -> dict:
        return {"ok": True}

    began = time.monotonic()
    env.wait(env.start(env.publish("one-task", ONE_TASK), {}))
    own = time.monotonic() - began
    began = time.monotonic()
    env.close()
    return set_up + time.monotonic() - began, own


def _a_day(env: LedgerflowEnv) -> float:
    @env.task("bench.retry")
    def retry(task: Task) -> dict:
        if task.attempt == 1:
            raise ConnectionError("busy")
        return {}

    began = time.monotonic()
    wid = env.start(env.publish("a-day", A_DAY), {})
    env.wait_for_step(wid, "timer")
    env.skip_time(hours=1)
    env.wait_for_step(wid, "task")  # WAITING: the 10 min backoff
    env.skip_time(minutes=10)
    env.wait_for_step(wid, "signal")
    env.skip_time(days=1)
    env.wait(wid)
    return time.monotonic() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--tests", type=int, default=20)
    args = parser.parse_args()
    load = loadavg()
    starts, databases, processes, per_test, own, a_day = [], [], [], [], [], []
    kit_cpu, web_cpu, advance_cpu = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(args.starts):
            server = LedgerflowServer(Path(tmp) / f"s{n}")
            began, began_cpu = time.monotonic(), time.process_time()
            server.start()
            starts.append(time.monotonic() - began)
            kit_cpu.append(time.process_time() - began_cpu)
            pids = server.pids()
            web_cpu.append(cpu_seconds(pids["web"]))
            advance_cpu.append(cpu_seconds(pids["worker-advance"]))
            databases.append(server.timings.database)
            processes.append(server.timings.processes)
            try:
                if n == args.starts - 1:
                    for _ in range(args.tests):
                        kit, workflow = _one_test(server)
                        per_test.append(kit)
                        own.append(workflow)
                    env = server.environment("a-day")
                    try:
                        a_day.append(_a_day(env))
                    finally:
                        env.close()
            finally:
                server.stop()
    print(f"load average before: {load}, after: {loadavg()}")
    print(_line("first start (database + processes ready)", starts))
    print(_line("  of which: database created and migrated", databases))
    print(_line("  of which: processes until ready", processes))
    print(_line("per test: namespace + client + worker, close", per_test))
    print(_line("  (the test's one-task workflow itself)", own))
    print(_line("1 h TIMER + 10 min backoff + 1 d SIGNAL timeout", a_day))
    # CPU seconds do not depend on what else the machine runs: on an idle machine with two cores the first
    # start takes about the kit's CPU (database) plus the larger of the two processes' CPU (they start together)
    print(_line("CPU: the test process during the start (migrations)", kit_cpu))
    print(_line("CPU: the web process until ready", web_cpu))
    print(_line("CPU: the advance pool until ready", advance_cpu))


if __name__ == "__main__":
    main()
