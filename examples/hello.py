"""A tiny ledger handler module: the job ledger running *your* handler (most user code runs in task
workers instead; see examples/first_workflow.py).

    LEDGERFLOW_HANDLERS=examples.hello make run      # shell 1: the workers load this module
    .venv/bin/python -m examples.hello                # shell 2: enqueue one job, wait, print

It replaces the built-in ``automation_action`` handler (for this demo only) with one that records an
effect receipt and returns a greeting.
"""

from __future__ import annotations

from app.ledger import handlers
from app.ledger.context import JobContext


@handlers.register("automation_action", replace=True)
def hello(ctx: JobContext) -> dict:
    greeting = ctx.effect("greet", lambda conn: {"greeting": f"hello, {ctx.payload.get('name', 'world')}"})
    print(f"job {ctx.job_id} attempt {ctx.attempt}: {greeting['greeting']}", flush=True)
    return greeting


def main() -> None:
    import time

    from sqlalchemy import text

    from actors.hints import install_publisher
    from app import settings
    from app.db import get_engine, transaction
    from app.ledger.enqueue import enqueue
    from ledgerflow.devenv import discover_environment

    settings.on_missing_environment(discover_environment)  # the embedded services, like `ledgerflow`
    install_publisher()
    with transaction() as conn:
        job = enqueue(conn, "automation_action", {"name": "ledgerflow"})
    print(f"enqueued job {job.id}; waiting for a worker-outbound process to run it ...")
    for _ in range(100):
        with get_engine().connect() as conn:
            row = conn.execute(
                text("SELECT status, result, error_code FROM workflow_jobs WHERE id = :id"), {"id": job.id}
            ).one()
        if row.status not in ("pending", "running"):
            print(f"job {job.id}: {row.status} {row.result or ''} {row.error_code or ''}")
            if row.status != "succeeded":
                raise SystemExit(1)
            return
        time.sleep(0.1)
    print(f"job {job.id} is still {row.status}: is `LEDGERFLOW_HANDLERS=examples.hello make run` running?")
    raise SystemExit(1)


if __name__ == "__main__":
    from ledgerflow.cli_common import expected_failure

    try:
        main()
    except Exception as exc:
        failure = expected_failure(exc)
        if failure is None:
            raise
        failure.show()
        raise SystemExit(failure.exit_code) from None
