"""Ledger handlers of the fault suite (loaded by the workers through ``LEDGERFLOW_HANDLERS=chaos.handlers``).

``webhook_delivery`` stands for an outbound call: it writes one business row through an effect
receipt (so a re-run after a kill reuses the receipt instead of writing twice), then works for a
random short while, so kills and stops land mid-job. A delivery of a real subscription (no
``work_seconds`` in its payload) goes to the built-in handler."""

from __future__ import annotations

import random

from sqlalchemy import Connection, text

from app.ledger import handlers
from app.ledger.context import JobContext

# the built-in delivery (loaded before LEDGERFLOW_HANDLERS): it still POSTs the deliveries of real
# subscriptions (the failover scenario's webhook receiver); the suite's own jobs carry ``work_seconds``
_BUILT_IN = handlers.registered().get("webhook_delivery")


def deliver(ctx: JobContext) -> dict:
    if _BUILT_IN is not None and "work_seconds" not in (ctx.payload or {}):
        return _BUILT_IN(ctx)

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
