"""Handlers used by worker-process tests (loaded through LEDGERFLOW_HANDLERS)."""

from __future__ import annotations

import time

from sqlalchemy import text

from app.ledger import handlers
from app.ledger.outcome import PermanentError, Skip


def _behave(ctx):
    p = ctx.payload or {}
    mode = p.get("mode", "noop")
    if mode == "noop":
        return None
    if mode == "sleep":
        ctx.sleep(float(p.get("seconds", 1)))
        return {"slept": p.get("seconds")}
    if mode == "hold":
        # the first attempt runs until the worker hands it back (shutdown); later ones finish
        if ctx.attempt == 1:
            if p.get("ignore_abort"):
                time.sleep(600)  # a handler blocked in a call that does not look at the abort signal
            ctx.sleep(600)
        return {"attempt": ctx.attempt}
    if mode == "skip":
        return Skip("nothing to do")
    if mode == "fail":
        raise RuntimeError(p.get("message", "boom"))
    if mode == "permanent":
        raise PermanentError("bad input")
    if mode == "receipt_then_sleep":
        # business write + receipt, then hang until killed (the kill -9 test)
        def write(conn):
            conn.execute(
                text("INSERT INTO test_effects (operation_key, note) VALUES (:k, 'written')"),
                {"k": ctx.operation_key},
            )
            return {"written": True}

        ctx.effect("write", write)
        marker = p.get("marker_file")
        if marker and ctx.attempt == 1:
            open(marker, "w").close()
            time.sleep(3600)
        return {"done": True}
    if mode == "record":

        def write(conn):
            conn.execute(
                text("INSERT INTO test_effects (operation_key, note) VALUES (:k, :n)"),
                {"k": ctx.operation_key, "n": str(ctx.job_id)},
            )
            return {"ok": True}

        return ctx.effect("write", write)
    raise PermanentError(f"unknown mode {mode}")


for _t in ("delay_wake", "event_dispatch", "webhook_delivery", "task_timeout", "automation_action"):
    handlers.register(_t, _behave, replace=True)
