"""Loaded through LEDGERFLOW_HANDLERS by one worker-process test: a bug in the pool's loop, injected.
Starting a claimed job whose payload has ``break_pool`` raises inside the loop thread."""

from __future__ import annotations

from app.ledger.pool import LedgerPool

_start = LedgerPool._start


def _broken_start(self: LedgerPool, job: dict) -> None:
    if (job.get("payload") or {}).get("break_pool"):
        raise RuntimeError("injected: a bug in the pool loop")
    _start(self, job)


LedgerPool._start = _broken_start  # type: ignore[method-assign]
