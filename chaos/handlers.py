"""Ledger handlers of the fault suite (loaded by the workers through ``LEDGERFLOW_HANDLERS=chaos.handlers``).

``webhook_delivery`` stands for an outbound call: it writes one business row through an effect
receipt (so a re-run after a kill reuses the receipt instead of writing twice), then works for a
random short while, so kills and stops land mid-job."""

from __future__ import annotations

import random

from sqlalchemy import Connection, text

from app.ledger import handlers
from app.ledger.context import JobContext


def deliver(ctx: JobContext) -> dict:
    def write(conn: Connection) -> dict:
        conn.execute(
            text("INSERT INTO chaos_effects (operation_key, job_id) VALUES (:k, :j)"),
            {"k": ctx.operation_key, "j": ctx.job_id},
        )
        return {"written": True}

    ctx.effect("deliver", write)
    ctx.sleep(random.uniform(0.05, float((ctx.payload or {}).get("work_seconds", 0.4))))
    return {"delivered": ctx.job_id}


handlers.register("webhook_delivery", deliver, replace=True)
