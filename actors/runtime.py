"""Process entry points: a worker process for one pool, and the scheduler process."""

from __future__ import annotations

import logging
import signal
import threading
import time

from dramatiq import Worker

from actors import hints as hint_actors
from actors import maintenance
from actors.broker import broker, has_redis
from actors.handler_modules import BUILTIN_HANDLER_MODULES
from app.db import get_engine, name_process, transaction
from app.ids import new_node_id
from app.integrations import schedules
from app.ledger import handlers, nodes
from app.ledger.pool import LedgerPool
from app.ledger.states import Pool
from app.observability import logs, metrics, tracing
from app.process import freeze_startup_heap
from app.settings import get_settings

log = logging.getLogger("ledgerflow.worker")


def _stop_event() -> threading.Event:
    stop = threading.Event()

    def _handler(signum, frame):
        stop.set()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    return stop


def run_worker(pool_name: str) -> None:
    """Run one pool (4 slots) until SIGTERM/SIGINT: claim on hints or every 2 s, renew leases,
    heartbeat in the worker registry, consume wake hints from Redis when it is configured. Exits with
    status 1 when a thread of the pool has died (checked at every heartbeat). On SIGTERM it stops
    claiming at once and hands back, after the shutdown grace, the jobs still running."""
    settings = get_settings()
    pool_enum = Pool(pool_name)
    tracing.setup(f"worker-{pool_enum}")  # before the engine exists, so its queries are traced too
    name_process(f"worker-{pool_enum}")
    engine = get_engine()
    handlers.load_modules(BUILTIN_HANDLER_MODULES + settings.handler_modules)
    hint_actors.install_publisher()
    node_id = new_node_id()
    logs.set_process_context(node_id=node_id)
    metrics.serve_process_metrics()
    pool = LedgerPool(pool_enum, settings=settings, engine=engine, worker_id=node_id)
    with transaction(engine) as conn:
        nodes.register_node(conn, node_id, roles=["worker"], pools=[pool.queue], slot_capacity=pool.slots)
    hint_actors.register_local_pool(pool.queue, pool.nudge)
    stop = _stop_event()
    pool.start()
    worker = None
    if has_redis():
        worker = Worker(
            broker,
            queues={pool.queue},
            worker_threads=2,
            worker_timeout=settings.hint_consumer_timeout_ms,
        )
        worker.start()
    log.info("worker %s: pool %s (%s) with %d slots", node_id, pool_enum, pool.queue, pool.slots)
    freeze_startup_heap()
    print(f"ledgerflow worker {node_id} ready: pool={pool_enum} queue={pool.queue}", flush=True)
    pool.nudge()
    while not stop.wait(settings.heartbeat_seconds):
        if not pool.alive:
            # a thread of the pool died of a bug: exit, so that the process manager starts a new worker;
            # this one's leases expire and are reclaimed (L-PAUSE-5), as after a crash
            log.error("worker %s: a thread of pool %s stopped unexpectedly; exiting", node_id, pool_enum)
            _beat(engine, node_id, 0, "stopped")
            raise SystemExit(1)
        _beat(engine, node_id, pool.slots_in_use, "active")
    # SIGTERM (a deploy, `make run` stopping): claim nothing more at once, give running handlers the
    # shutdown grace (counted from the signal), hand back what still runs, exit (within 25 s in all)
    stopping_at = time.monotonic()
    pool.stop_claiming()
    log.info(
        "worker %s: stopping (%d job(s) running, grace %g s)",
        node_id,
        pool.slots_in_use,
        settings.shutdown_grace_seconds,
    )
    _beat(engine, node_id, pool.slots_in_use, "stopping")
    if worker is not None:
        worker.stop(timeout=2000)
    pool.stop(max(0.0, settings.shutdown_grace_seconds - (time.monotonic() - stopping_at)))
    _beat(engine, node_id, 0, "stopped")
    log.info("worker %s: stopped", node_id)


def _beat(engine, node_id: str, in_use: int, status: str) -> None:
    try:
        with transaction(engine) as conn:
            nodes.heartbeat(conn, node_id, slots_in_use=in_use, status=status)
    except Exception as exc:  # a missed heartbeat is not fatal
        log.warning("heartbeat failed: %s", exc.__class__.__name__)


def run_scheduler() -> None:
    """Every drain interval enqueue the drain actor (run it inline when Redis is unavailable); every
    schedule tick hand due schedules their ``schedule_launch`` jobs (X-SCHED)."""
    settings = get_settings()
    tracing.setup("scheduler")
    name_process("scheduler")
    metrics.serve_process_metrics()
    hint_actors.install_publisher()
    engine = get_engine()
    stop = _stop_event()
    freeze_startup_heap()
    print("ledgerflow scheduler ready", flush=True)
    next_drain = next_schedules = time.monotonic()
    while not stop.is_set():
        now = time.monotonic()
        if now >= next_drain:
            next_drain = now + settings.drain_interval_seconds
            _tick_drain()
        if now >= next_schedules and not stop.is_set():
            next_schedules = now + settings.schedule_tick_seconds
            _tick_schedules(engine, stop)
        stop.wait(max(0.0, min(1.0, next_drain - time.monotonic(), next_schedules - time.monotonic())))
    # SIGTERM: a tick is never cut in the middle (each batch is one transaction); exit between ticks
    log.info("scheduler: stopped")


def _tick_schedules(engine, stop: threading.Event) -> None:
    """Due schedules, a batch per transaction, until none is due (bounded: 10 batches per tick; none
    more once SIGTERM arrived)."""
    try:
        for _ in range(10):
            if stop.is_set():
                return
            with transaction(engine) as conn:
                handed = schedules.tick(conn)
            for h in handed:
                log.info(
                    "schedule %s: fire %s handed out (%d missed coalesced)",
                    h["schedule_id"],
                    h["fire_at"].isoformat(),
                    h["skipped"],
                )
            if len(handed) < schedules.TICK_BATCH:
                return
    except Exception:  # the next tick tries again
        log.exception("schedule tick failed")


def _tick_drain() -> None:
    if has_redis():
        try:
            maintenance.workflow_jobs_drain.send()
            return
        except Exception as exc:
            log.warning("drain not enqueued (%s); running it inline", exc.__class__.__name__)
    try:
        maintenance.run_drain()
    except Exception:
        log.exception("inline drain failed")
