"""The second peer: a pgqueuer 1.6 worker with one no-op entrypoint, on the benchmark's own database.

Workers run as ``python -m bench.peer_pgq --batch-size 10 [--max-concurrent-tasks N]``, which does
what ``pgq run bench.peer_pgq:main --batch-size 10 --log-level WARNING`` does (``pgqueuer.run`` of the
factory on uvloop, pgqueuer's logger at WARNING): ``pgq run`` itself fails at start with this
environment's typer 0.29.2 (its ``--log-level`` parser hands ``setup_fancy_logger`` a ``str``, which
then reads ``.name`` of it). ``BENCH_PGQ_DSN`` names the database. The configuration is pgqueuer's best on this machine: the asyncpg driver (``AsyncpgDriver``, one
connection per process, which pgqueuer also uses for LISTEN), a bare ``QueueManager`` (no scheduler),
dequeue batches of 10 and an ``async`` no-op entrypoint without a per-entrypoint concurrency limit
(pgqueuer enforces that limit across *all* workers through a slot index, so ``concurrency_limit=4``
would cap the whole fleet at 4 jobs, not each process).

The factory prints ``ready`` once a NOTIFY/LISTEN health probe has made the round trip through the
worker's own listener, i.e. once an enqueue would wake it: the benchmark waits for that line.

Also here, for ``bench.run`` and ``bench.latency_client``: installing the schema, the table names, and
the batch enqueue (``Queries.enqueue`` with lists: one ``INSERT`` of every row plus its ``queued``
log row, in one statement and so in one transaction)."""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from datetime import timedelta

import asyncpg
import pgqueuer
from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager
from pgqueuer.core.logconfig import LogLevel, setup_fancy_logger
from pgqueuer.domain.errors import FailingListenerError

ENTRYPOINT = "noop"
BATCH_SIZE = 10
QUEUE_TABLE, LOG_TABLE = "pgqueuer", "pgqueuer_log"
TABLES = "pgqueuer, pgqueuer_log, pgqueuer_statistics, pgqueuer_schedules"


def dsn() -> str:
    return os.environ["BENCH_PGQ_DSN"]


async def noop(job: Job) -> None:
    return None


async def _announce_ready(qm: QueueManager) -> None:
    """Print ``ready`` once a health-check NOTIFY comes back through this worker's listener."""
    while True:
        with suppress(FailingListenerError):
            await qm.listener_healthy(timeout=timedelta(seconds=1))
            print("ready", flush=True)
            return


@asynccontextmanager
async def main() -> AsyncIterator[QueueManager]:
    """The ``pgq run`` factory: a QueueManager on one asyncpg connection with the no-op entrypoint."""
    conn = await asyncpg.connect(dsn(), server_settings={"application_name": "lf-bench-pgq"})
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    qm.entrypoint(ENTRYPOINT)(noop)
    ready = asyncio.create_task(_announce_ready(qm))
    try:
        yield qm
    finally:
        ready.cancel()
        with suppress(asyncio.CancelledError):
            await ready
        await conn.close()


async def _install(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


def install(url: str) -> None:
    """Install pgqueuer's schema (tables, enum, indexes, NOTIFY trigger), as ``pgq install`` does."""
    asyncio.run(_install(url))


async def enqueue_many(conn: asyncpg.Connection, n: int) -> None:
    """Enqueue ``n`` no-op jobs with pgqueuer's own batch ``enqueue`` (one statement)."""
    await Queries(AsyncpgDriver(conn)).enqueue([ENTRYPOINT] * n, [None] * n, [0] * n)


async def _enqueue_batch(url: str, n: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await enqueue_many(conn, n)
    finally:
        await conn.close()


def enqueue_batch(url: str, n: int) -> None:
    """``n`` jobs in one transaction (the rows and their ``queued`` log rows), then commit."""
    asyncio.run(_enqueue_batch(url, n))


def run_worker(argv: list[str] | None = None) -> None:
    """One worker process until SIGTERM/SIGINT (``pgqueuer.run`` installs the signal handlers)."""
    p = argparse.ArgumentParser(prog="python -m bench.peer_pgq")
    p.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    p.add_argument("--max-concurrent-tasks", type=int, default=0, help="0 = no cap")
    a = p.parse_args(argv)
    setup_fancy_logger(LogLevel.WARNING)
    worker = pgqueuer.run(main, batch_size=a.batch_size, max_concurrent_tasks=a.max_concurrent_tasks or None)
    try:
        import uvloop
    except ImportError:  # pgq run falls back the same way
        asyncio.run(worker)
    else:
        uvloop.run(worker)


if __name__ == "__main__":
    run_worker()
