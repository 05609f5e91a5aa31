"""Enqueue single jobs one at a time on an otherwise idle system (run as a subprocess so that its
environment, e.g. a REDIS_URL pointing at a closed port, is exactly the one under test).

    python -m bench.latency_client ledger|peer --n 200 --rate 5 --warmup 5

Each job goes in its own short transaction; the gap between two jobs is random around 1/rate so the
arrivals do not lock in phase with the pools' 2 s poll. Latency itself is computed afterwards from
database timestamps by ``bench.run`` (start of the attempt minus creation, both database time)."""

from __future__ import annotations

import argparse
import random
import time


def _gaps(rate: float):  # noqa: ANN202
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("system", choices=["ledger", "peer"])
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--rate", type=float, default=5.0)
    p.add_argument("--warmup", type=int, default=5)
    a = p.parse_args()
    (run_ledger if a.system == "ledger" else run_peer)(a.n, a.rate, a.warmup)


if __name__ == "__main__":
    main()
