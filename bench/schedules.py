"""Schedules (X-SCHED): how fast the scheduler tick hands out due schedules, and what the pure
fire-time computation costs (coalescing a long outage is bounded work).

    DATABASE_URL=postgresql://user@host/anydb PYTHONPATH=. .venv/bin/python -m bench.schedules [N]

Creates its own database ``lf_bench_sched_<random>`` on that server (migrated with Alembic), N
interval schedules (default 2000) that each missed 60 fire times, then times ``schedules.tick`` (100
per transaction, as the scheduler runs it) until none is due, and drops the database. Prints numbers,
asserts nothing."""

from __future__ import annotations

import os
import sys
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from bench.run import scratch_database


def _pure() -> None:
    from app.integrations.schedule_times import Rule, cron_expression, due

    cases = {
        "cron * * * * *, 1000+ missed (capped)": (Rule(cron="* * * * *"), timedelta(days=30)),
        "cron 30 2 * * * Europe/Berlin, 1 year missed": (
            Rule(cron=cron_expression("30 2 * * *"), timezone="Europe/Berlin"),
            timedelta(days=365),
        ),
        "interval 1 s, 1 year missed": (
            Rule(interval_seconds=1, anchor=datetime(2025, 1, 1, tzinfo=UTC)),
            timedelta(days=365),
        ),
    }
    now = datetime(2026, 6, 1, tzinfo=UTC)
    for name, (rule, outage) in cases.items():
        n, started = 0, time.perf_counter()
        while time.perf_counter() - started < 1.0:
            d = due(rule, now - outage, now)
            n += 1
        per = (time.perf_counter() - started) / n * 1e3
        print(f"due(): {name:<48} {per:8.3f} ms/call  (skipped={d.skipped}, capped={d.capped})")


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    with scratch_database("lf_bench_sched") as url:
        os.environ["DATABASE_URL"] = url
        try:
            _run(n)
            _pure()
        finally:
            from app.db import get_engine

            get_engine().dispose()


def _run(n: int) -> None:
    from app.auth import Principal
    from app.db import get_engine, transaction
    from app.engine import definitions
    from app.integrations import schedules

    eng = get_engine()
    ns = "bench"
    who = Principal(
        credential_id="bench", name="bench", namespace_id=ns, namespace=ns, scopes=frozenset(), queues=None
    )
    doc = {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 60,
        "steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 1}],
    }
    with transaction(eng) as conn:
        d = definitions.create_definition(conn, ns, "bench")
        definitions.publish_version(conn, ns, d["id"], doc)
    schedules.MAX_SCHEDULES_PER_NAMESPACE = max(n, schedules.MAX_SCHEDULES_PER_NAMESPACE)
    started = time.perf_counter()
    with transaction(eng) as conn:
        for i in range(n):
            schedules.create_schedule(
                conn,
                who,
                {
                    "name": f"s{i}",
                    "definition_id": d["id"],
                    "version": "v1",
                    "input": {},
                    "interval_seconds": 60,
                    "overlap": "allow",
                },
            )
    created = time.perf_counter() - started
    with eng.begin() as conn:
        conn.execute(
            text(
                "UPDATE workflow_schedules SET anchor_at = anchor_at - interval '1 hour', "
                "next_fire_at = next_fire_at - interval '1 hour'"
            )
        )
    handed, skipped, ticks = 0, 0, 0
    started = time.perf_counter()
    while True:
        with transaction(eng) as conn:
            out = schedules.tick(conn)
        ticks += 1
        handed += len(out)
        skipped += sum(o["skipped"] for o in out)
        if len(out) < schedules.TICK_BATCH:
            break
    took = time.perf_counter() - started
    print(f"create: {n} schedules in {created:.2f} s ({n / created:.0f}/s, one transaction)")
    print(
        f"tick: {handed} due schedules handed out in {ticks} transactions, {took:.2f} s "
        f"({handed / took:.0f} schedules/s); {skipped} missed fire times coalesced into {handed} jobs"
    )


if __name__ == "__main__":
    main()
