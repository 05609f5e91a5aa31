"""What a handler receives: the job, fencing, an abort signal, effect receipts and safe HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import Connection, Engine

from app.db import transaction, tx
from app.ledger import transitions
from app.ledger.http import SafeHttp
from app.ledger.outcome import JobAborted
from app.observability import metrics
from app.sql import query, run

_READ_RECEIPT = query(
    "job_effect_read",
    "SELECT result FROM workflow_job_effects WHERE operation_key = :op AND step_key = :step",
)
_WRITE_RECEIPT = query(
    "job_effect_insert",
    """
INSERT INTO workflow_job_effects (operation_key, step_key, job_id, generation, result)
VALUES (:op, :step, :job_id, :gen, CAST(:result AS jsonb))
""",
)

_WRITE_RECEIPT_IF_FIRST = query(
    "job_effect_insert_if_first",
    """
INSERT INTO workflow_job_effects (operation_key, step_key, job_id, generation, result)
VALUES (:op, :step, :job_id, :gen, CAST(:result AS jsonb))
ON CONFLICT (operation_key, step_key) DO NOTHING
RETURNING id
""",
)


@dataclass(frozen=True)
class Fence:
    """What the job row must still hold for its executor to write (L-CLAIM-5): its id, the generation and
    lease token of the claim."""

    job_id: int
    generation: int
    lease_token: str


# Locks the job's instance row, then the job's row when ``Fence`` still holds (instance -> job lock order),
# in one statement (``app.engine.row_access.lock_instance_fencing``): the instance as read (the transaction
# keeps it as its ``Tx.locked_instance``) and the seconds the job's execution deadline has left by database
# time (``transitions.seconds_left``: None when the executor lost the job or the deadline passed).
LockFirst = Callable[[Connection, Fence], tuple[dict[str, Any], float | None]]


class _ReceiptTaken(Exception):
    """Internal: the receipt of this step was committed by a concurrent execution."""


class RowReceipt(Protocol):
    """The receipt of an effect kept on the business row its write moves, instead of a
    ``workflow_job_effects`` row (L-EFFECT-1; ``JobContext.effect(..., receipt=...)``).

    The write's guarded statement records the operation that moved the row (``JobContext.operation_key``)
    in the same UPDATE, so the business write and its receipt are one row write in one transaction.
    The write runs first in the effect's fenced transaction, and ``moved(result)`` tells from its result
    whether it moved the row: then no execution of this operation moved it before (the guarded UPDATE
    found the row unmoved), and the result is the answer. Otherwise the write wrote nothing, and ``read``
    answers ``(True, result)`` when ``operation_key`` moved the row earlier, with the result that execution
    answered (the answer of a retry), else ``(False, None)``: the write's own answer stands (the row was
    moved by another operation, or not yet due). Two executions of one operation at once are serialized by
    the row itself (and before it by the job row, or an engine job's instance row, which the fenced
    transaction locks first): the second one's guarded UPDATE waits for the first one's commit, then finds
    the row moved, and its ``read`` finds the first one's key. A write that moves the row reads nothing
    more: one statement less per effect than reading the receipt first."""

    def read(self, conn: Connection, operation_key: str) -> tuple[bool, Any]: ...

    def moved(self, result: Any) -> bool: ...


# still inside the attempt's execution deadline (database time), asked at the end of a handler's transaction
# when less than DEADLINE_MARGIN_SECONDS of it may be left
_WITHIN_DEADLINE = query("job_within_deadline", "SELECT clock_timestamp() < :d")
# The fence statement at a transaction's start says how long its attempt had left by database time; at the
# transaction's end that much minus the time since the statement was sent (this process's monotonic clock)
# is still left, at least. Past this margin of it the database is asked again (clock rates differ by parts
# per million: a second covers a deadline of days).
DEADLINE_MARGIN_SECONDS = 1.0


@dataclass
class JobContext:
    job_id: int
    type: str
    queue: str
    payload: Any
    generation: int
    lease_token: str
    attempt: int
    max_attempts: int
    attempt_id: int
    operation_key: str
    trace_id: str
    instance_id: str | None
    task_id: str | None
    step_key: str | None
    execution_deadline: datetime
    engine: Engine
    deadline_monotonic: float
    abort_event: threading.Event = field(default_factory=threading.Event)
    abort_reason: str | None = None
    # Locks the owning instance before the job row (instance -> job lock order) in each of this job's
    # transactions; set by the engine's handler before its first one (a fact of the job, not of one
    # transaction: ``http``'s transactions lock in the same order).
    lock_first: LockFirst | None = None
    # W3C traceparent of the span that enqueued the job (None while tracing was off)
    traceparent: str | None = None
    # when the job was enqueued (``now()`` of the enqueuing transaction; None: not read)
    created_at: datetime | None = None

    @classmethod
    def from_claim(cls, row: dict[str, Any], engine: Engine) -> JobContext:
        """The context of a freshly claimed row (as ``transitions.claim`` returns it). The deadline
        is turned into local monotonic time using the database clock read by the claim."""
        return cls(
            job_id=row["id"],
            type=row["type"],
            queue=row["queue"],
            payload=row["payload"],
            generation=row["generation"],
            lease_token=str(row["lease_token"]),
            attempt=row["attempts"],
            max_attempts=row["max_attempts"],
            attempt_id=row["attempt_id"],
            operation_key=row["operation_key"],
            trace_id=row["trace_id"],
            instance_id=row["instance_id"],
            task_id=row["task_id"],
            step_key=row["step_key"],
            execution_deadline=row["execution_deadline"],
            engine=engine,
            deadline_monotonic=time.monotonic() + (row["execution_deadline"] - row["db_now"]).total_seconds(),
            traceparent=row.get("traceparent"),
            created_at=row.get("created_at"),
        )

    # -- abort signal -----------------------------------------------------------------------
    def abort(self, reason: str) -> None:
        if not self.abort_event.is_set():
            self.abort_reason = reason
            self.abort_event.set()

    @property
    def aborted(self) -> bool:
        if not self.abort_event.is_set() and time.monotonic() >= self.deadline_monotonic:
            self.abort("execution deadline passed")
        return self.abort_event.is_set()

    def check(self) -> None:
        """Raise JobAborted if ownership was lost or the deadline passed."""
        if self.aborted:
            raise JobAborted(self.abort_reason or "aborted")

    def sleep(self, seconds: float) -> None:
        """Sleep that wakes early (and raises) when the job is aborted."""
        end = min(time.monotonic() + seconds, self.deadline_monotonic)
        while not self.abort_event.wait(max(0.0, end - time.monotonic())):
            if time.monotonic() >= end:
                break
        self.check()

    # -- fenced business transactions ---------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A short business transaction that locks the instance (if any), then the job, and
        checks generation + lease + deadline before and after the caller's writes (L-CLAIM-5)."""
        self.check()
        with transaction(self.engine) as conn:
            sent = time.monotonic()
            if self.lock_first is not None:
                inst, left = self.lock_first(conn, Fence(self.job_id, self.generation, self.lease_token))
                tx(conn).locked_instance = inst
            else:
                left = transitions.lock_owned(conn, self.job_id, self.generation, self.lease_token)
            if left is None:
                metrics.fenced_write("transaction")
                self.abort("ownership lost")
                raise JobAborted("ownership lost")
            yield conn
            # the row lock is held, so nobody can fence us meanwhile; the deadline may pass: by database
            # time ``left`` seconds remained when the fence ran (after ``sent``), so at least that much less
            # the time since is left now; near the deadline the database says
            if time.monotonic() - sent < left - DEADLINE_MARGIN_SECONDS:
                return
            if run(conn, _WITHIN_DEADLINE, {"d": self.execution_deadline}).scalar():
                return
            self.abort("execution deadline passed")
            raise JobAborted("execution deadline passed")

    def receipt(self, step_key: str) -> tuple[bool, Any]:
        """(found, result) of a committed receipt of this operation's step."""
        with self.engine.connect() as conn:
            row = run(conn, _READ_RECEIPT, {"op": self.operation_key, "step": step_key}).first()
        return (row is not None, row.result if row else None)

    def effect(
        self, step_key: str, write: Callable[[Connection], Any], *, receipt: RowReceipt | None = None
    ) -> Any:
        """Run an internal business write exactly once per (operation_key, step_key) (L-EFFECT-1).

        ``write(conn)`` runs in a fenced transaction together with the receipt insert; a retry of
        the same operation returns the stored result without calling ``write`` again. The receipt is
        read inside that transaction only (after the instance and job locks), not before it too.

        ``receipt``: the write keeps its receipt on the row it moves (``RowReceipt``): no receipt row is
        inserted, ``receipt.read`` answers a retry of the operation (asked only when the write moved
        nothing), and ``step_key`` is not stored."""
        if receipt is not None:
            with self.transaction() as conn:
                result = write(conn)
                if receipt.moved(result):
                    return result
                found, stored = receipt.read(conn, self.operation_key)
                return stored if found else result
        try:
            with self.transaction() as conn:
                row = run(conn, _READ_RECEIPT, {"op": self.operation_key, "step": step_key}).first()
                if row is not None:
                    return row.result
                result = write(conn)
                inserted = run(
                    conn,
                    _WRITE_RECEIPT_IF_FIRST,
                    {
                        "op": self.operation_key,
                        "step": step_key,
                        "job_id": self.job_id,
                        "gen": self.generation,
                        "result": json.dumps(result),
                    },
                ).first()
                if inserted is None:
                    # another execution of the same operation committed this step meanwhile:
                    # roll our write back and reuse its result (one effect per operation step)
                    raise _ReceiptTaken
        except _ReceiptTaken:
            return self.receipt(step_key)[1]
        return result

    def store_receipt(self, conn: Connection, step_key: str, result: Any) -> None:
        run(
            conn,
            _WRITE_RECEIPT,
            {
                "op": self.operation_key,
                "step": step_key,
                "job_id": self.job_id,
                "gen": self.generation,
                "result": json.dumps(result),
            },
        )

    @property
    def http(self) -> SafeHttp:
        return SafeHttp(self)
