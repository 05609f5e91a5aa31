"""A worker pool: N execution slots for one queue, fed by claims on a wake hint or every short poll.

One loop thread owns every database write of the pool except lease renewal: each pass settles the
executions that finished since the last pass *and* claims as many due jobs as there are free slots,
in one short transaction (River-style batched completion). That transaction is a single prepared
statement sent on the loop's own psycopg connection in autocommit mode: one round trip per pass.
Handlers run on the slot threads and never hold a transaction of the pool. A renewer thread extends
leases every ``renew_seconds`` and fires the abort signal of any execution that lost ownership or
passed its deadline.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

import psycopg
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from app.db import connect_args, transaction
from app.ledger import handlers, transitions
from app.ledger.context import JobContext
from app.ledger.hints import publish_after_commit, publish_now
from app.ledger.outcome import outcome_of
from app.ledger.states import Pool
from app.observability import logs, metrics, tracing
from app.settings import Settings

log = logging.getLogger(__name__)

# A pass that filled every free slot publishes a hint so an idle worker elsewhere helps with the
# rest; under a sustained backlog that would be one Redis round trip per pass, so at most one per
# this many seconds (the first one of a burst still goes out at once).
MORE_WORK_HINT_INTERVAL = 0.05
# A pool wakes this long after a delayed job's due time (database time), so that its claim sees it due.
DUE_SLACK_SECONDS = 0.001


@dataclass
class PoolStats:
    claimed: int = 0
    settled: int = 0
    claim_queries: int = 0
    stale_settlements: int = 0


class LedgerPool:
    def __init__(
        self,
        pool: Pool,
        *,
        settings: Settings,
        engine: Engine,
        worker_id: str,
        slots: int | None = None,
    ) -> None:
        self.pool = Pool(pool)
        self.queue = self.pool.queue
        self.settings = settings
        self.engine = engine
        self.worker_id = worker_id
        self.slots = slots or settings.slots_per_pool
        self.stats = PoolStats()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._inflight: dict[int, JobContext] = {}
        self._finished: list[transitions.Settlement] = []
        self._running = 0
        # Claimed jobs go to the slot threads through one queue (None stops a slot thread): a plain
        # hand-off instead of an executor's future, work item and condition per job.
        self._slot_queue: queue.SimpleQueue[JobContext | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._pg: psycopg.Connection | None = None  # the loop thread's own connection
        self._more_work = threading.Event()  # the loop asks the hinter thread for a "more work" hint
        # time.monotonic() at which the queue's next delayed job falls due (the last pass's view), or None
        self._next_due: float | None = None

    # -- public -------------------------------------------------------------------------------
    @property
    def slots_in_use(self) -> int:
        return self._running

    @property
    def alive(self) -> bool:
        """Are all of the pool's threads (loop, renewer, hinter, slots) running? Before ``stop()`` only a
        bug ends one, and a pool without its loop claims and settles nothing while its process still looks
        healthy."""
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def nudge(self) -> None:
        """A wake hint arrived (or work finished): claim now instead of at the next poll."""
        self._wake.set()

    def start(self) -> None:
        named = [("loop", self._loop), ("renewer", self._renewer), ("hinter", self._hinter)]
        named += [(f"slot-{i}", self._slot) for i in range(self.slots)]
        for name, target in named:
            t = threading.Thread(target=target, name=f"{self.pool}-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop_claiming(self) -> None:
        """Claim nothing more from now on (the first thing a worker does on SIGTERM); running handlers go
        on and finished ones are still settled."""
        self._stopping.set()
        self._wake.set()

    def stop(self, timeout: float | None = None) -> None:
        """Stop claiming, let running handlers finish for up to ``timeout`` seconds (default: the
        shutdown grace setting), hand back what still runs (``transitions.hand_back``: due again at
        once, the attempt recorded as interrupted by shutdown), settle what finished, and exit."""
        self.stop_claiming()
        deadline = time.monotonic() + (self.settings.shutdown_grace_seconds if timeout is None else timeout)
        while self._running and time.monotonic() < deadline:
            time.sleep(0.05)
        handed_back = self._running > 0
        if handed_back:
            self._hand_back_running()
        self._wake.set()
        self._more_work.set()
        for _ in range(self.slots):
            self._slot_queue.put(None)
        # the loop settles what finished, then returns; a slot still inside a handler that was handed
        # back is not waited for (its writes are fenced: the lease token is gone)
        end = time.monotonic() + 3
        for t in self._threads:
            if not (handed_back and "-slot-" in t.name):
                t.join(timeout=max(0.05, end - time.monotonic()))

    def _hand_back_running(self) -> None:
        with self._lock:
            contexts = list(self._inflight.values())
            self._inflight.clear()  # their settlements, if they still come, are dropped (see _execute)
            self._running -= len(contexts)
        for ctx in contexts:
            ctx.abort("worker shutting down")
        owned = [(c.job_id, c.generation, c.lease_token) for c in contexts]
        try:
            with transaction(self.engine) as conn:
                moved = transitions.hand_back(conn, owned)
                publish_after_commit(conn, {m["queue"] for m in moved})  # another worker takes them now
        except DBAPIError as exc:
            log.warning(
                "pool %s: hand back at shutdown failed (%s); the leases expire and are reclaimed",
                self.pool,
                exc.__class__.__name__,
            )
            return
        for m in moved:
            log.info("job %s: handed back at shutdown (%s)", m["id"], m["status"], extra={"job_id": m["id"]})

    # -- the loop -----------------------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self._run_loop()
        except Exception:
            log.exception("pool %s: the loop stopped on an unexpected error", self.pool)
            raise
        finally:
            self._close_connection()

    def _run_loop(self) -> None:
        failures = 0
        queue = self.queue
        while True:
            # The short poll, or less: until the queue's next delayed job falls due, as the last pass saw
            # it (a delayed job enqueued since then sent a hint, whose pass saw it too).
            wait = self.settings.poll_seconds
            if self._next_due is not None:
                wait = max(0.0, min(wait, self._next_due - time.monotonic()))
            if not self._wake.wait(wait) and self._next_due is None:
                metrics.poll_wakeup(queue)
            self._wake.clear()
            with self._lock:
                finished, self._finished = self._finished, []
                free = 0 if self._stopping.is_set() else self.slots - self._running
            if self._stopping.is_set() and not finished and self._running == 0:
                return
            if not finished and free <= 0:
                self._next_due = None  # no slot to run it: a job's end wakes the loop, whose pass looks again
                continue
            try:
                claimed = self._settle_and_claim(finished, free)
                failures = 0
            except (psycopg.Error, DBAPIError) as exc:
                # The statement was its own transaction: nothing of it happened; settle again later.
                failures += 1
                self._close_connection()
                with self._lock:
                    self._finished = finished + self._finished
                log.warning("pool %s: database error (%s); retrying", self.pool, exc.__class__.__name__)
                time.sleep(min(5.0, 0.2 * 2**failures))
                self._wake.set()
                continue
            for job in claimed:
                self._start(job)
            if free > 0 and len(claimed) == free and not self._more_work.is_set():
                self._more_work.set()  # more may be due: let an idle worker elsewhere help

    def _hinter(self) -> None:
        """Publishes the loop's "more work" hints, so that a Redis round trip (or a Redis outage) never
        delays a pass: at most one per MORE_WORK_HINT_INTERVAL, the first of a burst at once."""
        while not self._stopping.is_set():
            self._more_work.wait()
            if self._stopping.is_set():
                return
            self._more_work.clear()
            publish_now(self.queue)
            time.sleep(MORE_WORK_HINT_INTERVAL)

    def _connection(self) -> psycopg.Connection:
        if self._pg is None or self._pg.closed:
            _, params = self.engine.dialect.create_connect_args(self.engine.url)
            params.pop("context", None)  # plain psycopg adapters (jsonb -> Python objects)
            session = {
                "timezone": "UTC",
                "idle_in_transaction_session_timeout": "60000",
                **transitions.PG_SESSION_SETTINGS,
            }
            if not self.settings.pool_synchronous_commit:
                session["synchronous_commit"] = "off"
            self._pg = psycopg.connect(
                **params,
                autocommit=True,  # each pass is one statement, hence one transaction
                # behind a transaction pooler no session options (a pass then commits synchronously)
                # and, by default, no prepared statements (app.db.connect_args); named apart from the
                # process's other connections
                **{**connect_args(session), "application_name": f"ledgerflow-{self.pool}-pool"},
            )
        return self._pg

    def _close_connection(self) -> None:
        pg, self._pg = self._pg, None
        if pg is not None:
            try:
                pg.close()
            except psycopg.Error:
                pass

    def _settle_and_claim(self, finished: list[transitions.Settlement], free: int) -> list[dict]:
        s = self.settings
        by_due = False
        if free > 0:
            by_due = (self.stats.claim_queries + 1) % 4 == 0  # L-CLAIM-2: every fourth claim
        sent_at = time.monotonic()
        done, claimed, next_due_in = transitions.settle_and_claim(
            self._connection(),
            finished,
            queue=self.queue,
            limit=max(0, free),
            worker_id=self.worker_id,
            lease_seconds=s.lease_seconds,
            by_due=by_due,
            backoff_base=s.backoff_base_seconds,
            backoff_cap=s.backoff_cap_seconds,
        )
        if free > 0:
            self.stats.claim_queries += 1
        # measured from when the statement was sent: its now() is no later than that instant plus the trip
        self._next_due = None if next_due_in is None else sent_at + next_due_in + DUE_SLACK_SECONDS
        pool = self.pool.value
        if finished:
            self.stats.settled += len(done)
            self.stats.stale_settlements += len(finished) - len(done)
            for item in finished:
                status = done.get(item.job_id)
                if status is None:
                    metrics.fenced_write("settle")
                    log.info(
                        "job %s: settlement of a stale executor ignored",
                        item.job_id,
                        extra={"job_id": item.job_id},
                    )
                else:
                    metrics.job_settled(item.job_type, pool, status)
        self.stats.claimed += len(claimed)
        if metrics.ENABLED:
            for job in claimed:
                metrics.job_claimed(job["type"], pool, (job["db_now"] - job["run_at"]).total_seconds())
        return claimed

    def _start(self, job: dict) -> None:
        ctx = JobContext.from_claim(job, self.engine)
        with self._lock:
            self._inflight[ctx.job_id] = ctx
            self._running += 1
        self._slot_queue.put(ctx)

    def _slot(self) -> None:
        """A slot thread: runs the claimed jobs handed to it until ``stop()`` sends None."""
        while (ctx := self._slot_queue.get()) is not None:
            try:
                self._execute(ctx)
            except Exception:  # a bug outside the handler (which _run_handler contains): keep the slot
                log.exception("pool %s: job %s: the slot failed outside its handler", self.pool, ctx.job_id)
                with self._lock:
                    if self._inflight.pop(ctx.job_id, None) is not None:
                        self._running -= 1  # its attempt stays open; lease reclaim takes the job back

    def _execute(self, ctx: JobContext) -> None:
        with logs.bind_job(ctx):
            if tracing.ENABLED:
                with tracing.attempt_span(ctx) as span:
                    item = self._run_handler(ctx)
                    tracing.end_attempt(span, item.kind, item.error)
            else:
                item = self._run_handler(ctx)
        with self._lock:
            if self._inflight.pop(ctx.job_id, None) is None:
                return  # handed back at shutdown meanwhile: the ledger no longer expects this settlement
            self._finished.append(item)
            self._running -= 1
        self._wake.set()

    def _run_handler(self, ctx: JobContext) -> transitions.Settlement:
        started = time.monotonic()
        result, error = None, None
        try:
            handler = handlers.resolve(ctx.type)
            result = handler(ctx)
        except BaseException as exc:  # every exception becomes an outcome
            error = exc
            if not isinstance(exc, Exception):
                log.error("job %s: handler raised %s", ctx.job_id, type(exc).__name__)
        seconds = time.monotonic() - started
        metrics.attempt_finished(ctx.type, seconds)
        outcome = outcome_of(result, error)
        if error is not None and outcome.kind != "succeeded":
            log.info("job %s (%s) attempt %s: %s", ctx.job_id, ctx.type, ctx.attempt, outcome.error)
        return transitions.Settlement(
            job_id=ctx.job_id,
            generation=ctx.generation,
            lease_token=ctx.lease_token,
            kind=outcome.kind,
            result=outcome.result,
            error=outcome.error,
            error_code=outcome.error_code,
            duration_ms=int(seconds * 1000),
            job_type=ctx.type,
            retry_after_s=outcome.retry_after,
        )

    # -- leases -------------------------------------------------------------------------------
    def _reclaim(self) -> None:
        """This pool's queue: expired leases (an executor was lost) go back to pending through the
        drain's guarded transition, due at once; then claim them (L-PAUSE-5's drain stays the backstop)."""
        s = self.settings
        try:
            with transaction(self.engine) as conn:
                rows = transitions.reclaim_expired(
                    conn,
                    limit=s.drain_batch,
                    backoff_base=s.backoff_base_seconds,
                    backoff_cap=s.backoff_cap_seconds,
                    queue=self.queue,
                )
        except DBAPIError as exc:
            log.warning("pool %s: lease reclaim failed (%s)", self.pool, exc.__class__.__name__)
            return
        if rows:
            back = sum(1 for r in rows if r["status"] == "pending")
            metrics.lease_reclaimed("pending", back)
            metrics.lease_reclaimed("dead", len(rows) - back)
            log.warning(
                "pool %s: reclaimed %d expired lease(s): %d back to pending", self.pool, len(rows), back
            )
            self._wake.set()

    def _renewer(self) -> None:
        next_renew = time.monotonic() + self.settings.renew_seconds
        next_reclaim = time.monotonic() + self.settings.reclaim_seconds
        while not (self._stopping.is_set() and self._running == 0):
            time.sleep(min(0.25, self.settings.renew_seconds))
            now = time.monotonic()
            if now >= next_reclaim and not self._stopping.is_set():
                next_reclaim = now + self.settings.reclaim_seconds
                self._reclaim()
            with self._lock:
                contexts = list(self._inflight.values())
            for ctx in contexts:
                if now >= ctx.deadline_monotonic:
                    ctx.abort("execution deadline passed")
            if now < next_renew or not contexts:
                continue
            next_renew = now + self.settings.renew_seconds
            owned = [(c.job_id, c.generation, c.lease_token) for c in contexts if not c.abort_event.is_set()]
            try:
                with transaction(self.engine) as conn:
                    renewed = transitions.renew_leases(conn, owned, lease_seconds=self.settings.lease_seconds)
            except DBAPIError as exc:
                log.warning("pool %s: lease renewal failed (%s)", self.pool, exc.__class__.__name__)
                continue
            for ctx in contexts:
                if ctx.job_id not in renewed and not ctx.abort_event.is_set():
                    metrics.fenced_write("renew")
                    ctx.abort("ownership lost (lease not renewed)")
