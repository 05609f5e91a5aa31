"""Small helpers shared by the ledger tests: enqueue, claim, read rows, build a JobContext the way
the pool does, and record published wake hints."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Engine, text
from sqlalchemy.exc import OperationalError

from app.auth import principals
from app.db import transaction
from app.ledger import handlers, hints, transitions
from app.ledger.context import JobContext
from app.ledger.enqueue import enqueue

ADVANCE = "workflow-ledger"
OUTBOUND = "workflow-ledger-outbound"


# the packages whose modules register the product's handlers when they are first imported
PRODUCT_PACKAGES = ("app.", "actors.", "chaos.")


def restore_handlers(saved: dict[str, handlers.Handler]) -> None:
    """The handler registry back as ``saved``, except for a type ``saved`` did not hold whose handler now
    is a function of the product: a handler module imported for the first time during the test registered
    it, and no later import registers it again. Restoring ``saved`` alone dropped it for every later test
    of the session (``tests/engine/test_triggers.py``'s first import of ``handlers.dispatch``, and then
    the docs' job_types table: HandlerMissing), unless ``tests/conftest.py`` had registered it first.
    What a test registered of its own (a fake) goes."""
    kept = {
        t: fn
        for t, fn in handlers._handlers.items()
        if t not in saved and getattr(fn, "__module__", "").startswith(PRODUCT_PACKAGES)
    }
    handlers._handlers.clear()
    handlers._handlers.update(saved)
    handlers._handlers.update(kept)


def add_job(engine: Engine, job_type: str = "delay_wake", payload: Any = None, **kw: Any) -> int:
    """Enqueue one job in its own transaction (due now unless told otherwise)."""
    with transaction(engine) as conn:
        return enqueue(conn, job_type, payload, **kw).id


def claim(
    engine: Engine,
    queue: str = ADVANCE,
    limit: int = 1,
    *,
    by_due: bool = False,
    lease_seconds: float = 60.0,
    worker_id: str = "test-worker",
) -> list[dict[str, Any]]:
    with transaction(engine) as conn:
        return transitions.claim(
            conn, queue=queue, limit=limit, worker_id=worker_id, lease_seconds=lease_seconds, by_due=by_due
        )


def claim_one(engine: Engine, queue: str = ADVANCE, **kw: Any) -> dict[str, Any]:
    rows = claim(engine, queue, 1, **kw)
    assert len(rows) == 1, f"expected one claimable job in {queue}, got {rows}"
    return rows[0]


def job(engine: Engine, job_id: int) -> dict[str, Any]:
    with engine.connect() as conn:
        row = conn.execute(text("SELECT * FROM workflow_jobs WHERE id = :id"), {"id": job_id}).one()
    return dict(row._mapping)


def status_attempts(engine: Engine, job_id: int) -> tuple[str, int]:
    """(status, attempts) read from one row version (two separate reads can straddle a claim)."""
    jr = job(engine, job_id)
    return jr["status"], jr["attempts"]


_ATTEMPTS = text(
    """
SELECT id, job_id, generation, attempt, status, lease_token, worker_id, request, response, error, error_code,
       due_at, started_at, finished_at, duration_ms
FROM workflow_job_executions WHERE job_id = :id
UNION ALL
-- the open attempt of a running job lives on its job row until the move that ends it writes its row
SELECT attempt_id, id, generation, attempts, 'running', lease_token, worker_id, payload, NULL, NULL, NULL,
       run_at, attempt_started_at, NULL, NULL
FROM workflow_jobs WHERE id = :id AND status = 'running'
ORDER BY id
"""
)


def attempts(engine: Engine, job_id: int) -> list[dict[str, Any]]:
    """Every attempt of the job, final rows and the open one (status ``running``), by attempt id."""
    with engine.connect() as conn:
        return [dict(r._mapping) for r in conn.execute(_ATTEMPTS, {"id": job_id})]


def scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar()


def seconds_until_run_at(engine: Engine, job_id: int) -> float:
    """run_at - now() by database time, in seconds."""
    return float(
        scalar(
            engine, "SELECT extract(epoch FROM run_at - now()) FROM workflow_jobs WHERE id = :id", id=job_id
        )
    )


def settlement(row: dict[str, Any], kind: str, **kw: Any) -> transitions.Settlement:
    return transitions.Settlement(
        job_id=row["id"], generation=row["generation"], lease_token=str(row["lease_token"]), kind=kind, **kw
    )


def settle(engine: Engine, items: list[transitions.Settlement], *, base: float = 30.0, cap: float = 900.0):
    with transaction(engine) as conn:
        return transitions.settle(conn, items, backoff_base=base, backoff_cap=cap)


def context_for(row: dict[str, Any], engine: Engine) -> JobContext:
    """The JobContext an executor would get for a claimed row (as LedgerPool._start builds it)."""
    return JobContext.from_claim(row, engine)


class RecordingPublisher:
    """Installed with ``hints.set_publisher``; records every hint, optionally failing."""

    def __init__(self, fail: bool = False) -> None:
        self.sent: list[str] = []
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, queue: str) -> None:
        with self.lock:
            self.sent.append(queue)
        if self.fail:
            raise ConnectionError("redis is down")


def install_recorder(fail: bool = False) -> RecordingPublisher:
    rec = RecordingPublisher(fail=fail)
    hints._suspended_until = 0.0  # a previous test's failed publish must not mute this one
    hints.set_publisher(rec)
    return rec


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


@contextmanager
def credential_change_heard() -> Iterator[None]:
    """Around a change to credentials made outside ``app.auth`` (plain SQL): return once this process's
    principal cache heard it (the NOTIFY at commit reaches it within milliseconds), or at once when the
    process hears nothing (it then keeps nothing)."""
    before = principals.generation()
    yield
    wait_for(lambda: principals.generation() != before or not principals.hears_any())


def statements_sent(monkeypatch: Any) -> list[str]:
    """Every statement the driver executes from now until ``monkeypatch.undo()`` (psycopg cursor
    executions), its text with whitespace folded to single spaces."""
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self: psycopg.Cursor[Any], query: Any, *args: Any, **kwargs: Any) -> Any:
        sent.append(" ".join(str(query).split()))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    return sent


class InDoubtMarker:
    """``transitions.set_effect_marker`` as a failover makes it: the marker's transaction commits, and the
    executor is told the connection broke (the COMMIT's answer was lost). With ``down``, every later
    write of the marker fails before reaching PostgreSQL (it stays away)."""

    def __init__(self, real: Callable[..., bool], down: bool) -> None:
        self.real, self.down, self.opened = real, down, False

    def __call__(self, conn: Any, job_id: int, generation: int, lease_token: str, marker: Any) -> bool:
        if marker is not None and not self.opened:
            self.opened = True
            written = self.real(conn, job_id, generation, lease_token, marker)
            assert written
            conn.commit()  # the COMMIT took effect ...
            raise OperationalError("COMMIT", {}, psycopg.OperationalError("server closed the connection"))
        if self.down:
            raise OperationalError("UPDATE", {}, psycopg.OperationalError("connection refused"))
        return self.real(conn, job_id, generation, lease_token, marker)
