"""The pool's pass on its own: settle 4 + claim 4 in one prepared statement, on one connection, with
the pool loop's session settings, and with its commit synchronous or asynchronous; then
without prepared statements (``LEDGERFLOW_PREPARED_STATEMENTS=off``) and, when Debian's pgbouncer is
installed, through a private PgBouncer in transaction mode as the pool runs behind it
(``LEDGERFLOW_DB_TRANSACTION_POOLING=on``: unprepared, no session options, so a synchronous commit);
and a short transaction of the app's engine (BEGIN, a one-row read, COMMIT) directly and through that
PgBouncer with its per-transaction session settings.

    DATABASE_URL=... PYTHONPATH=. .venv/bin/python -m bench.pass_latency [--jobs 20000] [--passes 2000]

Creates its own database (dropped at the end), inserts ``--jobs`` due no-op jobs, then times
``--passes`` passes per configuration, interleaved (sync, async, sync, async), each pass settling as
succeeded the 4 jobs the previous pass claimed: what one worker process does with no-op handlers,
without the threads and the handler. Prints ms per pass, the implied jobs/s and the CPU this process
spent per pass (the pool loop's own share: parameters, rows, job contexts). Numbers only.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from typing import Any

import psycopg
from sqlalchemy import make_url, text

from app import db
from app.ledger import transitions
from app.ledger.context import JobContext
from app.ledger.transitions import Settlement
from bench.run import QUEUE, libpq, loadavg, scratch_database, with_database
from chaos import pgbouncer


def _passes(conn: psycopg.Connection, n: int) -> tuple[float, float]:
    """(wall seconds, this process's CPU seconds) for ``n`` passes of settle(previous claims) + claim(4),
    each claimed row turned into its job context as the pool loop does."""
    finished: list[Settlement] = []
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(n):
        _, claimed, _ = transitions.settle_and_claim(
            conn,
            finished,
            queue=QUEUE,
            limit=4,
            worker_id="bench",
            lease_seconds=60,
            by_due=i % 4 == 3,
            backoff_base=30,
            backoff_cap=900,
        )
        contexts = [JobContext.from_claim(j, None) for j in claimed]  # type: ignore[arg-type]  # no engine needed
        finished = [
            Settlement(
                job_id=c.job_id,
                generation=c.generation,
                lease_token=c.lease_token,
                kind="succeeded",
                job_type=c.type,
            )
            for c in contexts
        ]
    took = time.perf_counter() - started, time.process_time() - cpu
    transitions.settle_and_claim(
        conn,
        finished,
        queue=QUEUE,
        limit=0,
        worker_id="bench",
        lease_seconds=60,
        by_due=False,
        backoff_base=30,
        backoff_cap=900,
    )
    return took


def main() -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.pass_latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--passes", type=int, default=2_000, help="passes per timed round (2 rounds each)")
    p.add_argument("--no-pgbouncer", dest="pgbouncer", action="store_false", help="skip the PgBouncer rows")
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
        with contextlib.ExitStack() as stack:
            through = (
                stack.enter_context(pgbouncer.running(url)) if pgbouncer.binary() and a.pgbouncer else None
            )
            configs = _configs(
                dsn, None if through is None else with_database(through, make_url(url).database)
            )
            results: dict[str, list[tuple[float, float]]] = {name: [] for name, _, _ in configs}
            for _ in range(2):
                for name, conninfo, kwargs in configs:
                    with psycopg.connect(conninfo, autocommit=True, **kwargs) as conn:
                        _passes(conn, 50)  # warm the prepared statements
                        wall, cpu = _passes(conn, a.passes)
                        results[name].append((wall / a.passes * 1000, cpu / a.passes * 1000))
            transactions = _transactions(url, through, a.passes)
        print(f"load average {loadavg()}; {a.passes} passes per round, 2 rounds each, interleaved")
        for name, runs in results.items():
            best = min(w for w, _ in runs)
            print(
                f"{name:<62} {best:6.3f} ms per pass (median {statistics.median(w for w, _ in runs):.3f})"
                f"  -> {4 / best * 1000:7,.0f} jobs/s; this process's CPU per pass (median) "
                f"{statistics.median(c for _, c in runs):.3f} ms"
            )
        for name, ms in transactions.items():
            print(f"{name:<62} {ms:6.3f} ms per transaction (best of 2 rounds of {a.passes})")
        if through is None:
            print("(no pgbouncer: apt-get install -y pgbouncer to measure the path through it)")


def _options(settings: dict[str, str]) -> str:
    return " ".join(f"-c {k}={v}" for k, v in settings.items())


def _configs(dsn: str, through: str | None) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, conninfo, psycopg.connect keywords) of each way the pool's connection is made."""
    session = {"timezone": "UTC", **transitions.PG_SESSION_SETTINGS}
    off = {**session, "synchronous_commit": "off"}
    configs = [
        ("synchronous commit", dsn, {"options": _options(session)}),
        ("asynchronous commit (the pool's)", dsn, {"options": _options(off)}),
        (
            "asynchronous commit, no prepared statements",
            dsn,
            {"options": _options(off), "prepare_threshold": None},
        ),
    ]
    if through is not None:
        configs.append(
            ("through PgBouncer (unprepared, synchronous commit)", through, {"prepare_threshold": None})
        )
    return configs


def _transactions(url: str, through: str | None, n: int) -> dict[str, float]:
    """ms per short transaction of the app's engine (its session settings), best of 2 rounds of ``n``."""
    pooling = {"LEDGERFLOW_DB_TRANSACTION_POOLING": "on"}
    ways = {
        "app transaction, direct (settings at connect)": ({}, url),
        "app transaction, direct, as with pooling on (SET LOCAL, unprepared)": (pooling, url),
    }
    if through is not None:
        pooled = with_database(through, make_url(url).database).replace(
            "postgresql://", "postgresql+psycopg://", 1
        )
        ways["app transaction through PgBouncer (SET LOCAL per transaction)"] = (pooling, pooled)
    best: dict[str, float] = {}
    for _ in range(2):
        for name, (env, target) in ways.items():
            saved = {k: os.environ.get(k) for k in env}
            os.environ.update(env)
            try:
                engine = db._engine_for.__wrapped__(target)  # a new engine with these settings
                with engine.connect() as conn:
                    conn.execute(text("SELECT 1")).scalar()
                    conn.commit()
                    started = time.perf_counter()
                    for i in range(n):
                        conn.execute(text("SELECT id FROM workflow_jobs WHERE id = :i"), {"i": i}).first()
                        conn.commit()
                    ms = (time.perf_counter() - started) / n * 1000
                engine.dispose()
            finally:
                for k, v in saved.items():
                    os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
            best[name] = min(ms, best.get(name, ms))
    return best


if __name__ == "__main__":
    main()
