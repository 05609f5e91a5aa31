"""marshmallow schemas of the task protocol (X-TASK): claim, heartbeat, complete, fail, and the task
object."""

from __future__ import annotations

from typing import Any

from marshmallow import ValidationError, fields, validate

from app.engine.documents import QUEUE_RE
from app.engine.instances import MAX_INPUT_BYTES
from app.ids import is_hex32
from schemas.base import Boolean, Loose, Strict, envelope, integer, json_bytes, json_value, text

MAX_TYPE = 256  # a failure's exception type (issue 47)
MAX_STACK = 16 * 1024  # a failure's stack trace: the SDK sends at most this (its head and its end)
QUEUE = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"
EPOCH_MAX = 2**31 - 1
OUTPUT_RULE = "output: at most 256 KiB of JSON without NUL characters"


def epoch() -> fields.Integer:
    return integer(
        1, EPOCH_MAX, f"an integer from 1 to {EPOCH_MAX}", missing=f"an integer from 1 to {EPOCH_MAX}"
    )


def _queues() -> fields.List:
    return fields.List(
        text(
            "a queue name",
            lambda v: None if QUEUE_RE.fullmatch(v) else "a queue name",
            metadata={"pattern": QUEUE},
        ),
        required=True,
        validate=validate.Length(min=1, max=16, error="an array of 1 to 16 queue names"),
        error_messages={
            "invalid": "an array of 1 to 16 queue names",
            "null": "an array of 1 to 16 queue names",
        },
    )


def _max_tasks() -> fields.Integer:
    return integer(1, 16, "an integer from 1 to 16", load_default=1)


def _bounded(n: int) -> Any:
    return lambda v: None if 1 <= len(v) <= n and "\x00" not in v else f"1-{n} characters"


class WorkerIdentity(Strict):
    """Who claims or fails (issue 47): kept on the attempt (``workflow_tasks.worker`` / ``failure``)."""

    host = text("1-255 characters", _bounded(255), missing="required: 1-255 characters")
    pid = integer(0, 2**31 - 1, "an integer from 0 to 2147483647", missing="required: the process id")
    sdk = text(
        "1-64 characters", _bounded(64), missing="required: 1-64 characters (e.g. ledgerflow-python/1.2)"
    )


def _worker() -> fields.Nested:
    return fields.Nested(
        WorkerIdentity,
        metadata={"description": "the worker's identity (host, pid, sdk), kept on the attempt"},
    )


class ClaimRequest(Strict):
    queues = _queues()
    wait_seconds = integer(0, 30, "an integer from 0 to 30", load_default=0)
    max_tasks = _max_tasks()
    worker = _worker()


class ClaimNext(Strict):
    """The ``claim`` of ``POST /v1/tasks/complete``: claim right after the completions, without waiting."""

    queues = _queues()
    max_tasks = _max_tasks()
    worker = _worker()


class EpochRequest(Strict):
    epoch = epoch()


def _output(value: Any) -> str | None:
    size, storable = json_bytes(value)
    return None if size <= MAX_INPUT_BYTES and storable else OUTPUT_RULE


class CompleteRequest(Strict):
    epoch = epoch()
    output = json_value(_output)


def _message(v: str) -> str | None:
    return None if len(v) <= 4096 and "\x00" not in v else "a string of at most 4096 characters"


class TaskError(Strict):
    message = text(
        "a string of at most 4096 characters",
        _message,
        missing="a string of at most 4096 characters",
        metadata={"maxLength": 4096},
    )
    retryable = Boolean(
        required=True,
        error_messages={
            "required": "true or false (never defaulted)",
            "invalid": "true or false (never defaulted)",
            "null": "true or false (never defaulted)",
        },
    )
    type = text(
        f"1-{MAX_TYPE} characters",
        _bounded(MAX_TYPE),
        metadata={"maxLength": MAX_TYPE, "description": "the exception's type (kept on the attempt)"},
    )
    stack = text(
        f"1-{MAX_STACK} characters",
        _bounded(MAX_STACK),
        metadata={"maxLength": MAX_STACK, "description": "the stack trace (kept on the attempt)"},
    )


class FailRequest(Strict):
    epoch = epoch()
    error = fields.Nested(TaskError, required=True)
    worker = _worker()


MAX_BATCH = 16
TASK_ID = "a 32-char lowercase hex task id"


class CompleteItem(Strict):
    id = text(
        TASK_ID,
        lambda v: None if is_hex32(v) else TASK_ID,
        missing=TASK_ID,
        metadata={"pattern": "^[0-9a-f]{32}$"},
    )
    epoch = epoch()
    output = json_value(_output)


def _distinct(items: list[dict]) -> None:
    if len({i["id"] for i in items}) != len(items):
        raise ValidationError("each task at most once")


class CompleteManyRequest(Strict):
    """``POST /v1/tasks/complete``: up to 16 completions in one request, each answered on its own."""

    tasks = fields.List(
        fields.Nested(CompleteItem),
        required=True,
        validate=[
            validate.Length(min=1, max=MAX_BATCH, error=f"an array of 1 to {MAX_BATCH} completions"),
            _distinct,
        ],
        error_messages={
            "invalid": f"an array of 1 to {MAX_BATCH} completions",
            "null": f"an array of 1 to {MAX_BATCH} completions",
            "required": f"an array of 1 to {MAX_BATCH} completions",
        },
    )
    claim = fields.Nested(
        ClaimNext,
        metadata={
            "description": "then claim up to `max_tasks` more tasks of `queues` at once (no waiting), "
            "answered in `claimed`: a worker reports its results and refills the freed slots in one request"
        },
    )


# --------------------------------------------------------------------------- responses
class Task(Loose):
    id = fields.String(required=True)
    queue = fields.String(required=True)
    state = fields.String(required=True)
    workflow_id = fields.String(required=True)
    step_key = fields.String(required=True)
    epoch = fields.Integer(required=True)
    attempt = fields.Integer(required=True)
    deadline_at = fields.DateTime(required=True)
    created_at = fields.DateTime(required=True)
    updated_at = fields.DateTime(required=True)
    input = fields.Raw(allow_none=True)
    poll_round = fields.Integer()
    lease_expires_at = fields.DateTime()
    output = fields.Raw(allow_none=True)
    error = fields.Raw(allow_none=True)
    completed_at = fields.DateTime()


class ClaimedTask(Loose):
    id = fields.String(required=True)
    queue = fields.String(required=True)
    input = fields.Raw(allow_none=True)
    epoch = fields.Integer(required=True)
    lease_expires_at = fields.DateTime()
    workflow_id = fields.String(required=True)
    step_key = fields.String(required=True)
    attempt = fields.Integer(required=True)
    deadline_at = fields.DateTime(required=True)
    poll_round = fields.Integer()


class Claimed(Loose):
    tasks = fields.List(fields.Nested(ClaimedTask), required=True)


class TaskResult(Loose):
    task = fields.Nested(Task, required=True)


class ItemError(Loose):
    code = fields.String(required=True)
    message = fields.String(required=True)


class CompleteResult(Loose):
    id = fields.String(required=True)
    status = fields.Integer(
        required=True, metadata={"description": "200, or the status this item alone would get"}
    )
    task = fields.Nested(Task, metadata={"description": "with status 200"})
    replayed = fields.Boolean(metadata={"description": "true: this completion had been applied before"})
    error = fields.Nested(ItemError, metadata={"description": "with any other status"})


class CompletedMany(Loose):
    results = fields.List(fields.Nested(CompleteResult), required=True)
    claimed = fields.List(
        fields.Nested(ClaimedTask),
        metadata={"description": "with `claim`: the tasks it claimed (maybe none)"},
    )


ClaimResponse = envelope(Claimed, "ClaimResponse")
TaskResponse = envelope(Task, "TaskResponse")
TaskResultResponse = envelope(TaskResult, "TaskResultResponse")
CompleteManyResponse = envelope(CompletedMany, "CompleteManyResponse")
