"""A ledger that grows: claim latency and the runtime status as finished history piles up.

    PYTHONPATH=. .venv/bin/ledgerflow env -- .venv/bin/python -m bench.growth [--sizes 10000,1000000,10000000]

Own database (dropped at the end). The ledger holds 10,000 due ``pending`` jobs and grows with
finished ones (succeeded, a few dead) to each size; attempts are spread over seven days (the default
retention), one per finished job, up to ``--attempts`` in all. At each size it prints the claim p50 /
p99 of 4 jobs (the pool's prepared claim, each rolled back so the backlog stays the same) and the
runtime status's median time. Numbers, not assertions."""

from __future__ import annotations

import argparse
import statistics
import time

from sqlalchemy import create_engine, text

from app.ledger import status
from bench.claim import time_claims
from bench.run import loadavg, scratch_database

PENDING = 10_000
CHUNK = 1_000_000


def _insert_finished(conn, start: int, n: int) -> None:
    conn.execute(
        text(
            """
INSERT INTO workflow_jobs (type, queue, status, payload, run_at, max_attempts, attempts, finished_at,
    created_at, updated_at, trace_id, operation_key, error_code)
SELECT 'webhook_delivery', 'workflow-ledger-outbound',
    CAST(CASE WHEN g % 100 = 0 THEN 'dead' ELSE 'succeeded' END AS workflow_job_status),
    '{}', now() - make_interval(secs => g % 604800), 10, 1, now() - make_interval(secs => g % 604800),
    now() - make_interval(secs => g % 604800), now(), md5(g::text), md5('f' || g::text),
    CASE WHEN g % 100 = 0 THEN 'HANDLER_ERROR' END
FROM generate_series(CAST(:a AS bigint), CAST(:b AS bigint)) g
"""
        ),
        {"a": start, "b": start + n - 1},
    )


def _insert_attempts(conn, n: int) -> None:
    conn.execute(
        text(
            """
INSERT INTO workflow_job_executions (job_id, generation, attempt, status, due_at, started_at,
    finished_at, duration_ms)
SELECT j.id, 1, 1, CAST(CASE WHEN j.status = 'dead' THEN 'failed' ELSE 'succeeded' END AS workflow_attempt_status),
    j.finished_at - interval '2 seconds', j.finished_at - interval '1 second', j.finished_at, 1000
FROM workflow_jobs j
WHERE j.status IN ('succeeded', 'dead')
  AND NOT EXISTS (SELECT 1 FROM workflow_job_executions e WHERE e.job_id = j.id)
LIMIT :n
"""
        ),
        {"n": n},
    )


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.growth")
    p.add_argument("--sizes", default="10000,1000000,10000000")
    p.add_argument(
        "--attempts", type=int, default=1_000_000, help="attempt rows at most (spread over 7 days)"
    )
    p.add_argument("--samples", type=int, default=300)
    args = p.parse_args()
    with scratch_database("lf_bench_growth") as url:
        _run(url, [int(s) for s in args.sizes.split(",")], args.attempts, args.samples)


def _run(url: str, sizes: list[int], max_attempts: int, samples: int) -> None:
    engine = create_engine(url)
    vacuum = create_engine(url, isolation_level="AUTOCOMMIT")
    dsn = url.replace("+psycopg", "")
    print(f"load average at start: {loadavg()}")
    print(
        "| jobs in the ledger | of which finished | attempts | claim p50 ms | claim p99 ms | runtime status ms |"
    )
    print("|---|---|---|---|---|---|")
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO workflow_jobs (type, queue, status, payload, run_at, max_attempts, created_at, "
                    "updated_at, trace_id, operation_key) SELECT 'delay_wake', 'workflow-ledger', 'pending', '{}', "
                    "now() - interval '1 minute', 5, now(), now(), md5(g::text), md5('p' || g::text) "
                    "FROM generate_series(1, :n) g"
                ),
                {"n": PENDING},
            )
        have, attempts = PENDING, 0
        for size in sizes:
            while have < size:
                n = min(CHUNK, size - have)
                with engine.begin() as conn:
                    _insert_finished(conn, have, n)
                have += n
            want = min(max_attempts, have - PENDING) - attempts
            if want > 0:
                with engine.begin() as conn:
                    _insert_attempts(conn, want)
                attempts += want
            with vacuum.connect() as conn:
                conn.execute(text("VACUUM ANALYZE workflow_jobs"))
                conn.execute(text("VACUUM ANALYZE workflow_job_executions"))
            ms = time_claims(engine, dsn, samples)
            ms.sort()
            st = []
            with engine.connect() as conn:
                for _ in range(21):
                    t0 = time.perf_counter()
                    status.runtime_status(conn)
                    st.append((time.perf_counter() - t0) * 1000)
            print(
                f"| {have:,} | {have - PENDING:,} | {attempts:,} | {statistics.median(ms):.2f} | "
                f"{ms[int(len(ms) * 0.99) - 1]:.2f} | {statistics.median(st):.1f} |",
                flush=True,
            )
    finally:
        engine.dispose()
        vacuum.dispose()


if __name__ == "__main__":
    main()
