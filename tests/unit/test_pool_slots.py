"""The pool's slot threads (a queue hand-off instead of an executor's future per job)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from app.ledger.pool import LedgerPool
from app.ledger.states import Pool
from app.settings import Settings


def _pool() -> LedgerPool:
    # engine=None: nothing here touches the database (the loop and renewer are not started)
    return LedgerPool(
        Pool.ADVANCE,
        settings=Settings(database_url="", redis_url=None),
        engine=None,
        worker_id="unit",
        slots=1,
    )  # type: ignore[arg-type]


def _wait(cond, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_a_slot_survives_a_failure_outside_the_handler_and_gives_the_job_back_to_the_lease():
    pool = _pool()
    ran: list[int] = []

    def execute(ctx) -> None:
        if ctx.job_id == 1:
            raise RuntimeError("bug in the code around the handler")
        ran.append(ctx.job_id)
        with pool._lock:
            pool._inflight.pop(ctx.job_id, None)
            pool._running -= 1

    pool._execute = execute  # type: ignore[method-assign]
    slot = threading.Thread(target=pool._slot, daemon=True)
    slot.start()
    for job_id in (1, 2):
        ctx = SimpleNamespace(job_id=job_id)
        with pool._lock:
            pool._inflight[job_id] = ctx  # type: ignore[assignment]
            pool._running += 1
        pool._slot_queue.put(ctx)  # type: ignore[arg-type]
    assert _wait(lambda: ran == [2])
    # the failed job no longer counts as running and is no longer renewed: its lease expires and
    # reclaim takes it back (its attempt stays open on the job row until then)
    assert pool._running == 0 and pool._inflight == {}
    assert slot.is_alive()
    pool._slot_queue.put(None)  # what stop() sends
    slot.join(5)
    assert not slot.is_alive()


def test_stop_ends_every_thread_of_a_started_pool_without_jobs(monkeypatch):
    pool = _pool()
    monkeypatch.setattr(pool, "_loop", lambda: pool._stopping.wait())
    monkeypatch.setattr(pool, "_renewer", lambda: pool._stopping.wait())
    pool.start()
    assert pool.alive and len(pool._threads) == 3 + pool.slots  # loop, renewer, hinter, the slots
    pool.stop(timeout=1)
    assert not any(t.is_alive() for t in pool._threads)
