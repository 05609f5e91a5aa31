"""``python -m bench.console``: server time of the console's job list and of the workflow page of a
100-step instance, with 1,000,000 jobs in the ledger (the target: under 300 ms each); and, with
``--workflows`` instances (1,000,000 by default, a tenth of them FAILED of three causes), the failure
groups and the search by an 8-character id prefix and by a business-key prefix in another case (issue 47:
the target p50 100 ms).

Creates and drops its own database (``lf_bench_<random>``) on the server of ``DATABASE_URL``, fills
``workflow_jobs`` with ``--jobs`` rows (a mix of statuses, types and errors over the last day) and
``--attempts`` attempt rows in the last hour (so the runtime status panel on top of the page has real
work), runs a workflow of ``--steps`` TASK steps for real (ten parallel chains; most steps done, the
rest active, so the page has activations, task attempts, events and audit rows to show), logs in to
``/console`` with a platform-wide operator credential through the Flask test client (no network: what
is timed is the server's work, from request to rendered HTML) and prints the median / p95 / max of
``--repeat`` loads of each page. Printed, never asserted (see bench/README.md).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time

import psycopg

from bench.run import libpq, loadavg, log, percentile, scratch_database

FILL = """
INSERT INTO workflow_jobs (type, queue, status, payload, attempts, max_attempts, generation, last_error,
                           operation_key, trace_id, created_at, updated_at, finished_at, run_at)
SELECT CAST((ARRAY['delay_wake', 'task_timeout', 'event_dispatch', 'webhook_delivery'])[1 + g %% 4]
            AS workflow_job_type),
       CAST(CASE WHEN g %% 4 < 2 THEN 'workflow-ledger' ELSE 'workflow-ledger-outbound' END AS workflow_job_queue),
       CAST((ARRAY['succeeded', 'succeeded', 'succeeded', 'dead', 'failed', 'pending', 'canceled'])[1 + g %% 7]
            AS workflow_job_status),
       jsonb_build_object('n', g), 1, 5, 1,
       CASE WHEN g %% 7 IN (3, 4) THEN 'connect timeout after ' || (g %% 50) || ' ms to receiver ' || (g %% 9) END,
       md5('op' || g), md5('tr' || (g / 5)),
       now() - (g %% 86400) * interval '1 second', now(), now(), now()
FROM generate_series(1, %s) g
"""
ATTEMPTS = """
INSERT INTO workflow_job_executions (job_id, generation, attempt, status, due_at, started_at,
                                     finished_at, duration_ms)
SELECT g, 1, 1, CAST(CASE WHEN g %% 10 = 0 THEN 'failed' ELSE 'succeeded' END AS workflow_attempt_status),
       now() - (g %% 3600) * interval '1 second' - interval '40 ms', now() - (g %% 3600) * interval '1 second',
       now() - (g %% 3600) * interval '1 second' + interval '5 ms', 5
FROM generate_series(1, %s) g
"""
# ``--workflows`` instances of one definition in the bench namespace: every tenth FAILED at one of three
# steps with one of three causes (numbers and ids in the messages, folded by the failure groups)
WORKFLOWS = """
INSERT INTO workflow_instances (id, namespace_id, definition_id, definition_version_id, version, state, input,
    business_key, queues, deadline_at, trace_id, created_at, updated_at, completed_at, error)
SELECT md5('wf' || g), %(ns)s, %(d)s, %(v)s, 'v1',
       CASE WHEN g %% 10 = 0 THEN 'FAILED' WHEN g %% 10 = 1 THEN 'RUNNING' ELSE 'SUCCEEDED' END,
       '{}'::jsonb, 'Order-' || g, '{}', now() + interval '1 day', md5('t' || g),
       now() - (g %% 86400) * interval '1 second', now(), CASE WHEN g %% 10 <> 1 THEN now() END,
       CASE WHEN g %% 10 = 0 THEN jsonb_build_object(
           'step_key', (ARRAY['pay', 'ship', 'mail'])[1 + (g / 10) %% 3], 'code', 'TASK_FAILED',
           'task_id', md5('task' || g),
           'message', (ARRAY['card ' || g || ' declined', 'carrier timeout after ' || (g %% 900) || ' ms',
                             'mailbox ' || md5('m' || g) || ' full'])[1 + (g / 10) %% 3]) END
FROM generate_series(1, %(n)s) g
"""
VARIANTS = {
    "first page (no filter)": "/console/jobs",
    "status=dead,failed": "/console/jobs?status=dead,failed",
    "type + keyword": "/console/jobs?type=webhook_delivery&keyword=receiver+3",
    "older than 1 h": "/console/jobs?min_age_seconds=3600",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--attempts", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument(
        "--workflows", type=int, default=1_000_000, help="instances for the issue-47 pages (0: none)"
    )
    args = ap.parse_args()
    with scratch_database("lf_bench_console") as url:
        try:
            run(libpq(url), args)
        finally:
            from app.db import get_engine

            get_engine().dispose()


def run(dsn: str, args: argparse.Namespace) -> None:
    os.environ["DATABASE_URL"] = dsn
    from app.auth import ALL_SCOPES, create_credential
    from app.db import transaction
    from app.migrate import upgrade
    from app.settings import get_settings
    from web import create_app

    get_settings.cache_clear()
    upgrade(get_settings().database_url)
    log(f"filling {args.jobs} jobs and {args.attempts} attempts")
    with psycopg.connect(dsn) as conn:
        conn.execute(FILL, (args.jobs,))
        conn.execute(ATTEMPTS, (min(args.attempts, args.jobs),))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE workflow_jobs, workflow_job_executions")
    with transaction() as conn:
        issued = create_credential(
            conn, namespace="bench", name="operator", scopes=sorted(ALL_SCOPES), platform=True
        )
        token = issued.token
    log(f"running a workflow of {args.steps} steps")
    workflow_id = run_workflow(issued.namespace_id, args.steps)
    some_id = fill_workflows(dsn, issued.namespace_id, args.workflows) if args.workflows else None
    app = create_app()
    client = app.test_client()
    page = client.get("/console/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    assert client.post("/console/login", data={"token": token, "csrf_token": csrf}).status_code == 302
    print(
        f"\nconsole pages, {args.jobs:,} jobs, {args.attempts:,} attempts in the last hour; "
        f"server time per page load (ms), {args.repeat} loads each; load {loadavg()}"
    )
    print(f"{'page':<34} {'median':>8} {'p95':>8} {'max':>8} {'rows':>5}")
    variants = {
        **VARIANTS,
        "runtime status panel (own request)": "/console/jobs/status-panel",
        f"workflow page ({args.steps} steps)": f"/console/workflows/{workflow_id}",
    }
    if some_id is not None:  # issue 47, over --workflows instances
        variants.update(
            {
                "overview (the console's home)": "/console/overview",
                "failure groups (page)": "/console/workflows/failure-groups",
                "search: 8-char id prefix": f"/console/workflows?id_prefix={some_id[:8]}",
                "search: key prefix, other case": "/console/workflows?business_key_prefix=ORDER-77777",
                "search box: 8-char id prefix": f"/console/search?q={some_id[:8]}",
            }
        )
    for name, url in variants.items():
        for _ in range(3):  # warm the connection pool and the caches
            client.get(url)
        times = []
        rows = 0
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = client.get(url)
            times.append((time.perf_counter() - t0) * 1000)
            assert r.status_code in (200, 302), r.status_code
            body = r.get_data(as_text=True)
            rows = (
                body.count('name="job_ids"') if "/jobs" in url else body.count("/steps/")
            )  # rows / step links
        print(
            f"{name:<34} {statistics.median(times):8.1f} {percentile(times, 95):8.1f} {max(times):8.1f} {rows:>5}"
        )
    cursor_page = client.get("/console/jobs").get_data(as_text=True)
    nxt = re.search(r'rel="next" href="([^"]+)"', cursor_page)
    if nxt:
        url = "/console/jobs" + nxt.group(1).replace("&amp;", "&")
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            client.get(url)
            times.append((time.perf_counter() - t0) * 1000)
        print(
            f"{'second page (cursor)':<34} {statistics.median(times):8.1f} {percentile(times, 95):8.1f} "
            f"{max(times):8.1f}"
        )


def fill_workflows(dsn: str, namespace_id: str, n: int) -> str:
    """``n`` instances (see ``WORKFLOWS``) of a definition of their own; the id of one of them."""
    from app.db import transaction
    from app.engine import definitions

    with transaction() as conn:
        d = definitions.create_definition(conn, namespace_id, "bench-orders", None)
        v = definitions.publish_version(
            conn,
            namespace_id,
            d["id"],
            {
                "version": "v1",
                "input_schema": {},
                "deadline_seconds": 86400,
                "steps": [{"key": "pay", "kind": "TIMER", "delay_seconds": 1}],
            },
        )
    log(f"filling {n:,} workflows ({n // 10:,} FAILED)")
    with psycopg.connect(dsn) as conn:
        conn.execute(WORKFLOWS, {"ns": namespace_id, "d": d["id"], "v": v["id"], "n": n})
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE workflow_instances")
        return str(conn.execute("SELECT md5('wf' || 77777)").fetchone()[0])  # type: ignore[index]


def run_workflow(namespace_id: str, steps: int) -> str:
    """A ``steps``-step workflow run for real through the engine: ten parallel chains of TASK steps;
    every claimed task but the last one of each chain is completed (so most steps are done, some
    active), each completion advancing the instance as a worker's would."""
    from app.db import transaction
    from app.engine import definitions, instances, task_protocol
    from app.settings import TASK_LEASE_SECONDS

    chains = 10
    doc_steps = []
    for i in range(steps):
        chain, pos = i % chains, i // chains
        after = [f"c{chain}-s{pos - 1}"] if pos else []
        doc_steps.append({"key": f"c{chain}-s{pos}", "kind": "TASK", "queue": "bench-q", "after": after})
    with transaction() as conn:
        d = definitions.create_definition(conn, namespace_id, "bench-100-steps", None)
        definitions.publish_version(
            conn,
            namespace_id,
            d["id"],
            {"version": "v1", "input_schema": {}, "deadline_seconds": 86400, "steps": doc_steps},
        )
        inst = instances.start_workflow(
            conn, namespace_id, {"definition_id": d["id"], "version": "v1", "input": {"order": "bench"}}
        )
    done = 0
    while done < steps - chains:
        with transaction() as conn:
            claimed = task_protocol.claim(conn, namespace_id, ["bench-q"], 16, TASK_LEASE_SECONDS.get())
        if not claimed:
            break
        for t in claimed:
            if done >= steps - chains:
                break
            with transaction() as conn:
                task_protocol.complete(
                    conn, namespace_id, t["id"], t["epoch"], {"step": t["step_key"], "ok": True}
                )
            done += 1
    return inst["id"]


if __name__ == "__main__":
    main()
