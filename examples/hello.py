"""A tiny handler module for trying the ledger after `make run`.

    LEDGERFLOW_HANDLERS=examples.hello make run
    # in another shell:
    .venv/bin/ledgerflow env -- .venv/bin/python -m examples.hello

It registers an ``external_dispatch`` handler (a type with no built-in handler) that records an effect receipt and returns a result.
"""

from __future__ import annotations

from app.ledger import handlers
from app.ledger.context import JobContext


@handlers.register("external_dispatch", replace=True)
def hello(ctx: JobContext) -> dict:
    greeting = ctx.effect("greet", lambda conn: {"greeting": f"hello, {ctx.payload.get('name', 'world')}"})
    print(f"job {ctx.job_id} attempt {ctx.attempt}: {greeting['greeting']}", flush=True)
    return greeting


def main() -> None:
    import time

    from sqlalchemy import text

    from actors.hints import install_publisher
    from app.db import get_engine, transaction
    from app.ledger.enqueue import enqueue

    install_publisher()
    with transaction() as conn:
        job = enqueue(conn, "external_dispatch", {"name": "ledgerflow"})
    print(f"enqueued job {job.id}; waiting for a worker-outbound process to run it ...")
    for _ in range(100):
        with get_engine().connect() as conn:
            row = conn.execute(
                text("SELECT status, result, error_code FROM workflow_jobs WHERE id = :id"), {"id": job.id}
            ).one()
        if row.status not in ("pending", "running"):
            print(f"job {job.id}: {row.status} {row.result or ''} {row.error_code or ''}")
            return
        time.sleep(0.1)
    print(f"job {job.id} is still {row.status}: is `make run` (worker-outbound) running?")


if __name__ == "__main__":
    main()
