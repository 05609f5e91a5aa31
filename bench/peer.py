"""The peer: a procrastinate app with one no-op task, pointed at the benchmark's own database.

Workers run as ``procrastinate --app=bench.peer.app worker --concurrency 4``; ``BENCH_PQ_DSN`` names
the database. The task is ``async`` so procrastinate runs it on its event loop without a thread hop
(its cheapest path, i.e. the peer's best case)."""

from __future__ import annotations

import os

import procrastinate

QUEUE = "bench"

app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ.get("BENCH_PQ_DSN", "")),
)


@app.task(name="noop", queue=QUEUE)
async def noop(**_: object) -> None:
    return None
