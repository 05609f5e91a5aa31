"""The pool's pass on its own: settle 4 + claim 4 in one prepared statement, on one connection, with
the pool loop's session settings, and with its commit synchronous or asynchronous (issue 16).

    DATABASE_URL=... PYTHONPATH=. .venv/bin/python -m bench.pass_latency [--jobs 20000] [--passes 2000]

Creates its own database (dropped at the end), inserts ``--jobs`` due no-op jobs, then times
``--passes`` passes per configuration, interleaved (sync, async, sync, async), each pass settling as
succeeded the 4 jobs the previous pass claimed: what one worker process does with no-op handlers,
without the threads and the handler. Prints ms per pass and the implied jobs/s. Numbers only.
"""

from __future__ import annotations

import argparse
import statistics
import time

import psycopg

from app.ledger import transitions
from app.ledger.transitions import Settlement
from bench.run import QUEUE, libpq, loadavg, scratch_database


def _passes(conn: psycopg.Connection, n: int) -> float:
    """Seconds for ``n`` passes of settle(previous claims) + claim(4)."""
    finished: list[Settlement] = []
    started = time.perf_counter()
    for i in range(n):
        _, claimed = transitions.settle_and_claim(
            conn, finished, queue=QUEUE, limit=4, worker_id="bench", lease_seconds=60, by_due=i % 4 == 3,
            backoff_base=30, backoff_cap=900,
        )  # fmt: skip
        finished = [
            Settlement(
                job_id=j["id"],
                generation=j["generation"],
                lease_token=str(j["lease_token"]),
                kind="succeeded",
            )  # fmt: skip
            for j in claimed
        ]
    took = time.perf_counter() - started
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
        results: dict[str, list[float]] = {"synchronous commit": [], "asynchronous commit (the pool's)": []}
        for _ in range(2):
            for name, extra in (("synchronous commit", ""), ("asynchronous commit (the pool's)",
                                                               " -c synchronous_commit=off")):  # fmt: skip
                options = "-c timezone=UTC " + transitions.PG_SESSION_OPTIONS + extra
                with psycopg.connect(dsn, autocommit=True, options=options) as conn:
                    _passes(conn, 50)  # warm the prepared statements
                    results[name].append(_passes(conn, a.passes) / a.passes * 1000)
        print(f"load average {loadavg()}; {a.passes} passes per round, 2 rounds each, interleaved")
        for name, ms in results.items():
            best = min(ms)
            print(f"{name:<36} {best:6.3f} ms per pass (median {statistics.median(ms):.3f})"
                  f"  -> {4 / best * 1000:7,.0f} jobs/s")  # fmt: skip


if __name__ == "__main__":
    main()
