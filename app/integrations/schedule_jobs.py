"""The ``schedule_launch`` handler (advance pool, X-SCHED): one fire of a schedule, run exactly once
through an effect receipt; ``schedule_fires.launch`` does the work in the job's fenced transaction."""

from __future__ import annotations

from typing import Any

from app.integrations import schedule_fires
from app.ledger import handlers
from app.ledger.context import JobContext
from app.ledger.outcome import Skip


@handlers.register("schedule_launch")
def schedule_launch(ctx: JobContext) -> Any:
    payload = ctx.payload or {}
    result = ctx.effect("launch", lambda conn: schedule_fires.launch(conn, payload, ctx.job_id))
    if isinstance(result, dict) and "skipped" in result and "status" not in result:
        return Skip(str(result["skipped"]))
    return result
