"""One exception tree for every API of the product (SPEC W-ERR).

Each error carries a stable ``code`` and an HTTP ``status``; ``web/errors.py`` turns any of them
into one ``application/problem+json`` shape. Domain code (``app/``) raises these and never imports
flask. Messages are written for clients: never put SQL, stack traces or internal names in them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    field: str
    message: str

    def to_dict(self) -> dict[str, str]:
        return {"field": self.field, "message": self.message}


class LedgerflowError(Exception):
    """Base of every client-visible error."""

    code = "INTERNAL"
    status = 500
    title = "Internal error"

    def __init__(self, message: str | None = None, *, headers: dict[str, str] | None = None) -> None:
        self.message = message or self.title
        self.headers: dict[str, str] = dict(headers or {})
        super().__init__(self.message)

    @property
    def field_errors(self) -> list[FieldError]:
        return []


class InvalidArgument(LedgerflowError):
    """400: a bad field, contract, cursor or query parameter. ``errors`` name each field."""

    code = "INVALID_ARGUMENT"
    status = 400
    title = "Invalid argument"

    def __init__(
        self,
        message: str | None = None,
        errors: list[FieldError] | dict[str, str] | None = None,
        *,
        field: str | None = None,
    ) -> None:
        items: list[FieldError] = []
        if isinstance(errors, dict):
            items = [FieldError(k, v) for k, v in errors.items()]
        elif errors:
            items = list(errors)
        if field is not None:
            items.append(FieldError(field, message or "invalid value"))
        if message is None and items:
            message = "; ".join(f"{e.field}: {e.message}" for e in items[:5])
        super().__init__(message or "invalid argument")
        self._errors = items

    @property
    def field_errors(self) -> list[FieldError]:
        return self._errors


class Unauthenticated(LedgerflowError):
    code = "UNAUTHENTICATED"
    status = 401
    title = "Unauthenticated"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(
            message or "a valid bearer token is required",
            headers={"WWW-Authenticate": 'Bearer realm="ledgerflow"'},
        )


class PermissionDenied(LedgerflowError):
    code = "PERMISSION_DENIED"
    status = 403
    title = "Permission denied"


class NotFound(LedgerflowError):
    code = "NOT_FOUND"
    status = 404
    title = "Not found"


class MethodNotAllowed(LedgerflowError):
    code = "METHOD_NOT_ALLOWED"
    status = 405
    title = "Method not allowed"


class StateConflict(LedgerflowError):
    code = "STATE_CONFLICT"
    status = 409
    title = "State conflict"


class IdempotencyConflict(LedgerflowError):
    code = "IDEMPOTENCY_CONFLICT"
    status = 409
    title = "Idempotency conflict"

    def __init__(self, message: str | None = None, *, retry_after: int | None = None) -> None:
        headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
        super().__init__(message, headers=headers)


class LimitExceeded(LedgerflowError):
    """409 with a fixed-limit code, e.g. WORKFLOW_INSTANCE_LIMIT / WORKFLOW_SIGNAL_LIMIT."""

    status = 409
    title = "Limit exceeded"

    def __init__(self, code: str, message: str | None = None) -> None:
        self.code = code
        super().__init__(message)


class QuotaExceeded(LedgerflowError):
    """429 QUEUE_FULL / APPLICATION_FULL with Retry-After."""

    status = 429
    title = "Quota exceeded"

    def __init__(self, code: str, retry_after: int, message: str | None = None) -> None:
        self.code = code
        self.retry_after = retry_after
        super().__init__(message, headers={"Retry-After": str(int(retry_after))})


class RateLimited(LedgerflowError):
    """429 RATE_LIMITED with Retry-After: a per-credential rate limit or long-poll cap."""

    code = "RATE_LIMITED"
    status = 429
    title = "Rate limited"

    def __init__(self, message: str, *, retry_after: int) -> None:
        self.retry_after = retry_after
        super().__init__(message, headers={"Retry-After": str(int(retry_after))})


class BodyTooLarge(LedgerflowError):
    code = "BODY_TOO_LARGE"
    status = 413
    title = "Body too large"


class UnsupportedMediaType(LedgerflowError):
    code = "UNSUPPORTED_MEDIA_TYPE"
    status = 415
    title = "Unsupported media type"


class Unavailable(LedgerflowError):
    """503: the outcome may be unknown; resend with the same Idempotency-Key and request."""

    code = "UNAVAILABLE"
    status = 503
    title = "Unavailable"

    def __init__(self, message: str | None = None, *, retry_after: int = 5) -> None:
        self.retry_after = retry_after
        super().__init__(
            message or "service temporarily unavailable; resend with the same Idempotency-Key and request",
            headers={"Retry-After": str(int(retry_after))},
        )


class Internal(LedgerflowError):
    code = "INTERNAL"
    status = 500
    title = "Internal error"
