"""Typed results of the SDK (``ledgerflow.client``): exact JSON helpers, errors, data classes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, overload
from urllib.parse import quote

DEFAULT_URL = "http://127.0.0.1:5000"
ABSENT: Any = type("Absent", (), {"__repr__": lambda s: "ABSENT", "__bool__": lambda s: False})()


# --------------------------------------------------------------------------- exact JSON
def _loads(raw: bytes | str) -> Any:
    return json.loads(raw, parse_float=Decimal)


def _dumps(v: Any) -> str:
    out: list[str] = []
    _enc(v, out)
    return "".join(out)


def _enc(v: Any, out: list[str]) -> None:
    if v is None or v is True or v is False:
        out.append({None: "null", True: "true", False: "false"}[v])
    elif isinstance(v, str):
        out.append(json.dumps(v, ensure_ascii=False))
    elif isinstance(v, int):
        out.append(int.__repr__(v))
    elif isinstance(v, Decimal):
        out.append(str(v))
    elif isinstance(v, float):
        out.append(float.__repr__(v))
    elif isinstance(v, dict):
        out.append("{")
        for i, (k, item) in enumerate(v.items()):
            out.append(("," if i else "") + json.dumps(str(k), ensure_ascii=False) + ":")
            _enc(item, out)
        out.append("}")
    elif isinstance(v, list | tuple):
        out.append("[")
        for i, item in enumerate(v):
            if i:
                out.append(",")
            _enc(item, out)
        out.append("]")
    else:
        raise TypeError(f"not JSON serializable: {type(v).__name__}")


@overload
def _time(v: str) -> datetime: ...
@overload
def _time(v: str | None) -> datetime | None: ...
def _time(v: str | None) -> datetime | None:
    return None if v is None else datetime.fromisoformat(v.replace("Z", "+00:00"))


def _data(answer: Any) -> dict[str, Any]:
    """The ``data`` object of an API answer (``{"data": {...}}``), typed as the JSON object it is."""
    data: dict[str, Any] = answer["data"]
    return data


# --------------------------------------------------------------------------- errors
class ClientError(Exception):
    """Base of every error the SDK raises on purpose; ``str()`` is one line saying what went wrong
    (``ledgerflow.client.run_script`` prints exactly that, without a traceback)."""


class ConfigurationError(ClientError):
    """A setting the SDK needs is missing or invalid (e.g. LEDGERFLOW_TOKEN)."""


class ServerUnreachable(ClientError):
    """No answer from the server at ``url`` after the retries (connection refused, timeout, DNS)."""

    def __init__(self, url: str, reason: str) -> None:
        self.url, self.reason = url, reason
        super().__init__(
            f"cannot reach the Ledgerflow server at {url} ({reason}); is it running (`make run`)? "
            f"The SDK reads the address from LEDGERFLOW_URL (default {DEFAULT_URL})"
        )


class WaitTimeout(ClientError):
    """``wait_for_workflow`` gave up before the workflow reached one of the awaited states."""


class ApiError(ClientError):
    """An API error (problem+json). ``code`` is the stable error code (see /docs/problems)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        request_id: str | None = None,
        errors: list[dict[str, Any]] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.request_id, self.errors, self.retry_after = request_id, errors or [], retry_after


class InvalidArgument(ApiError): ...


class Unauthenticated(ApiError): ...


class PermissionDenied(ApiError): ...


class NotFound(ApiError): ...


class StateConflict(ApiError): ...


class IdempotencyConflict(ApiError): ...


class LimitExceeded(ApiError): ...


class QuotaExceeded(ApiError): ...


class RateLimited(ApiError): ...


class BodyTooLarge(ApiError): ...


class UnsupportedMediaType(ApiError): ...


class Unavailable(ApiError): ...


_BY_CODE: dict[str, type[ApiError]] = {
    "INVALID_ARGUMENT": InvalidArgument,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
    "NOT_FOUND": NotFound,
    "STATE_CONFLICT": StateConflict,
    "IDEMPOTENCY_CONFLICT": IdempotencyConflict,
    "WORKFLOW_INSTANCE_LIMIT": LimitExceeded,
    "WORKFLOW_SIGNAL_LIMIT": LimitExceeded,
    "QUEUE_FULL": QuotaExceeded,
    "APPLICATION_FULL": QuotaExceeded,
    "RATE_LIMITED": RateLimited,
    "BODY_TOO_LARGE": BodyTooLarge,
    "UNSUPPORTED_MEDIA_TYPE": UnsupportedMediaType,
    "UNAVAILABLE": Unavailable,
}


# --------------------------------------------------------------------------- types
@dataclass(frozen=True)
class WorkflowInstance:
    id: str
    namespace_id: str
    definition_id: str
    definition_version_id: str
    version: str
    state: str
    revision: int
    paused: bool
    control_revision: int
    input: Any
    business_key: str
    deadline_at: datetime
    created_at: datetime
    updated_at: datetime
    output: Any = ABSENT  # ABSENT when the API omitted it; None is an explicit null
    cancel_requested_at: datetime | None = None
    stop_kind: str | None = None
    stop_requested_at: datetime | None = None
    completed_at: datetime | None = None
    schedule_id: str | None = None  # the schedule that launched it (X-SCHED)
    schedule_fire_at: datetime | None = None

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> WorkflowInstance:
        return cls(
            id=d["id"],
            namespace_id=d["namespace_id"],
            definition_id=d["definition_id"],
            definition_version_id=d["definition_version_id"],
            version=d["version"],
            state=d["state"],
            revision=int(d["revision"]),
            paused=d["paused"],
            control_revision=int(d["control_revision"]),
            input=d["input"],
            business_key=d["business_key"],
            deadline_at=_time(d["deadline_at"]),
            created_at=_time(d["created_at"]),
            updated_at=_time(d["updated_at"]),
            output=d.get("output", ABSENT),
            cancel_requested_at=_time(d.get("cancel_requested_at")),
            stop_kind=d.get("stop_kind"),
            stop_requested_at=_time(d.get("stop_requested_at")),
            completed_at=_time(d.get("completed_at")),
            schedule_id=d.get("schedule_id"),
            schedule_fire_at=_time(d.get("schedule_fire_at")),
        )


@dataclass(frozen=True)
class StartResult:
    instance: WorkflowInstance
    deduplicated: bool


@dataclass(frozen=True)
class WorkflowPage:
    items: list[WorkflowInstance]
    next_cursor: str | None


@dataclass(frozen=True)
class Step:
    id: str
    key: str
    kind: str
    state: str
    revision: int
    activation_id: str | None = None
    activation_sequence: int | None = None
    task_id: str | None = None

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> Step:
        return cls(
            d["id"],
            d["key"],
            d["kind"],
            d["state"],
            int(d["revision"]),
            d.get("activation_id"),
            d.get("activation_sequence"),
            d.get("task_id"),
        )


@dataclass(frozen=True)
class StepList:
    instance_id: str
    revision: int
    steps: list[Step]


@dataclass(frozen=True)
class StepDetail:
    instance_id: str
    revision: int
    step: Step
    input: Any = ABSENT
    output: Any = ABSENT
    error: Any = ABSENT
    activated_at: datetime | None = None
    completed_at: datetime | None = None
    poll: dict[str, Any] | None = None
    wait: dict[str, Any] | None = None
    child_workflow_id: str | None = None
    next_attempt_at: datetime | None = None  # a TASK step waiting out its retry backoff


@dataclass(frozen=True)
class Task:
    id: str
    queue: str
    epoch: int
    workflow_id: str
    step_key: str
    input: Any = None
    state: str | None = None
    attempt: int | None = None
    lease_expires_at: datetime | None = None
    deadline_at: datetime | None = None
    poll_round: int | None = None
    output: Any = ABSENT
    error: Any = ABSENT

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> Task:
        return cls(
            id=d["id"],
            queue=d["queue"],
            epoch=d["epoch"],
            workflow_id=d["workflow_id"],
            step_key=d["step_key"],
            input=d.get("input"),
            state=d.get("state"),
            attempt=d.get("attempt"),
            lease_expires_at=_time(d.get("lease_expires_at")),
            deadline_at=_time(d.get("deadline_at")),
            poll_round=d.get("poll_round"),
            output=d.get("output", ABSENT),
            error=d.get("error", ABSENT),
        )


@dataclass(frozen=True)
class CompletionResult:
    """One item of ``Client.complete_tasks``: ``status`` 200 with the completed ``task`` (``replayed``:
    this completion had been applied before), or the status and error this item alone would get
    (404 NOT_FOUND, 409 STATE_CONFLICT)."""

    id: str
    status: int
    task: Task | None = None
    replayed: bool = False
    error_code: str | None = None
    error_message: str | None = None

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> CompletionResult:
        err = d.get("error") or {}
        return cls(
            id=d["id"],
            status=int(d["status"]),
            task=Task.from_api(d["task"]) if d.get("task") else None,
            replayed=bool(d.get("replayed", False)),
            error_code=err.get("code"),
            error_message=err.get("message"),
        )


def _seg(value: object) -> str:
    """One URL path segment, percent-encoded: an id or key holding ``/``, ``?``, ``#`` or
    ``..`` can never address another resource."""
    return quote(str(value), safe="")
