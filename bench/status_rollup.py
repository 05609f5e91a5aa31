"""The runtime status with a busy last hour: the figures read live from every attempt of
the hour, then from the rollup's minutes plus the live rest.

    PYTHONPATH=. .venv/bin/ledgerflow env -- .venv/bin/python -m bench.status_rollup [--attempts 1000000]

Own database (dropped at the end): ``--attempts`` attempts started evenly over the last hour (10,000
jobs of both pools, queue waits 0-10 s, 2 % failed). It prints the median of ``runtime_status`` and
``hour_series`` before the rollup has run (the exact path: the whole hour is live, as before the
rollup existed), the time of the rollup sweep's calls catching up, the medians after, and both sets
of figures. Numbers, not assertions."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, text

from app.db import transaction
from app.ledger import rollup, status
from bench.run import loadavg, scratch_database

JOBS = 10_000
FIGURES = (
    "attempts_1h",
    "failed_attempts_1h",
    "avg_duration_ms_1h",
    "queue_wait_p95_seconds",
    "queue_wait_p99_seconds",
)


def _load(engine: Engine, attempts: int) -> None:
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_jobs (type, queue, status, payload, max_attempts, attempts, finished_at,"
                " trace_id, operation_key) SELECT 'webhook_delivery', CAST(CASE WHEN g % 2 = 0 THEN 'workflow-ledger'"
                " ELSE 'workflow-ledger-outbound' END AS workflow_job_queue), 'succeeded', '{}', 1000, 1, now(), md5(g::text),"
                " md5('o' || g::text) FROM generate_series(1, :n) g"
            ),
            {"n": JOBS},
        )
        conn.execute(
            text(
                """
INSERT INTO workflow_job_executions (job_id, generation, attempt, status, due_at, started_at,
    finished_at, duration_ms)
SELECT (g % :jobs) + 1, 1, (g / :jobs) + 1,
       CAST(CASE WHEN g % 50 = 0 THEN 'failed' ELSE 'succeeded' END AS workflow_attempt_status),
       s.at - make_interval(secs => (g % 997) * 0.01), s.at, s.at, g % 300
FROM generate_series(0, :n - 1) g,
     LATERAL (SELECT now() - make_interval(secs => 5 + 3590 * g::float8 / :n)) AS s(at)
"""
            ),
            {"n": attempts, "jobs": JOBS},
        )


def _median_ms(engine: Engine, fn: Callable[[Connection], Any], calls: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(calls):
        with engine.connect() as conn, conn.begin():
            t0 = time.perf_counter()
            out = fn(conn)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), out


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.status_rollup")
    p.add_argument("--attempts", type=int, default=1_000_000)
    p.add_argument("--calls", type=int, default=7)
    args = p.parse_args()
    with scratch_database("lf_bench_rollup") as url:
        _run(url, args.attempts, args.calls)


def _run(url: str, attempts: int, calls: int) -> None:
    engine = create_engine(url)
    print(f"load average at start: {loadavg()}")
    try:
        _load(engine, attempts)
        with create_engine(url, isolation_level="AUTOCOMMIT").connect() as conn:
            conn.execute(text("VACUUM ANALYZE"))
        live_ms, live = _median_ms(engine, status.runtime_status, calls)
        live_series_ms, _ = _median_ms(engine, status.hour_series, calls)
        sweeps = []
        while True:
            t0 = time.perf_counter()
            with transaction(engine) as conn:
                n = rollup.roll_up(conn, 1000, lag_seconds=660)
            sweeps.append((time.perf_counter() - t0) * 1000)
            if n == 0:
                break
        rolled_ms, rolled = _median_ms(engine, status.runtime_status, calls)
        rolled_series_ms, _ = _median_ms(engine, status.hour_series, calls)
        print(f"attempts in the last hour: {attempts:,}; load average now: {loadavg()}")
        print("| | runtime_status ms | hour_series ms |")
        print("|---|---|---|")
        print(f"| whole hour live (no rollup) | {live_ms:.1f} | {live_series_ms:.1f} |")
        print(f"| rollup + live rest | {rolled_ms:.1f} | {rolled_series_ms:.1f} |")
        print(f"rollup sweep calls (ms): {', '.join(f'{s:.0f}' for s in sweeps)}")
        for key in FIGURES:
            print(f"{key}: live {live[key]} / rolled {rolled[key]}")
    finally:
        engine.dispose()


if __name__ == "__main__":
    main()
