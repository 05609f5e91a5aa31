"""``ledgerflow doctor``: is this deployment healthy, and if not, what to fix.

Checks PostgreSQL (reachable, migrations current, autovacuum on and not disabled per table, every
index valid, dead-row bloat of the job tables and of what retention deletes from, a partitioned table's counted
over its partitions, the quota counters against the rows), Redis (configured and answering), the worker
registry (live workers per pool, stale heartbeats), clocks (this machine and each live node against
the database clock: every lease and deadline decision uses database time, so a skewed node's local
timeouts drift), the drain (expired leases left unreclaimed) and the due backlog. Prints one line per
check with what to do; ``--json`` for scripts. Exit code 1 when a check fails (2 with ``--strict``
when one warns), else 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import click

OK, WARN, FAIL = "ok", "warn", "fail"
LIVE_SECONDS = 90  # as the runtime status (L-STATUS)
SKEW_WARN_S, SKEW_FAIL_S = 1.0, 5.0
# the tables whose dead rows the doctor counts: the job tables and what retention deletes rows from (the
# history tables are partitioned: their partitions' rows count under the table, ``_DEAD_ROWS``)
DEAD_ROW_TABLES = (
    "workflow_jobs",
    "workflow_job_executions",
    "workflow_job_effects",
    "workflow_worker_nodes",
    "workflow_instances",
    "workflow_steps",
    "workflow_activations",
    "workflow_tasks",
    "workflow_waits",
    "workflow_signals",
    "workflow_event_batches",
    "idempotency_receipts",
)
DEAD_ROWS_MIN = 10_000
# Dead rows by table: a partitioned table's are its partitions' (``pg_stat_user_tables`` has a row per
# partition and none for the parent), summed under the parent's name with the partitions that hold the most.
# A table is reported when its dead rows, or one partition's, are more than ``:min`` and than its live rows.
_DEAD_ROWS = """
WITH t AS (
    SELECT c.relname AS tab, s.relid <> c.oid AS in_part, s.relname AS part, s.n_live_tup AS live,
           s.n_dead_tup AS dead,
           s.n_dead_tup > :min AND s.n_dead_tup > s.n_live_tup AS part_bloated
    FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = COALESCE(pg_partition_root(s.relid), s.relid)
    WHERE s.schemaname = current_schema() AND c.relname = ANY(:t)
)
SELECT tab, bool_or(in_part) AS partitioned, count(*) AS parts, sum(live) AS live, sum(dead) AS dead,
       (array_agg(part ORDER BY dead DESC) FILTER (WHERE dead > 0))[1:3] AS worst
FROM t GROUP BY tab
HAVING (sum(dead) > :min AND sum(dead) > sum(live)) OR bool_or(part_bloated)
ORDER BY tab
"""
POOL_OF_QUEUE = {"workflow-ledger": "advance", "workflow-ledger-outbound": "outbound"}


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


def _engine() -> Any:
    from app.db import get_engine

    return get_engine()


def _one(sql: str, params: dict[str, Any] | None = None) -> Any:
    from sqlalchemy import text

    with _engine().connect() as conn:
        return conn.execute(text(sql), params or {}).first()


def _all(sql: str, params: dict[str, Any] | None = None) -> list[Any]:
    from sqlalchemy import text

    with _engine().connect() as conn:
        return list(conn.execute(text(sql), params or {}))


# ----------------------------------------------------------------------------------------- checks
def check_database() -> list[Check]:
    t0 = time.monotonic()
    row = _one("SELECT current_setting('server_version') AS v, current_database() AS db")
    ms = (time.monotonic() - t0) * 1000
    return [Check("database", OK, f"PostgreSQL {row.v}, database {row.db} ({ms:.0f} ms to answer)")]


def check_migrations() -> list[Check]:
    import logging

    from alembic.script import ScriptDirectory

    from app.migrate import alembic_config
    from app.settings import get_settings

    logging.getLogger("alembic").setLevel(logging.WARNING)  # its plugin set-up chatter is not a finding
    heads = set(ScriptDirectory.from_config(alembic_config(get_settings().database_url)).get_heads())
    try:
        current = {r.version_num for r in _all("SELECT version_num FROM alembic_version")}
    except Exception:  # no alembic_version table: never migrated
        current = set()
    if current == heads:
        return [Check("migrations", OK, f"at head {', '.join(sorted(heads))}")]
    return [
        Check(
            "migrations",
            FAIL,
            f"database at {', '.join(sorted(current)) or 'nothing'}, code expects {', '.join(sorted(heads))}",
            "run `ledgerflow db upgrade` (before starting the new release's processes)",
        )
    ]


def check_autovacuum() -> list[Check]:
    out: list[Check] = []
    setting = _one("SELECT current_setting('autovacuum') AS av, current_setting('track_counts') AS tc")
    if setting.av != "on" or setting.tc != "on":
        out.append(
            Check(
                "autovacuum",
                FAIL,
                f"autovacuum = {setting.av}, track_counts = {setting.tc}",
                "set autovacuum = on and track_counts = on in postgresql.conf (ALTER SYSTEM SET "
                "autovacuum = on; SELECT pg_reload_conf()): the job tables churn and bloat without it",
            )
        )
    else:
        out.append(Check("autovacuum", OK, "autovacuum on"))
    disabled = _all(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind = 'r' "
        "AND c.reloptions::text[] && ARRAY['autovacuum_enabled=false', 'autovacuum_enabled=off']"
    )
    if disabled:
        names = ", ".join(r.relname for r in disabled)
        out.append(
            Check(
                "autovacuum per table",
                FAIL,
                f"disabled on {names}",
                f"ALTER TABLE <name> RESET (autovacuum_enabled) for: {names}",
            )
        )
    for r in _all(_DEAD_ROWS, {"t": list(DEAD_ROW_TABLES), "min": DEAD_ROWS_MIN}):
        where = f" ({r.parts} partitions; most in {', '.join(r.worst)})" if r.partitioned else ""
        out.append(
            Check(
                f"dead rows {r.tab}",
                WARN,
                f"{r.dead} dead vs {r.live} live rows{where}",
                f"VACUUM (ANALYZE) {', '.join(r.worst) if r.partitioned else r.tab}; check that autovacuum keeps up",
            )
        )
    return out


def check_indexes() -> list[Check]:
    bad = _all(
        "SELECT i.indexrelid::regclass::text AS name, i.indrelid::regclass::text AS tab FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND (NOT i.indisvalid OR NOT i.indisready)"
    )
    if not bad:
        n = _one(
            "SELECT count(*) AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
            "JOIN pg_namespace ns ON ns.oid = c.relnamespace WHERE ns.nspname = current_schema()"
        ).n
        return [Check("indexes", OK, f"{n} indexes, all valid")]
    names = ", ".join(f"{r.name} on {r.tab}" for r in bad)
    return [
        Check(
            "indexes",
            FAIL,
            f"invalid (a failed CREATE INDEX CONCURRENTLY?): {names}",
            "REINDEX INDEX CONCURRENTLY <name> for each (or drop and recreate it)",
        )
    ]


def check_redis() -> list[Check]:
    from app.settings import get_settings

    url = get_settings().redis_url
    if not url:
        return [
            Check(
                "redis",
                WARN,
                "REDIS_URL is not set: no wake hints, pools claim every 2 s",
                "set REDIS_URL for millisecond pickup (nothing is lost without it)",
            )
        ]
    import redis

    try:
        t0 = time.monotonic()
        redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping()
        return [Check("redis", OK, f"answers ({(time.monotonic() - t0) * 1000:.0f} ms)")]
    except redis.RedisError as exc:
        return [
            Check(
                "redis",
                FAIL,
                f"unreachable ({type(exc).__name__}): pools fall back to the 2 s poll",
                "start Redis or fix REDIS_URL; the scheduler runs the drain inline meanwhile",
            )
        ]


def check_workers() -> list[Check]:
    rows = _all(
        """
SELECT node_id, hostname, pid, pools, status, slot_capacity, slots_in_use,
       extract(epoch FROM now() - heartbeat_at) AS age
FROM workflow_worker_nodes
WHERE 'worker' = ANY(roles) AND heartbeat_at > now() - interval '1 day'
ORDER BY heartbeat_at DESC
"""
    )
    out: list[Check] = []
    live = [r for r in rows if r.status == "active" and r.age <= LIVE_SECONDS]
    for queue, pool in POOL_OF_QUEUE.items():
        mine = [r for r in live if queue in (r.pools or [])]
        if mine:
            slots = sum(r.slot_capacity for r in mine)
            busy = sum(r.slots_in_use for r in mine)
            out.append(Check(f"workers {pool}", OK, f"{len(mine)} live, {busy}/{slots} slots busy"))
        else:
            out.append(
                Check(
                    f"workers {pool}",
                    FAIL,
                    f"no live worker for pool {pool} ({queue})",
                    f"start `ledgerflow worker --pool {pool}` (Procfile: worker-{pool})",
                )
            )
    stale = [r for r in rows if r.status == "active" and r.age > LIVE_SECONDS]
    if stale:
        sample = ", ".join(f"{r.node_id[:8]}@{r.hostname}:{r.pid} ({r.age:.0f}s)" for r in stale[:5])
        out.append(
            Check(
                "stale heartbeats",
                WARN,
                f"{len(stale)} node(s) stopped beating without saying so: {sample}",
                "those processes died or hang; their jobs come back through the drain when their "
                "leases expire; check the hosts / restart the processes",
            )
        )
    return out


def check_clocks() -> list[Check]:
    from sqlalchemy import text

    with _engine().connect() as conn:
        t0 = time.time()
        db_now = conn.execute(text("SELECT clock_timestamp()")).scalar_one()
        t1 = time.time()
    local = datetime.fromtimestamp((t0 + t1) / 2, UTC)
    out = [_skew_check("clock (this machine)", (local - db_now).total_seconds(), (t1 - t0) / 2)]
    rows = _all(
        """
SELECT node_id, hostname, pid, extract(epoch FROM node_clock_at - heartbeat_at) AS skew
FROM workflow_worker_nodes
WHERE status = 'active' AND node_clock_at IS NOT NULL AND heartbeat_at > now() - interval '90 seconds'
ORDER BY abs(extract(epoch FROM node_clock_at - heartbeat_at)) DESC
"""
    )
    if rows:
        worst = rows[0]
        skewed = [r for r in rows if abs(r.skew) > SKEW_WARN_S]
        label = f"{worst.node_id[:8]}@{worst.hostname}:{worst.pid}"
        check = _skew_check("clock (worker nodes)", float(worst.skew), 0.0)
        check.detail = f"{len(rows)} live node(s); worst {label}: {check.detail}" + (
            f"; {len(skewed)} beyond {SKEW_WARN_S:g} s" if skewed else ""
        )
        out.append(check)
    return out


def _skew_check(name: str, skew: float, uncertainty: float) -> Check:
    detail = f"{skew:+.3f} s against the database (±{uncertainty:.3f} s)"
    fix = (
        "run NTP (chrony / systemd-timesyncd) on that host; leases and deadlines use database time, "
        "but handler-side timeouts and log timestamps use the local clock"
    )
    if abs(skew) - uncertainty > SKEW_FAIL_S:
        return Check(name, FAIL, detail, fix)
    if abs(skew) - uncertainty > SKEW_WARN_S:
        return Check(name, WARN, detail, fix)
    return Check(name, OK, detail)


def check_ledger() -> list[Check]:
    r = _one(
        """
SELECT count(*) FILTER (WHERE status = 'running' AND lease_until < now() - interval '2 minutes') AS unreclaimed,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE status = 'pending' AND run_at <= now())) AS oldest_due
FROM workflow_jobs WHERE status IN ('running', 'pending')
"""
    )
    out = []
    if r.unreclaimed:
        out.append(
            Check(
                "drain",
                WARN,
                f"{r.unreclaimed} running job(s) with a lease expired over 2 min ago",
                "the drain is not running: start `ledgerflow scheduler` (or run `ledgerflow drain`)",
            )
        )
    else:
        out.append(Check("drain", OK, "no expired lease left unreclaimed"))
    oldest = float(r.oldest_due or 0)
    if oldest > 300:
        out.append(
            Check(
                "backlog",
                WARN,
                f"the oldest due pending job waits {oldest:.0f} s",
                "add worker processes for the busy pool, or look for slow handlers "
                "(`ledgerflow jobs status`)",
            )
        )
    else:
        out.append(Check("backlog", OK, f"oldest due job waits {oldest:.1f} s"))
    return out


def check_quota_counts() -> list[Check]:
    from app.engine.quotas import drift as quota_count_drift

    with _engine().connect() as conn:
        conn.exec_driver_sql("SET LOCAL statement_timeout = '30s'")  # a recount of the unfinished instances
        drift = quota_count_drift(conn, limit=5)
    if not drift:
        return [Check("quota counts", OK, "the quota counters agree with the unfinished instances")]
    sample = "; ".join(
        f"{d['namespace_id']} {d['what']}: kept {d['kept']}, counted {d['counted']}" for d in drift
    )
    return [
        Check(
            "quota counts",
            FAIL,
            f"the quota counters differ from the rows ({sample})",
            "something wrote the instance table behind the engine (TRUNCATE, a bulk load, a hand-made "
            "change): run `ledgerflow db repair-quota-counts`",
        )
    ]


CHECKS: tuple[tuple[str, Callable[[], list[Check]]], ...] = (
    ("database", check_database),
    ("migrations", check_migrations),
    ("autovacuum", check_autovacuum),
    ("indexes", check_indexes),
    ("redis", check_redis),
    ("workers", check_workers),
    ("clock", check_clocks),
    ("ledger", check_ledger),
    ("quota counts", check_quota_counts),
)


def run_checks() -> list[Check]:
    results: list[Check] = []
    for name, fn in CHECKS:
        try:
            results.extend(fn())
        except Exception as exc:  # a broken check is a finding, not a crash
            from app.observability.logs import redact

            msg = redact(f"{type(exc).__name__}: {exc}".splitlines()[0])[:300]
            fix = "check DATABASE_URL and that PostgreSQL is up" if name == "database" else ""
            results.append(Check(name, FAIL, f"could not check: {msg}", fix))
            if name == "database":
                break  # everything else needs the database
    return results


@click.command("doctor")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--strict", is_flag=True, help="exit 2 when a check warns")
def doctor(as_json: bool, strict: bool) -> None:
    """Check the database, Redis, workers, clocks and the drain; print what to fix."""
    results = run_checks()
    worst = (
        FAIL
        if any(c.status == FAIL for c in results)
        else WARN
        if any(c.status == WARN for c in results)
        else OK
    )
    if as_json:
        import json

        click.echo(json.dumps({"status": worst, "checks": [asdict(c) for c in results]}))
    else:
        from rich.table import Table

        from ledgerflow.ops_cli import _console

        mark = {OK: "[green]ok[/green]", WARN: "[yellow]warn[/yellow]", FAIL: "[red]FAIL[/red]"}
        t = Table(title=f"ledgerflow doctor: {worst}", title_justify="left")
        for col in ("check", "status", "detail", "what to do"):
            t.add_column(col, overflow="fold")
        for c in results:
            t.add_row(c.name, mark[c.status], c.detail, c.fix)
        _console().print(t)
    if worst == FAIL:
        raise SystemExit(1)
    if worst == WARN and strict:
        raise SystemExit(2)
