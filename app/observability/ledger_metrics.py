"""Metrics read from PostgreSQL at scrape time: what the ledger and the engine tables know, correct
whatever process or host did the work (docs/decisions/observability.md, "Metrics from two sources").

Each group is one short read-only query under a statement timeout; a failing group is skipped (and
``ledgerflow_ledger_scrape_errors`` says which), never the whole scrape. Results are cached for
``LEDGERFLOW_METRICS_LEDGER_TTL`` seconds (default 5) per process, so several scrapers or gunicorn
workers do not multiply the load."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from sqlalchemy import Connection

from app.db import get_engine
from app.db_time import local_statement_timeout
from app.settings import METRICS_LEDGER_TTL
from app.sql import query, run

log = logging.getLogger(__name__)

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
LIVE_NODE_SECONDS = 90  # as the runtime status (L-STATUS): a heartbeat within 90 s
POOL_OF_QUEUE = {"workflow-ledger": "advance", "workflow-ledger-outbound": "outbound"}

_JOBS = query(
    "metrics_jobs_by_state",
    "SELECT type, status, count(*) AS n FROM workflow_jobs GROUP BY type, status",
)
_LAG = query(
    "metrics_queue_lag",
    """
SELECT queue, extract(epoch FROM now() - min(run_at)) AS lag FROM workflow_jobs
WHERE status = 'pending' AND run_at <= now() GROUP BY queue
""",
)
_SLOTS = query(
    "metrics_queue_slots",
    f"""
SELECT q.queue, count(*) AS nodes, sum(n.slot_capacity) AS capacity, sum(n.slots_in_use) AS in_use
FROM workflow_worker_nodes n CROSS JOIN LATERAL unnest(n.pools) AS q(queue)
WHERE n.status = 'active' AND n.heartbeat_at > now() - interval '{LIVE_NODE_SECONDS} seconds'
GROUP BY q.queue
""",
)
_INSTANCES = query(
    "metrics_instances_by_state",
    "SELECT state, count(*) AS n FROM workflow_instances GROUP BY state",
)
_SIGNALS = query(
    "metrics_signals_by_state",
    "SELECT state, coalesce(disposition, '') AS disposition, count(*) AS n FROM workflow_signals "
    "GROUP BY state, disposition",
)


def _jobs(conn: Connection) -> Iterator[Metric]:
    g = GaugeMetricFamily(
        "ledgerflow_jobs", "Jobs in the ledger now, by type and status", labels=["type", "status"]
    )
    for r in run(conn, _JOBS):
        g.add_metric([r.type, r.status], r.n)
    yield g
    lag = GaugeMetricFamily(
        "ledgerflow_queue_oldest_due_seconds",
        "Age of the oldest due pending job (0 when none is due), by pool",
        labels=["pool"],
    )
    seen = {r.queue: float(r.lag) for r in run(conn, _LAG)}
    for queue, pool in POOL_OF_QUEUE.items():
        lag.add_metric([pool], max(0.0, seen.get(queue, 0.0)))
    yield lag


def _slots(conn: Connection) -> Iterator[Metric]:
    rows = {r.queue: r for r in run(conn, _SLOTS)}
    in_use = GaugeMetricFamily(
        "ledgerflow_pool_slots_in_use",
        "Slots running a handler on live workers (last heartbeat)",
        labels=["pool"],
    )
    capacity = GaugeMetricFamily("ledgerflow_pool_slots_capacity", "Slots of live workers", labels=["pool"])
    nodes = GaugeMetricFamily("ledgerflow_worker_nodes_live", "Live worker processes", labels=["pool"])
    for queue, pool in POOL_OF_QUEUE.items():
        r = rows.get(queue)
        in_use.add_metric([pool], int(r.in_use) if r else 0)
        capacity.add_metric([pool], int(r.capacity) if r else 0)
        nodes.add_metric([pool], int(r.nodes) if r else 0)
    yield from (in_use, capacity, nodes)


def _workflows(conn: Connection) -> Iterator[Metric]:
    counts = {r.state: r.n for r in run(conn, _INSTANCES)}
    starts = CounterMetricFamily("ledgerflow_workflow_starts", "Workflow instances started (ledger count)")
    starts.add_metric([], sum(counts.values()))
    ends = CounterMetricFamily(
        "ledgerflow_workflow_ends", "Workflow instances ended, by final state", labels=["state"]
    )
    for state in TERMINAL:
        ends.add_metric([state], counts.get(state, 0))
    current = GaugeMetricFamily(
        "ledgerflow_workflow_instances", "Unfinished workflow instances, by state", labels=["state"]
    )
    for state, n in sorted(counts.items()):
        if state not in TERMINAL:
            current.add_metric([state], n)
    yield from (starts, ends, current)
    signals = CounterMetricFamily(
        "ledgerflow_workflow_signals",
        "Workflow signals by state and disposition (PENDING signals have none yet)",
        labels=["state", "disposition"],
    )
    for r in run(conn, _SIGNALS):
        signals.add_metric([r.state, r.disposition], r.n)
    yield signals


GROUPS: tuple[tuple[str, Callable[[Connection], Iterator[Metric]]], ...] = (
    ("jobs", _jobs),
    ("slots", _slots),
    ("workflows", _workflows),
)


class LedgerCollector:
    """A prometheus-client collector over the ledger (registered per scrape, never globally)."""

    _shared: LedgerCollector | None = None

    def __init__(self, engine: Any = None, ttl: float | None = None) -> None:
        self._engine = engine
        self.ttl = METRICS_LEDGER_TTL.get() if ttl is None else ttl
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None

    @classmethod
    def shared(cls) -> LedgerCollector:
        if cls._shared is None:
            cls._shared = cls()
        return cls._shared

    def invalidate(self) -> None:
        self._cached = None

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self.ttl:
                self._cached = (now, self._read())
            return iter(list(self._cached[1]))

    def _read(self) -> list[Metric]:
        started = time.perf_counter()
        engine = self._engine or get_engine()
        out: list[Metric] = []
        errors = GaugeMetricFamily(
            "ledgerflow_ledger_scrape_errors",
            "1 when a group of ledger metrics could not be read",
            labels=["group"],
        )
        for name, group in GROUPS:
            try:
                # read only as a connection option (BEGIN READ ONLY), not a first statement: behind a
                # transaction pooler the first statement sets the session settings (app.db)
                with engine.connect().execution_options(postgresql_readonly=True) as conn, conn.begin():
                    local_statement_timeout(conn, 2000)
                    out.extend(group(conn))
                errors.add_metric([name], 0)
            except Exception as exc:  # a scrape never fails as a whole
                log.warning("ledger metrics %s not read: %s", name, type(exc).__name__)
                errors.add_metric([name], 1)
        out.append(errors)
        took = GaugeMetricFamily("ledgerflow_ledger_scrape_seconds", "Time spent reading the ledger metrics")
        took.add_metric([], time.perf_counter() - started)
        out.append(took)
        return out
