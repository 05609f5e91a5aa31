"""The pool's pass on its own: settle 4 + claim 4 in one prepared statement, on one connection, with
the pool loop's session settings, and with its commit synchronous or asynchronous (issue 16).

    DATABASE_URL=... PYTHONPATH=. .venv/bin/python -m bench.pass_latency [--jobs 20000] [--passes 2000]

Creates its own database (dropped at the end), inserts ``--jobs`` due no-op jobs, then times
``--passes`` passes per configuration, interleaved (sync, async, sync, async), each pass settling as
succeeded the 4 jobs the previous pass claimed: what one worker process does with no-op handlers,
without the threads and the handler. Prints ms per pass, the implied jobs/s and the CPU this process
spent per pass (the pool loop's own share: parameters, rows, job contexts). Numbers only.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg

from app.ledger import transitions
from app.ledger.context import JobContext
from app.ledger.transitions import Settlement
from bench.run import QUEUE, libpq, loadavg, scratch_database


def _passes(conn: psycopg.Connection, n: int) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) for ``n`` passes of settle(previous claims) + claim(4),
    each claimed row turned into its job context as the pool loop does."""
    finished: list[Settlement] = []
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        _, claimed, _ = transitions.settle_and_claim(
            conn, finished, queue=QUEUE, limit=4, worker_id="bench", lease_seconds=60, by_due=i % 4 == 3,
            backoff_base=30, backoff_cap=900,
        )  # fmt: skip
        contexts = [JobContext.from_claim(j, None) for j in claimed]  # type: ignore[arg-type]  # no engine needed
        finished = [
            Settlement(
                job_id=c.job_id,
                generation=c.generation,
                lease_token=c.lease_token,
                kind="succeeded",
                job_type=c.type,
            )  # fmt: skip
            for c in contexts
        ]
    took = time.perf_counter() - started, time.process_time() - cpu
    transitions.settle_and_claim(conn, finished, queue=QUEUE, limit=0, worker_id="bench", lease_seconds=60,
                                 by_due=False, backoff_base=30, backoff_cap=900)  # fmt: skip
    return took


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.pass_latency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--passes", type=int, default=2_000, help="passes per timed round (4 rounds)")
    a = p.parse_args()
    if a.passes * 4 * 4 > a.jobs:
        a.jobs = a.passes * 4 * 4
    with scratch_database("lf_bench_pass") as url:
        dsn = libpq(url)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                """INSERT INTO workflow_jobs (type, queue, payload, max_attempts, execution_timeout_ms,
                                              operation_key, trace_id)
                   SELECT 'delay_wake', %s, '{}'::jsonb, 3, 600000, md5('op' || g), md5('tr' || g)
                   FROM generate_series(1, %s) g""",
                (QUEUE, a.jobs),
            )
            conn.execute("VACUUM ANALYZE workflow_jobs")
        results: dict[str, list[tuple[float, float]]] = {"synchronous commit": [],
                                                         "asynchronous commit (the pool's)": []}  # fmt: skip
        for _ in range(2):
            for name, extra in (("synchronous commit", ""), ("asynchronous commit (the pool's)",
                                                               " -c synchronous_commit=off")):  # fmt: skip
                options = "-c timezone=UTC " + transitions.PG_SESSION_OPTIONS + extra
                with psycopg.connect(dsn, autocommit=True, options=options) as conn:
                    _passes(conn, 50)  # warm the prepared statements
                    wall, cpu = _passes(conn, a.passes)
                    results[name].append((wall / a.passes * 1000, cpu / a.passes * 1000))
        print(f"load average {loadavg()}; {a.passes} passes per round, 2 rounds each, interleaved")
        for name, runs in results.items():
            best = min(w for w, _ in runs)
            print(f"{name:<36} {best:6.3f} ms per pass (median {statistics.median(w for w, _ in runs):.3f})"
                  f"  -> {4 / best * 1000:7,.0f} jobs/s; this process's CPU per pass (median) "
                  f"{statistics.median(c for _, c in runs):.3f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
