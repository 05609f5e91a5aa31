"""Process-level Prometheus instruments and the ``/metrics`` exposition.

Two sources, chosen per metric (docs/decisions/observability.md, "Metrics from two sources"):

- **event counters and histograms** (jobs enqueued / claimed / settled, attempt duration, queue wait,
  hints, wake-ups, lease reclaims, fenced writes, drain runs, API requests) are counted where they
  happen, with ``prometheus-client``. With ``PROMETHEUS_MULTIPROC_DIR`` set (``ledgerflow dev`` sets
  it; every process of one host shares the directory) each process writes its values to memory-mapped
  files there and the web process's ``/metrics`` sums them all (the client library's multiprocess
  mode). Without it, ``/metrics`` shows the serving process only.
- **ledger facts** (jobs by status, pool slots, workflow starts / ends / signals, queue lag) are read
  from PostgreSQL at scrape time (``app.observability.ledger_metrics``): the ledger is the truth in
  every process on every host.

``LEDGERFLOW_METRICS=0`` turns the process-level instruments into no-ops (the benchmark's baseline).
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from app.observability.ledger_metrics import LedgerCollector
from app.settings import METRICS, METRICS_ADDR, METRICS_PORT, PROMETHEUS_MULTIPROC_DIR

ENABLED = METRICS.get()

# Seconds. Attempts of no-op handlers take ~1 ms, outbound calls up to the 10 min deadline.
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 600)
# Time from due (run_at) to claim: ~ms with hints, up to the 2 s poll without, minutes when saturated.
WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 2.5, 5, 10, 30, 60, 300, 900)
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

JOBS_ENQUEUED = Counter(
    "ledgerflow_jobs_enqueued", "Jobs inserted by enqueue() (counted after commit)", ["type", "pool"]
)
JOBS_CLAIMED = Counter("ledgerflow_jobs_claimed", "Attempts started (claims)", ["type", "pool"])
JOBS_SETTLED = Counter(
    "ledgerflow_jobs_settled",
    "Attempts settled by their executor, by the job's new state (succeeded, retry, failed, dead)",
    ["type", "pool", "outcome"],
)
ATTEMPT_DURATION = Histogram(
    "ledgerflow_job_attempt_duration_seconds",
    "Handler run time of one attempt",
    ["type"],
    buckets=DURATION_BUCKETS,
)
QUEUE_WAIT = Histogram(
    "ledgerflow_job_queue_wait_seconds",
    "Claim time minus due time (run_at), database clock",
    ["type"],
    buckets=WAIT_BUCKETS,
)
HINT_PUBLISHES = Counter(
    "ledgerflow_hint_publishes",
    "Wake-hint publish attempts: sent, coalesced (one already outstanding), failed (Redis error), "
    "suppressed (circuit breaker open after a failure)",
    ["queue", "result"],
)
HINT_WAKEUPS = Counter("ledgerflow_hint_wakeups", "Wake hints received by a worker", ["queue"])
POLL_WAKEUPS = Counter(
    "ledgerflow_poll_wakeups", "Pool passes started by the short poll (no hint, no finished job)", ["queue"]
)
LEASE_RECLAIMS = Counter(
    "ledgerflow_lease_reclaims", "Running jobs reclaimed by the drain, by new state", ["outcome"]
)
FENCED_WRITES = Counter(
    "ledgerflow_fenced_writes_refused",
    "Writes of a stale executor that matched no row (settle, renew, transaction)",
    ["kind"],
)
DRAIN_RUNS = Counter(
    "ledgerflow_drain_runs", "Drain runs (ran, or skipped: another run held the drain)", ["result"]
)
DRAIN_DURATION = Histogram(
    "ledgerflow_drain_duration_seconds", "Wall time of one drain run", buckets=HTTP_BUCKETS + (30, 60, 120)
)
# The last drain run that ran (the console's engine health page; in multiprocess mode the most recent
# value of any process wins).
DRAIN_LAST_AT = Gauge(
    "ledgerflow_drain_last_run_timestamp_seconds",
    "Unix time the last drain run ended",
    multiprocess_mode="max",
)
DRAIN_LAST_DURATION = Gauge(
    "ledgerflow_drain_last_duration_seconds",
    "Wall time of the last drain run",
    multiprocess_mode="mostrecent",
)
DRAIN_LAST_RECLAIMED = Gauge(
    "ledgerflow_drain_last_reclaimed",
    "Jobs the last drain run reclaimed, by new state",
    ["outcome"],
    multiprocess_mode="mostrecent",
)
API_REQUESTS = Counter(
    "ledgerflow_api_requests", "HTTP requests served, by route template", ["route", "method", "status"]
)
API_LATENCY = Histogram(
    "ledgerflow_api_request_duration_seconds",
    "HTTP request latency",
    ["route", "method"],
    buckets=HTTP_BUCKETS,
)


class _Children(dict):
    """Label children by label tuple: one dict lookup on the hot path instead of ``labels()``."""

    def __init__(self, metric: Any) -> None:
        super().__init__()
        self.metric = metric

    def __missing__(self, key: tuple[str, ...]) -> Any:
        child = self.metric.labels(*key)
        self[key] = child
        return child


_enq, _claimed, _settled = _Children(JOBS_ENQUEUED), _Children(JOBS_CLAIMED), _Children(JOBS_SETTLED)
_duration, _wait = _Children(ATTEMPT_DURATION), _Children(QUEUE_WAIT)
_hints, _hint_wake, _poll = _Children(HINT_PUBLISHES), _Children(HINT_WAKEUPS), _Children(POLL_WAKEUPS)
_reclaims, _fenced, _drains = _Children(LEASE_RECLAIMS), _Children(FENCED_WRITES), _Children(DRAIN_RUNS)
_api, _api_latency = _Children(API_REQUESTS), _Children(API_LATENCY)

# The job's new status after a settlement -> the outcome label.
OUTCOME_OF_STATUS = {"succeeded": "succeeded", "pending": "retry", "failed": "failed", "dead": "dead"}


# ----------------------------------------------------------------------------------------- hooks
def jobs_enqueued(counts: dict[tuple[str, str], int]) -> None:
    if ENABLED:
        for key, n in counts.items():
            _enq[key].inc(n)


def job_claimed(job_type: str, pool: str, wait_seconds: float) -> None:
    if ENABLED:
        _claimed[(job_type, pool)].inc()
        _wait[(job_type,)].observe(max(0.0, wait_seconds))


def attempt_finished(job_type: str, seconds: float) -> None:
    if ENABLED:
        _duration[(job_type,)].observe(seconds)


def job_settled(job_type: str, pool: str, status: str) -> None:
    if ENABLED:
        _settled[(job_type, pool, OUTCOME_OF_STATUS.get(status, status))].inc()


def hint_published(queue: str, result: str) -> None:
    if ENABLED:
        _hints[(queue, result)].inc()


def hint_wakeup(queue: str) -> None:
    if ENABLED:
        _hint_wake[(queue,)].inc()


def poll_wakeup(queue: str) -> None:
    if ENABLED:
        _poll[(queue,)].inc()


def lease_reclaimed(outcome: str, n: int = 1) -> None:
    if ENABLED and n:
        _reclaims[(outcome,)].inc(n)


def fenced_write(kind: str, n: int = 1) -> None:
    if ENABLED and n:
        _fenced[(kind,)].inc(n)


def drain_run(ran: bool, seconds: float, to_pending: int = 0, to_dead: int = 0) -> None:
    if ENABLED:
        _drains[("ran" if ran else "skipped",)].inc()
        if ran:
            DRAIN_DURATION.observe(seconds)
            DRAIN_LAST_AT.set(time.time())
            DRAIN_LAST_DURATION.set(seconds)
            DRAIN_LAST_RECLAIMED.labels("pending").set(to_pending)
            DRAIN_LAST_RECLAIMED.labels("dead").set(to_dead)


def api_request(route: str, method: str, status: int, seconds: float) -> None:
    if ENABLED:
        _api[(route, method, str(status))].inc()
        _api_latency[(route, method)].observe(seconds)


# ----------------------------------------------------------------------------------------- exposition
def multiprocess_dir() -> str | None:
    return PROMETHEUS_MULTIPROC_DIR.get()


class _ThisProcess:
    """The default registry's samples (this process only, when not in multiprocess mode)."""

    def collect(self):
        return REGISTRY.collect()


def process_registry() -> CollectorRegistry:
    """A registry with every process's instruments: all processes sharing PROMETHEUS_MULTIPROC_DIR,
    or this process alone when it is unset."""
    registry = CollectorRegistry(auto_describe=False)
    path = multiprocess_dir()
    if path:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry, path=path)
    else:
        registry.register(_ThisProcess())
    return registry


def engine_activity() -> dict[str, Any]:
    """What the pools and the drain did since their processes started, summed over every process
    sharing PROMETHEUS_MULTIPROC_DIR (this process alone without it): wake-ups by hint vs by poll per
    queue, drain runs (ran / skipped, total time), the last run (end time, duration, reclaimed), lease
    reclaims by new state."""
    wakeups: dict[str, dict[str, float]] = {}
    drain: dict[str, Any] = {
        "ran": 0.0,
        "skipped": 0.0,
        "seconds": 0.0,
        "last_at": None,
        "last_duration": None,
        "last_reclaimed": {},
    }
    reclaims: dict[str, float] = {}
    for family in process_registry().collect():
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name in ("ledgerflow_hint_wakeups_total", "ledgerflow_poll_wakeups_total"):
                kind = "hint" if "hint" in name else "poll"
                q = wakeups.setdefault(labels.get("queue", "?"), {"hint": 0.0, "poll": 0.0})
                q[kind] += value
            elif name == "ledgerflow_drain_runs_total":
                drain[labels.get("result", "ran")] = drain.get(labels.get("result", "ran"), 0.0) + value
            elif name == "ledgerflow_drain_duration_seconds_sum":
                drain["seconds"] += value
            elif name == "ledgerflow_drain_last_run_timestamp_seconds" and value:
                drain["last_at"] = max(drain["last_at"] or 0.0, value)
            elif name == "ledgerflow_drain_last_duration_seconds":
                drain["last_duration"] = value
            elif name == "ledgerflow_drain_last_reclaimed":
                drain["last_reclaimed"][labels.get("outcome", "?")] = value
            elif name == "ledgerflow_lease_reclaims_total":
                reclaims[labels.get("outcome", "?")] = reclaims.get(labels.get("outcome", "?"), 0.0) + value
    return {
        "multiprocess": multiprocess_dir() is not None,
        "wakeups": wakeups,
        "drain": drain,
        "lease_reclaims": reclaims,
    }


def render(*, with_ledger: bool = True) -> tuple[bytes, str]:
    """The Prometheus text exposition of every process's instruments plus the ledger's facts."""
    registry = process_registry()
    if with_ledger:
        registry.register(LedgerCollector.shared())
    return generate_latest(registry), CONTENT_TYPE_LATEST


def serve_process_metrics() -> None:
    """``LEDGERFLOW_METRICS_PORT`` set: serve this host's instruments (no ledger queries, no auth) on
    ``LEDGERFLOW_METRICS_ADDR`` (default 127.0.0.1) — for deployments whose processes do not share
    a host with the web process (each worker dyno is then scraped on its own)."""
    port = METRICS_PORT.get()
    if port is None:
        return
    from prometheus_client import start_http_server

    start_http_server(port, addr=METRICS_ADDR.get(), registry=process_registry())


def mark_process_dead(pid: int) -> None:
    """gunicorn's child_exit hook: drop a dead worker's live gauges (counters are kept)."""
    if multiprocess_dir():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)
