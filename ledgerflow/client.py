"""Python SDK for the Ledgerflow public API: workflows, definitions and the task protocol.

    from ledgerflow.client import Client, TaskWorker
    client = Client("http://127.0.0.1:5000", token="lf_...")
    started = client.start_workflow(definition_id, "v1", {"order_id": "A-1"}, business_key="A-1")

- Numbers stay exact both ways (integers of any size, fractions as ``Decimal``).
- Mutations carry an ``Idempotency-Key`` (generated when you pass none); retries after network
  errors and 503 resend the **same** key and request, never a new one.
- Revisions are ints; errors are ``ApiError`` subclasses carrying the API ``code``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx

log = logging.getLogger("ledgerflow.client")

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


def _time(v: str | None) -> datetime | None:
    return None if v is None else datetime.fromisoformat(v.replace("Z", "+00:00"))


# --------------------------------------------------------------------------- errors
class ApiError(Exception):
    """An API error (problem+json). ``code`` is the stable W-ERR code."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        request_id: str | None = None,
        errors: list[dict] | None = None,
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

    @classmethod
    def from_api(cls, d: dict) -> WorkflowInstance:
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
    def from_api(cls, d: dict) -> Step:
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
    poll: dict | None = None
    wait: dict | None = None
    child_workflow_id: str | None = None


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
    def from_api(cls, d: dict) -> Task:
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


# --------------------------------------------------------------------------- client
class Client:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 40.0,
        retries: int = 4,
        backoff: float = 0.2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            timeout=timeout,
            transport=transport,
            headers={"Authorization": f"Bearer {token}"},
        )
        self.retries, self.backoff = retries, backoff

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = ABSENT,
        params: dict | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """One API call; network errors and 503 are retried with the same Idempotency-Key."""
        headers = {}
        content = None
        if method != "GET":
            headers["Idempotency-Key"] = idempotency_key or uuid.uuid4().hex
        if body is not ABSENT:
            headers["Content-Type"] = "application/json"
            content = _dumps(body).encode()
        for attempt in range(self.retries + 1):
            try:
                resp = self._http.request(method, path, content=content, params=params, headers=headers)
            except httpx.TransportError:
                if attempt >= self.retries:
                    raise
                time.sleep(self.backoff * 2**attempt)
                continue
            if resp.status_code == 503 and attempt < self.retries:
                time.sleep(
                    min(float(resp.headers.get("Retry-After", "0") or 0), 5.0) or self.backoff * 2**attempt
                )
                continue
            return self._result(resp)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _result(resp: httpx.Response) -> Any:
        if resp.status_code < 400:
            return _loads(resp.content)
        try:
            p = _loads(resp.content)
        except ValueError:
            p = {}
        code = p.get("code") or ("UNAVAILABLE" if resp.status_code == 503 else "INTERNAL")
        ra = resp.headers.get("Retry-After")
        raise _BY_CODE.get(code, ApiError)(
            resp.status_code,
            code,
            p.get("message", resp.reason_phrase),
            request_id=p.get("request_id"),
            errors=p.get("errors"),
            retry_after=float(ra) if ra else None,
        )

    # -- workflows -------------------------------------------------------------------------
    def start_workflow(
        self,
        definition_id: str,
        version: str,
        input: Any,
        *,
        business_key: str | None = None,
        idempotency_key: str | None = None,
    ) -> StartResult:
        body: dict[str, Any] = {"definition_id": definition_id, "version": version, "input": input}
        if business_key is not None:
            body["business_key"] = business_key
        data = self.request("POST", "/v1/workflows", body=body, idempotency_key=idempotency_key)["data"]
        return StartResult(WorkflowInstance.from_api(data["instance"]), data["deduplicated"])

    def get_workflow(self, workflow_id: str) -> WorkflowInstance:
        return WorkflowInstance.from_api(self.request("GET", f"/v1/workflows/{workflow_id}")["data"])

    def list_workflows(
        self, *, limit: int | None = None, cursor: str | None = None, **filters: Any
    ) -> WorkflowPage:
        params = {
            k: (str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in filters.items()
            if v is not None
        }
        if limit is not None:
            params["limit"] = str(limit)
        if cursor is not None:
            params["cursor"] = cursor
        data = self.request("GET", "/v1/workflows", params=params)["data"]
        return WorkflowPage([WorkflowInstance.from_api(i) for i in data["items"]], data.get("next_cursor"))

    def get_workflow_steps(self, workflow_id: str) -> StepList:
        d = self.request("GET", f"/v1/workflows/{workflow_id}/steps")["data"]
        return StepList(d["instance_id"], int(d["revision"]), [Step.from_api(s) for s in d["steps"]])

    def get_workflow_step(self, workflow_id: str, key: str) -> StepDetail:
        d = self.request("GET", f"/v1/workflows/{workflow_id}/steps/{key}")["data"]
        return StepDetail(
            instance_id=d["instance_id"],
            revision=int(d["revision"]),
            step=Step.from_api(d["step"]),
            input=d.get("input", ABSENT),
            output=d.get("output", ABSENT),
            error=d.get("error", ABSENT),
            activated_at=_time(d.get("activated_at")),
            completed_at=_time(d.get("completed_at")),
            poll=d.get("poll"),
            wait=d.get("wait"),
            child_workflow_id=d.get("child_workflow_id"),
        )

    # -- definitions -----------------------------------------------------------------------
    def create_definition(
        self, name: str, description: str | None = None, *, idempotency_key: str | None = None
    ) -> dict:
        body = {"name": name, **({"description": description} if description is not None else {})}
        return self.request("POST", "/v1/workflow-definitions", body=body, idempotency_key=idempotency_key)[
            "data"
        ]["definition"]

    def publish_version(
        self, definition_id: str, document: dict, *, idempotency_key: str | None = None
    ) -> dict:
        return self.request(
            "POST",
            f"/v1/workflow-definitions/{definition_id}/versions",
            body=document,
            idempotency_key=idempotency_key,
        )["data"]["version"]

    def get_definition(self, definition_id: str) -> dict:
        return self.request("GET", f"/v1/workflow-definitions/{definition_id}")["data"]

    def get_contract(self, definition_id: str, version: str) -> dict:
        return self.request("GET", f"/v1/workflow-definitions/{definition_id}/versions/{version}/contract")[
            "data"
        ]

    # -- tasks -----------------------------------------------------------------------------
    def claim_tasks(self, queues: Iterable[str], *, wait_seconds: int = 0, max_tasks: int = 1) -> list[Task]:
        body = {"queues": list(queues), "wait_seconds": wait_seconds, "max_tasks": max_tasks}
        data = self.request("POST", "/v1/tasks/claim", body=body)["data"]
        return [Task.from_api(t) for t in data["tasks"]]

    def heartbeat_task(self, task_id: str, epoch: int) -> Task:
        return Task.from_api(
            self.request("POST", f"/v1/tasks/{task_id}/heartbeat", body={"epoch": epoch})["data"]["task"]
        )

    def complete_task(self, task_id: str, epoch: int, output: Any) -> Task:
        d = self.request("POST", f"/v1/tasks/{task_id}/complete", body={"epoch": epoch, "output": output})
        return Task.from_api(d["data"]["task"])

    def fail_task(self, task_id: str, epoch: int, message: str, *, retryable: bool) -> Task:
        body = {"epoch": epoch, "error": {"message": message, "retryable": retryable}}
        return Task.from_api(self.request("POST", f"/v1/tasks/{task_id}/fail", body=body)["data"]["task"])

    def get_task(self, task_id: str) -> Task:
        return Task.from_api(self.request("GET", f"/v1/tasks/{task_id}")["data"])


# --------------------------------------------------------------------------- worker
class NonRetryableError(Exception):
    """Raise from a task function to fail the task without a retry."""


@dataclass
class TaskWorker:
    """Runs decorated functions for queues: claim -> heartbeat while running -> complete / fail.

    worker = TaskWorker(client)

    @worker.task("approvals")
    def approve(task):          # task.input, task.workflow_id, task.step_key, task.epoch
        return {"approved": True}

    worker.run()                # until worker.stop() or Ctrl-C
    """

    client: Client
    wait_seconds: int = 10
    heartbeat_seconds: float | None = None  # default: a third of the lease
    functions: dict[str, Callable[[Task], Any]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def task(self, queue: str) -> Callable[[Callable[[Task], Any]], Callable[[Task], Any]]:
        def deco(fn: Callable[[Task], Any]) -> Callable[[Task], Any]:
            self.functions[queue] = fn
            return fn

        return deco

    def stop(self) -> None:
        self._stop.set()

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except (httpx.TransportError, Unavailable) as exc:
                log.warning("task worker: %s; retrying", exc)
                self._stop.wait(1.0)

    def run_once(self, wait_seconds: int | None = None) -> int:
        """Claim at most one task and run it; returns how many tasks ran."""
        tasks = self.client.claim_tasks(
            sorted(self.functions), wait_seconds=self.wait_seconds if wait_seconds is None else wait_seconds
        )
        for t in tasks:
            self._execute(t)
        return len(tasks)

    def _execute(self, t: Task) -> None:
        done = threading.Event()
        interval = self.heartbeat_seconds
        if interval is None and t.lease_expires_at is not None:
            interval = max(
                0.2, (t.lease_expires_at - datetime.now(t.lease_expires_at.tzinfo)).total_seconds() / 3
            )

        def beat() -> None:
            while not done.wait(interval or 10.0):
                try:
                    self.client.heartbeat_task(t.id, t.epoch)
                except StateConflict:
                    log.warning("task %s: lease lost (epoch %s)", t.id, t.epoch)
                    return
                except Exception as exc:  # noqa: BLE001 - keep beating
                    log.warning("task %s: heartbeat failed: %s", t.id, exc)

        hb = threading.Thread(target=beat, daemon=True)
        hb.start()
        try:
            output = self.functions[t.queue](t)
        except Exception as exc:  # noqa: BLE001 - the task fails, the worker goes on
            done.set()
            try:
                self.client.fail_task(
                    t.id,
                    t.epoch,
                    f"{type(exc).__name__}: {exc}"[:4000],
                    retryable=not isinstance(exc, NonRetryableError),
                )
            except StateConflict:
                log.warning("task %s: failure refused (epoch %s is stale)", t.id, t.epoch)
            return
        done.set()
        try:
            self.client.complete_task(t.id, t.epoch, output)
        except StateConflict:
            log.warning("task %s: result refused (epoch %s is stale)", t.id, t.epoch)
