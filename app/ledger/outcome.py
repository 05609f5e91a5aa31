"""One pure function maps a handler's return value or exception to a settlement outcome (as Oban's
executor does). Handlers signal intent with these return values and exceptions."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from app.ledger.states import (
    DEADLINE_EXCEEDED,
    EXTERNAL_OUTCOME_UNKNOWN,
    HANDLER_ERROR,
    HANDLER_MISSING,
    PERMANENT_ERROR,
)
from app.observability import logs


@dataclass(frozen=True)
class Skip:
    """Return ``Skip(reason)`` when there was nothing to do (e.g. the subscription is disabled)."""

    reason: str = ""


class RetryableError(Exception):
    """A failure worth retrying with backoff (any unexpected exception is treated the same).
    ``retry_after`` (seconds): the next attempt waits at least this long (a receiver's Retry-After)."""

    code = HANDLER_ERROR

    def __init__(
        self, message: str = "", *, retry_after: float | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        if code is not None:
            self.code = code


class PermanentError(Exception):
    """A failure that retrying cannot fix: the job goes straight to ``dead``."""

    code = PERMANENT_ERROR


class ManualRetryError(Exception):
    """A failure that needs an operator's decision: the job goes to ``failed``."""

    code = "NEEDS_OPERATOR"


class ExternalOutcomeUnknown(Exception):
    """An unsafe external call may have taken effect: ``dead``, never re-sent automatically."""

    code = EXTERNAL_OUTCOME_UNKNOWN


class JobAborted(Exception):
    """Raised inside a handler once its abort signal fired (ownership lost or deadline passed)."""

    code = DEADLINE_EXCEEDED


class HandlerMissing(PermanentError):
    code = HANDLER_MISSING


class ReferenceNotFound(PermanentError):
    """The job's payload names a row that does not exist and never did (a mistyped id in a job enqueued
    by hand): ``dead`` with this code, never a silent success. A row that existed and was removed since
    (retention) is a ``Skip`` instead: see ``app.ledger.retention.may_have_pruned``."""

    code = "REFERENCE_NOT_FOUND"


def payload_id(payload: Any, field: str) -> str:
    """The id a job's ``payload`` names under ``field``. A payload that names none there (the field missing,
    null, empty, or not a string or an integer: a job enqueued by hand) names nothing: REFERENCE_NOT_FOUND
    naming the field, at once (it was a ``KeyError``, retried to HANDLER_ERROR)."""
    value = payload.get(field) if isinstance(payload, dict) else None
    if isinstance(value, bool) or not isinstance(value, str | int) or value == "":
        why = "missing" if value is None else f"not an id ({type(value).__name__})"
        raise ReferenceNotFound(f"the job's payload names nothing: {field!r} is {why}")
    return str(value)


@dataclass(frozen=True)
class Outcome:
    kind: str  # succeeded | skipped | retry | failed | dead
    result: Any = None
    error: str | None = None
    error_code: str | None = None
    retry_after: float | None = None


def _jsonable(value: Any) -> Any:
    """``value`` if PostgreSQL's jsonb can store it, else a description. jsonb refuses NaN/Infinity
    and the NUL character; one such result must not fail the pool's whole settlement batch."""
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        encoded = None
    if encoded is not None and "\\u0000" not in encoded:
        return value
    return {"repr": repr(value)[:2000]}


def _describe(exc: BaseException) -> str:
    """``last_error`` text: credentials in URLs and tokens are masked (operators and the
    diagnostic bundle read it)."""
    text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return logs.redact(text.replace("\x00", "\\x00"))[:4000]  # PostgreSQL text cannot hold NUL


# The longest wait a retry's ``retry_after`` can ask for (a receiver's Retry-After is capped the same way,
# app.ledger.http); longer, or not a finite number, and it is clamped / ignored.
RETRY_AFTER_CAP_SECONDS = 3600.0
MAX_ERROR_CODE = 100  # characters of a handler's own error code that are kept


def _retry_after(value: Any) -> float | None:
    """A handler's ``retry_after`` the settlement can use: finite, 0..RETRY_AFTER_CAP_SECONDS, else None
    (``inf`` or ``1e300`` seconds once made every settlement of the pool's batch fail: interval out of range)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return min(max(float(value), 0.0), RETRY_AFTER_CAP_SECONDS)


def _code(value: Any, default: str = HANDLER_ERROR) -> str:
    """A handler's own error code as the ledger stores it: text without NUL (PostgreSQL refuses it, and
    the refusal failed the pool's whole batch), at most MAX_ERROR_CODE characters; not text: the default."""
    if not isinstance(value, str) or not value:
        return default
    return value.replace("\x00", "\\x00")[:MAX_ERROR_CODE]


def outcome_of(result: Any = None, exc: BaseException | None = None) -> Outcome:
    if exc is None:
        if isinstance(result, Skip):
            return Outcome("skipped", {"skipped": True, "reason": result.reason})
        return Outcome("succeeded", _jsonable(result))
    code = getattr(exc, "code", None)
    if isinstance(exc, ExternalOutcomeUnknown):
        return Outcome("dead", error=_describe(exc), error_code=EXTERNAL_OUTCOME_UNKNOWN)
    if isinstance(exc, PermanentError):
        return Outcome("dead", error=_describe(exc), error_code=_code(code or PERMANENT_ERROR))
    if isinstance(exc, ManualRetryError):
        return Outcome("failed", error=_describe(exc), error_code=_code(code, ManualRetryError.code))
    if isinstance(exc, JobAborted):
        return Outcome("retry", error=_describe(exc), error_code=DEADLINE_EXCEEDED)
    return Outcome(
        "retry",
        error=_describe(exc),
        error_code=_code(code),
        retry_after=_retry_after(getattr(exc, "retry_after", None))
        if isinstance(exc, RetryableError)
        else None,
    )
