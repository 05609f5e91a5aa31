"""Dead tuples and table size under a steady load, with autovacuum at its defaults.

    PYTHONPATH=. .venv/bin/ledgerflow env -- .venv/bin/python -m bench.bloat [--minutes 30] [--rate 200]

The machine's PostgreSQL may run with autovacuum off (this one does), so the run starts its own
PostgreSQL cluster (pgserver's binaries, a fresh ``initdb`` in a temporary folder: every setting at
its default, autovacuum on) and removes it at the end. Both systems run side by side on that one
cluster, in two databases, for the same minutes and at the same rate:

- ledgerflow: one ``ledgerflow worker --pool advance`` process (4 slots, the no-op handler of
  ``bench/handlers.py``); a producer process calls ``app.ledger.enqueue.enqueue`` ``rate / 10`` times
  in one transaction every 100 ms (wake hints through Redis, as in production);
- procrastinate: one ``procrastinate worker --concurrency 4`` process (the no-op ``async`` task of
  ``bench/peer.py``); a producer process calls ``noop.batch_defer`` with ``rate / 10`` jobs every 100 ms.

Neither deletes finished jobs during the run (ledgerflow's retention keeps 7 days by default;
procrastinate keeps its jobs unless told to delete them), so live rows grow alike; what differs is
how many *dead* tuples each leaves for vacuum and how large its tables and indexes get. Every 30 s
and at the end the run samples, per table of each system, ``n_live_tup``, ``n_dead_tup`` and
``pg_total_relation_size`` (heap + indexes + TOAST) and the autovacuum count. Numbers only, never
assertions; the samples go to ``bench/results/bloat-<time>.json``.

``--candidate "CREATE INDEX cand_x ON workflow_jobs (...)"`` (repeatable) builds an index that is not
part of the schema beside the real ones before the load starts, so a candidate is measured under the
very same churn (its size is in the per-relation table; it is counted in the totals too, so leave it
out of a run whose totals are quoted).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from app.migrate import upgrade
from bench.run import (
    ROOT,
    Proc,
    base_env,
    loadavg,
    log,
    procrastinate_argv,
    spawn_logged,
    terminate,
    wait_ready,
    with_database,
)
from ledgerflow.devenv import import_pgserver

LEDGER_TABLES = ("workflow_jobs", "workflow_job_executions", "workflow_worker_nodes")
PEER_TABLES = ("procrastinate_jobs", "procrastinate_events", "procrastinate_workers")
SAMPLE_EVERY = 30.0
TICK = 0.1  # producers enqueue rate * TICK jobs per transaction, every TICK seconds

_STATS = """
SELECT c.relname, coalesce(s.n_live_tup, 0), coalesce(s.n_dead_tup, 0),
       pg_total_relation_size(c.oid), coalesce(s.autovacuum_count, 0), coalesce(s.n_tup_hot_upd, 0),
       coalesce(s.n_tup_upd, 0)
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.relname = ANY(%s) AND c.relkind = 'r'
ORDER BY c.relname
"""


# ------------------------------------------------------------------------------------- producers
def _paced(rate: float, seconds: float, batch: Any) -> int:
    """Call ``batch(n)`` every TICK seconds on a fixed schedule (no drift) for ``seconds``."""
    per_tick = max(1, round(rate * TICK))
    start = time.monotonic()
    ticks = int(seconds / TICK)
    for i in range(ticks):
        batch(per_tick)
        delay = start + (i + 1) * TICK - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    return ticks * per_tick


def produce_ledger(rate: float, seconds: float) -> None:
    from actors import hints as hint_actors
    from app.db import transaction
    from app.ledger.enqueue import enqueue

    hint_actors.install_publisher()

    def batch(n: int) -> None:
        with transaction() as conn:
            for _ in range(n):
                enqueue(conn, "delay_wake", {})

    _paced(rate, seconds, batch)


def produce_peer(rate: float, seconds: float) -> None:
    from bench.peer import app, noop

    with app.open():
        _paced(rate, seconds, lambda n: noop.batch_defer(*({} for _ in range(n))))


# ------------------------------------------------------------------------------------- the run
def sample(dsn: str, tables: tuple[str, ...]) -> dict[str, dict[str, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(_STATS, (list(tables),)).fetchall()
    return {
        r[0]: {
            "live": r[1],
            "dead": r[2],
            "bytes": r[3],
            "autovacuums": r[4],
            "hot_updates": r[5],
            "updates": r[6],
        }
        for r in rows
    }


_RELATIONS = """
SELECT t.relname, c.relname, c.relkind::text, pg_relation_size(c.oid)
FROM pg_class t
JOIN pg_class c ON c.oid = t.oid OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = t.oid)
    OR c.oid = t.reltoastrelid
WHERE t.relname = ANY(%s) AND t.relkind = 'r'
ORDER BY t.relname, pg_relation_size(c.oid) DESC
"""


def relations(dsn: str, tables: tuple[str, ...]) -> list[list[Any]]:
    """Where the bytes are: each table's heap, TOAST and every index, largest first."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [list(r) for r in conn.execute(_RELATIONS, (list(tables),)).fetchall()]


def totals(snapshot: dict[str, dict[str, int]]) -> dict[str, int]:
    return {k: sum(t[k] for t in snapshot.values()) for k in ("live", "dead", "bytes", "autovacuums")}


def run(minutes: float, rate: float, candidates: tuple[str, ...] = ()) -> dict[str, Any]:
    pgserver = import_pgserver()
    tmp = Path(tempfile.mkdtemp(prefix="lf-bloat-"))
    os.chmod(tmp, 0o755)  # pgserver's own user (when run as root) must reach its data folder
    server = pgserver.get_server(tmp / "pg", cleanup_mode="delete")
    uid = uuid.uuid4().hex[:8]
    base = server.get_uri("postgres")
    lf_dsn, pq_dsn = with_database(base, "lf_bloat"), with_database(base, "lf_bloat_pq")
    with psycopg.connect(base, autocommit=True) as conn:
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name LIKE 'autovacuum%%' OR name = 'server_version'"
            ).fetchall()
        )
        conn.execute("CREATE DATABASE lf_bloat")
        conn.execute("CREATE DATABASE lf_bloat_pq")
    log(
        f"private PostgreSQL {settings.get('server_version')} under {tmp}: autovacuum={settings['autovacuum']}"
    )

    env = base_env()
    lf_env = env | {
        "DATABASE_URL": lf_dsn,
        "LEDGERFLOW_REDIS_NAMESPACE": f"lf-bloat-{uid}",
        "LEDGERFLOW_HANDLERS": "bench.handlers",
        "LEDGERFLOW_METRICS": "0",
    }
    pq_env = env | {"BENCH_PQ_DSN": pq_dsn}
    upgrade(lf_dsn)
    with psycopg.connect(lf_dsn, autocommit=True) as conn:
        for statement in candidates:
            conn.execute(statement)
    os.environ["BENCH_PQ_DSN"] = pq_dsn
    from bench.peer import app

    with app.open():
        app.schema_manager.apply_schema()

    bin_dir = Path(sys.executable).parent
    seconds = minutes * 60
    procs: list[Proc] = []
    samples: list[dict[str, Any]] = []

    def spawn(argv: list[str], env: dict[str, str], name: str) -> Proc:
        procs.append(spawn_logged(argv, env, tmp / f"{name}.log"))
        return procs[-1]

    try:
        wait_ready(
            [spawn([str(bin_dir / "ledgerflow"), "worker", "--pool", "advance"], lf_env, "lf-worker")],
            "ledgerflow worker",
        )
        spawn(procrastinate_argv(bin_dir), pq_env, "pq-worker")
        time.sleep(2.0)
        common = ["--rate", str(rate), "--seconds", str(seconds)]
        me = [sys.executable, "-m", "bench.bloat"]
        producers = [
            spawn([*me, "produce", "ledger", *common], lf_env, "lf-producer"),
            spawn([*me, "produce", "peer", *common], pq_env, "pq-producer"),
        ]
        t0 = time.monotonic()
        log(f"steady load: {rate:g} jobs/s into each system for {minutes:g} min")
        while True:
            elapsed = time.monotonic() - t0
            done = all(p.popen.poll() is not None for p in producers)
            snap = {
                "t": round(elapsed),
                "load": loadavg(),
                "ledgerflow": sample(lf_dsn, LEDGER_TABLES),
                "procrastinate": sample(pq_dsn, PEER_TABLES),
            }
            samples.append(snap)
            a, b = totals(snap["ledgerflow"]), totals(snap["procrastinate"])
            log(
                f"t={elapsed:5.0f}s ledgerflow live {a['live']:,} dead {a['dead']:,} {a['bytes'] / 2**20:.1f} MiB"
                f" | procrastinate live {b['live']:,} dead {b['dead']:,} {b['bytes'] / 2**20:.1f} MiB"
            )
            if done:
                break
            time.sleep(min(SAMPLE_EVERY, max(1.0, seconds + 1 - elapsed)))
        for p in producers:
            if p.popen.returncode:
                raise RuntimeError(f"a producer failed: see {tmp}")
        with psycopg.connect(lf_dsn, autocommit=True) as conn:
            lf_done = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FROM workflow_jobs"
            ).fetchone()
        with psycopg.connect(pq_dsn, autocommit=True) as conn:
            pq_done = conn.execute(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'), count(*) FROM procrastinate_jobs"
            ).fetchone()
        rels = {
            "ledgerflow": relations(lf_dsn, LEDGER_TABLES),
            "procrastinate": relations(pq_dsn, PEER_TABLES),
        }
    finally:
        for p in procs:
            terminate(p)
        server.cleanup()
    return {
        "minutes": minutes,
        "rate": rate,
        "candidates": list(candidates),
        "postgres": settings,
        "jobs": {"ledgerflow": list(lf_done), "procrastinate": list(pq_done)},
        "samples": samples,
        "relations": rels,
    }


def report(doc: dict[str, Any]) -> str:
    samples = doc["samples"]
    last = samples[-1]
    peak = {name: max(totals(s[name])["dead"] for s in samples) for name in ("ledgerflow", "procrastinate")}
    lines = [
        f"Steady {doc['rate']:g} jobs/s for {doc['minutes']:g} min into each system, one worker process each, "
        f"PostgreSQL {doc['postgres'].get('server_version')} with autovacuum at its defaults",
        "{:<34} {:>14} {:>14} {:>8}".format("after the run", "ledgerflow", "procrastinate", "ratio"),
        "-" * 73,
    ]
    a, b = totals(last["ledgerflow"]), totals(last["procrastinate"])
    rows = [
        (
            "jobs succeeded / enqueued",
            f"{doc['jobs']['ledgerflow'][0]:,}/{doc['jobs']['ledgerflow'][1]:,}",
            f"{doc['jobs']['procrastinate'][0]:,}/{doc['jobs']['procrastinate'][1]:,}",
            "",
        ),
        ("dead tuples at the end", f"{a['dead']:,}", f"{b['dead']:,}", _ratio(a["dead"], b["dead"])),
        (
            "dead tuples, peak of the samples",
            f"{peak['ledgerflow']:,}",
            f"{peak['procrastinate']:,}",
            _ratio(peak["ledgerflow"], peak["procrastinate"]),
        ),
        ("live tuples at the end", f"{a['live']:,}", f"{b['live']:,}", _ratio(a["live"], b["live"])),
        (
            "tables + indexes (MiB)",
            f"{a['bytes'] / 2**20:,.1f}",
            f"{b['bytes'] / 2**20:,.1f}",
            _ratio(a["bytes"], b["bytes"]),
        ),
        ("autovacuum runs", f"{a['autovacuums']}", f"{b['autovacuums']}", ""),
    ]
    lines += ["{:<34} {:>14} {:>14} {:>8}".format(*r) for r in rows]
    lines.append("per table (live / dead / MiB / HOT updates of all updates):")
    for name in ("ledgerflow", "procrastinate"):
        for table, t in last[name].items():
            lines.append(
                f"  {table:<30} {t['live']:>10,} {t['dead']:>9,} {t['bytes'] / 2**20:>8.1f}"
                f"   HOT {t['hot_updates']:,}/{t['updates']:,}"
            )
    lines.append("per relation at the end (bytes per enqueued job):")
    for name in ("ledgerflow", "procrastinate"):
        n = max(1, doc["jobs"][name][1])
        for table, rel, kind, size in doc.get("relations", {}).get(name, []):
            what = {"r": "heap", "i": "index", "t": "toast"}.get(kind, kind)
            lines.append(f"  {table:<26} {what:<5} {rel:<44} {size / 2**20:>8.1f} MiB {size / n:>7.1f} B")
    lines.append("(ratio = ledgerflow / procrastinate, lower is better)")
    return "\n".join(lines)


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m bench.bloat",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="cmd")
    prod = sub.add_parser("produce", help="(internal) one system's steady producer")
    prod.add_argument("system", choices=["ledger", "peer"])
    prod.add_argument("--rate", type=float, required=True)
    prod.add_argument("--seconds", type=float, required=True)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=200.0, help="jobs per second into each system")
    p.add_argument("--candidate", action="append", default=[], help="an extra CREATE INDEX to measure")
    a = p.parse_args(argv)
    if a.cmd == "produce":
        (produce_ledger if a.system == "ledger" else produce_peer)(a.rate, a.seconds)
        return
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    doc = run(a.minutes, a.rate, tuple(a.candidate))
    table = report(doc)
    out = ROOT / "bench" / "results"
    out.mkdir(exist_ok=True)
    path = out / f"bloat-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(doc | {"table": table}, indent=2, default=str))
    print(table)
    print(f"(samples in {path.relative_to(ROOT)})")


if __name__ == "__main__":
    main()
