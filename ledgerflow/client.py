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

import logging
import time
import uuid
import warnings
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx

log = logging.getLogger("ledgerflow.client")


from ledgerflow.control_client import (  # noqa: E402 - re-exported: control, signals, audit, recovery
    ControlResult,
    InstanceRecoveryResult,
    Operation,
    Page,
    RecoveryResult,
    SignalResult,
    WorkflowControlMixin,
    WorkflowSignal,
)
from ledgerflow.sdk_types import (  # noqa: E402 - re-exported: the SDK's public names
    _BY_CODE,
    ABSENT,
    ApiError,
    BodyTooLarge,
    IdempotencyConflict,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    StartResult,
    StateConflict,
    Step,
    StepDetail,
    StepList,
    Task,
    Unauthenticated,
    Unavailable,
    UnsupportedMediaType,
    WorkflowInstance,
    WorkflowPage,
    _dumps,
    _loads,
    _seg,
    _time,
)


# --------------------------------------------------------------------------- client
class InsecureTransportWarning(UserWarning):
    """The base URL is plain http to another machine: the bearer token would cross the network in
    clear text."""


_LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


def _warn_if_plain_http(base_url: str) -> None:
    parts = urlsplit(base_url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "http" and host not in _LOCAL_HOSTS and not host.endswith(".localhost"):
        warnings.warn(
            f"{base_url} is plain http to another machine: the bearer token is sent unencrypted; use https",
            InsecureTransportWarning,
            stacklevel=3,
        )


class Client(WorkflowControlMixin):
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
        _warn_if_plain_http(base_url)
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
        return WorkflowInstance.from_api(self.request("GET", f"/v1/workflows/{_seg(workflow_id)}")["data"])

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
        d = self.request("GET", f"/v1/workflows/{_seg(workflow_id)}/steps")["data"]
        return StepList(d["instance_id"], int(d["revision"]), [Step.from_api(s) for s in d["steps"]])

    def get_workflow_step(self, workflow_id: str, key: str) -> StepDetail:
        d = self.request("GET", f"/v1/workflows/{_seg(workflow_id)}/steps/{_seg(key)}")["data"]
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
            next_attempt_at=_time(d.get("next_attempt_at")),
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
            f"/v1/workflow-definitions/{_seg(definition_id)}/versions",
            body=document,
            idempotency_key=idempotency_key,
        )["data"]["version"]

    def get_definition(self, definition_id: str) -> dict:
        return self.request("GET", f"/v1/workflow-definitions/{_seg(definition_id)}")["data"]

    def get_contract(self, definition_id: str, version: str) -> dict:
        return self.request(
            "GET", f"/v1/workflow-definitions/{_seg(definition_id)}/versions/{_seg(version)}/contract"
        )["data"]

    # -- tasks -----------------------------------------------------------------------------
    def claim_tasks(self, queues: Iterable[str], *, wait_seconds: int = 0, max_tasks: int = 1) -> list[Task]:
        body = {"queues": list(queues), "wait_seconds": wait_seconds, "max_tasks": max_tasks}
        data = self.request("POST", "/v1/tasks/claim", body=body)["data"]
        return [Task.from_api(t) for t in data["tasks"]]

    def heartbeat_task(self, task_id: str, epoch: int) -> Task:
        return Task.from_api(
            self.request("POST", f"/v1/tasks/{_seg(task_id)}/heartbeat", body={"epoch": epoch})["data"][
                "task"
            ]
        )

    def complete_task(self, task_id: str, epoch: int, output: Any) -> Task:
        d = self.request(
            "POST", f"/v1/tasks/{_seg(task_id)}/complete", body={"epoch": epoch, "output": output}
        )
        return Task.from_api(d["data"]["task"])

    def fail_task(self, task_id: str, epoch: int, message: str, *, retryable: bool) -> Task:
        body = {"epoch": epoch, "error": {"message": message, "retryable": retryable}}
        return Task.from_api(
            self.request("POST", f"/v1/tasks/{_seg(task_id)}/fail", body=body)["data"]["task"]
        )

    def get_task(self, task_id: str) -> Task:
        return Task.from_api(self.request("GET", f"/v1/tasks/{_seg(task_id)}")["data"])


from ledgerflow.worker import NonRetryableError, TaskWorker  # noqa: E402

__all__ = [
    "ABSENT",
    "ApiError",
    "BodyTooLarge",
    "Client",
    "ControlResult",
    "InstanceRecoveryResult",
    "Operation",
    "Page",
    "RecoveryResult",
    "SignalResult",
    "WorkflowSignal",
    "IdempotencyConflict",
    "InvalidArgument",
    "LimitExceeded",
    "NonRetryableError",
    "NotFound",
    "PermissionDenied",
    "QuotaExceeded",
    "StartResult",
    "StateConflict",
    "Step",
    "StepDetail",
    "StepList",
    "Task",
    "TaskWorker",
    "Unauthenticated",
    "Unavailable",
    "UnsupportedMediaType",
    "WorkflowInstance",
    "WorkflowPage",
    "_dumps",
]
