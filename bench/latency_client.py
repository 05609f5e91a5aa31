"""Enqueue single jobs one at a time on an otherwise idle system (run as a subprocess so that its
environment, e.g. a REDIS_URL pointing at a closed port, is exactly the one under test).

    python -m bench.latency_client ledger|peer|pgq --n 200 --rate 5 --warmup 5

Each job goes in its own short transaction; the gap between two jobs is random around 1/rate so the
arrivals do not lock in phase with the pools' 2 s poll. Latency itself is computed afterwards from
database timestamps by ``bench.run`` (start of the attempt minus creation, both database time).
``peer`` is procrastinate (``defer()``), ``pgq`` is pgqueuer (``Queries.enqueue`` of one job on an
autocommit asyncpg connection: the row and its ``queued`` log row in one statement)."""

from __future__ import annotations

import argparse
import asyncio
import random
import time


def _gaps(rate: float):
    while True:
        yield random.uniform(0.5 / rate, 1.5 / rate)


def run_ledger(n: int, rate: float, warmup: int) -> None:
    from actors import hints as hint_actors
    from app.db import transaction
    from app.ledger.enqueue import enqueue

    hint_actors.install_publisher()
    gaps = _gaps(rate)
    for i in range(warmup + n):
        with transaction() as conn:
            enqueue(conn, "delay_wake", {"lat": i, "warm": i < warmup})
        time.sleep(next(gaps))


def run_peer(n: int, rate: float, warmup: int) -> None:
    from bench.peer import app, noop

    gaps = _gaps(rate)
    with app.open():
        for i in range(warmup + n):
            noop.defer(lat=i, warm=i < warmup)
            time.sleep(next(gaps))


def run_pgq(n: int, rate: float, warmup: int) -> None:
    import asyncpg

    from bench.peer_pgq import dsn, enqueue_many

    async def go() -> None:
        conn = await asyncpg.connect(dsn())
        try:
            gaps = _gaps(rate)
            for _ in range(warmup + n):  # the first `warmup` job ids are left out by bench.run
                await enqueue_many(conn, 1)
                await asyncio.sleep(next(gaps))
        finally:
            await conn.close()

    asyncio.run(go())


RUNNERS = {"ledger": run_ledger, "peer": run_peer, "pgq": run_pgq}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("system", choices=sorted(RUNNERS))
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--rate", type=float, default=5.0)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    RUNNERS[a.system](a.n, a.rate, a.warmup)


if __name__ == "__main__":
    main()
