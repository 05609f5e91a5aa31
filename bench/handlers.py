"""The benchmark's no-op handler, loaded by worker processes through ``LEDGERFLOW_HANDLERS``."""

from __future__ import annotations

from app.ledger import handlers


def noop(ctx):  # the cheapest possible job
    return None


handlers.register("delay_wake", noop, replace=True)
