"""How long migration 0016_i14 (compact rows) takes on a large ledger, and what it saves.

    PYTHONPATH=. .venv/bin/ledgerflow env -- .venv/bin/python -m bench.rewrite [--jobs 1000000]

Own database on the server of DATABASE_URL (dropped at the end), migrated to 0015_i14 and filled with
``--jobs`` finished jobs (webhook deliveries and timers, one in 50 a dead letter with an error, a JSON
payload and result) with one attempt each, plus 1 % of them pending. Then it times the upgrade to
0016_i14 (the rewrite of both tables holds their ACCESS EXCLUSIVE locks all along), the downgrade back
and the upgrade again, and prints the tables' sizes under both layouts as the migration leaves them
(heap, and indexes freshly built), after a VACUUM. Numbers, not assertions."""

from __future__ import annotations

import argparse
import time

import psycopg
from alembic import command

from app.migrate import alembic_config, upgrade
from bench.run import libpq, loadavg, scratch_database

FILL_JOBS = """
INSERT INTO workflow_jobs (type, queue, status, payload, run_at, max_attempts, attempts, finished_at,
    created_at, updated_at, trace_id, operation_key, instance_id, result, last_error, error_code)
SELECT CASE WHEN g %% 2 = 0 THEN 'webhook_delivery' ELSE 'delay_wake' END,
       CASE WHEN g %% 2 = 0 THEN 'workflow-ledger-outbound' ELSE 'workflow-ledger' END,
       CASE WHEN g %% 100 = 0 THEN 'pending' WHEN g %% 50 = 0 THEN 'dead' ELSE 'succeeded' END,
       jsonb_build_object('instance_id', md5('i' || g), 'wake', 'timer', 'n', g),
       now() - make_interval(secs => g %% 604800), 5, 1,
       CASE WHEN g %% 100 <> 0 THEN now() - make_interval(secs => g %% 604800) END,
       now() - make_interval(secs => g %% 604800), now(), md5(g::text), md5('o' || g), md5('i' || g),
       CASE WHEN g %% 50 <> 0 AND g %% 100 <> 0 THEN '{"ok": true}'::jsonb END,
       CASE WHEN g %% 50 = 0 AND g %% 100 <> 0 THEN 'receiver answered 503' END,
       CASE WHEN g %% 50 = 0 AND g %% 100 <> 0 THEN 'HANDLER_ERROR' END
FROM generate_series(%s::bigint, %s::bigint) g
"""
FILL_ATTEMPTS = """
INSERT INTO workflow_job_executions (job_id, generation, attempt, status, worker_id, request, response,
    error, error_code, due_at, started_at, finished_at, duration_ms)
SELECT j.id, 1, 1, CASE WHEN j.status = 'dead' THEN 'failed' ELSE 'succeeded' END,
       'node-' || (j.id %% 8) || '-host.example-' || md5((j.id %% 8)::text), j.payload, j.result,
       j.last_error, j.error_code, j.run_at, j.finished_at - interval '20 ms', j.finished_at, 20
FROM workflow_jobs j WHERE j.status <> 'pending' AND j.id BETWEEN %s AND %s
"""
SIZES = """
SELECT c.relname, pg_relation_size(c.oid), pg_indexes_size(c.oid), (SELECT count(*) FROM pg_index WHERE indrelid = c.oid)
FROM pg_class c WHERE c.relname IN ('workflow_jobs', 'workflow_job_executions') ORDER BY 1
"""
CHUNK = 250_000


def _sizes(dsn: str) -> dict[str, tuple[int, int, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE) workflow_jobs, workflow_job_executions")
        return {r[0]: (r[1], r[2], r[3]) for r in conn.execute(SIZES)}


def _timed(label: str, fn: object) -> float:
    t0 = time.monotonic()
    fn()  # type: ignore[operator]
    took = time.monotonic() - t0
    print(f"{label:<40} {took:8.1f} s   (load {loadavg()})", flush=True)
    return took


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.rewrite", description=__doc__.splitlines()[0])
    p.add_argument("--jobs", type=int, default=1_000_000)
    a = p.parse_args()
    with scratch_database("lf_bench_rewrite", "0015_i14") as url:
        dsn = libpq(url)
        t0 = time.monotonic()
        with psycopg.connect(dsn, autocommit=True) as conn:
            for start in range(1, a.jobs + 1, CHUNK):
                end = min(a.jobs, start + CHUNK - 1)
                conn.execute(FILL_JOBS, (start, end))
                conn.execute(FILL_ATTEMPTS, (start, end))
        print(f"filled {a.jobs:,} jobs and their attempts in {time.monotonic() - t0:.0f} s", flush=True)
        cfg = alembic_config(url)
        _timed("upgrade 0015 -> 0016 (the rewrite)", lambda: upgrade(url, "0016_i14"))
        _timed("downgrade 0016 -> 0015", lambda: command.downgrade(cfg, "0015_i14"))
        before = _sizes(dsn)  # the 0015 layout, every index freshly built by the downgrade
        _timed("upgrade 0015 -> 0016 again", lambda: upgrade(url, "0016_i14"))
        after = _sizes(dsn)
        print(
            "bytes per job, both layouts as the migration leaves them (indexes just built), after a VACUUM:"
        )
        print(f"{'':<26} {'heap 0015':>10} {'heap 0016':>10} {'indexes 0015':>13} {'indexes 0016':>13}")
        for table in ("workflow_jobs", "workflow_job_executions"):
            (h0, i0, n0), (h1, i1, n1) = before[table], after[table]
            print(
                f"{table:<26} {h0 / a.jobs:10.1f} {h1 / a.jobs:10.1f} {i0 / a.jobs:9.1f} ({n0:>2}) "
                f"{i1 / a.jobs:9.1f} ({n1:>2})"
            )


if __name__ == "__main__":
    main()
