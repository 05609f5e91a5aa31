"""Python SDK for the Ledgerflow public API: workflows, definitions and the task protocol.

    from ledgerflow.client import Client, TaskWorker
    client = Client()      # LEDGERFLOW_URL (default http://127.0.0.1:5000) and LEDGERFLOW_TOKEN
    started = client.start_workflow(definition_id, "v1", {"order_id": "A-1"}, business_key="A-1")

- The server address is one setting, ``LEDGERFLOW_URL``; every connection error names it.
- Every error the SDK raises on purpose is a ``ClientError`` whose text is one line;
  ``run_script(main)`` prints that line instead of a traceback and exits non-zero.
- Numbers stay exact both ways (integers of any size, fractions as ``Decimal``).
- Mutations carry an ``Idempotency-Key`` (generated when you pass none); retries after network
  errors, 503 and 429 ``RATE_LIMITED`` resend the **same** key and request, never a new one. A quota
  refusal (429 ``QUEUE_FULL`` / ``APPLICATION_FULL``) is raised, not retried.
- Revisions are ints; errors are ``ApiError`` subclasses carrying the API ``code``.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterable
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

import httpx

from ledgerflow.control_client import (  # re-exported: control, signals, audit, recovery
    ControlResult,
    InstanceRecoveryResult,
    Operation,
    Page,
    RecoveryResult,
    SignalResult,
    WorkflowControlMixin,
    WorkflowSignal,
    _page_params,
)
from ledgerflow.integrations_client import (  # re-exported: events, subscriptions, rules
    IntegrationsMixin,
)
from ledgerflow.integrations_client import (  # re-exported: the webhook receiver's verifier
    WebhookVerificationError as WebhookVerificationError,
)
from ledgerflow.integrations_client import verify_webhook as verify_webhook
from ledgerflow.sdk_types import (  # re-exported: the SDK's public names
    _BY_CODE,
    ABSENT,
    DEFAULT_URL,
    ApiError,
    BodyTooLarge,
    ClientError,
    CompletionResult,
    ConfigurationError,
    IdempotencyConflict,
    InvalidArgument,
    LimitExceeded,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    RateLimited,
    ServerUnreachable,
    StartResult,
    StateConflict,
    Step,
    StepDetail,
    StepList,
    Task,
    Unauthenticated,
    Unavailable,
    UnsupportedMediaType,
    WaitTimeout,
    WorkflowInstance,
    WorkflowPage,
    _data,
    _dumps,
    _loads,
    _seg,
    _time,
)
from ledgerflow.wire import Answer, Connections, TransportFailure, proxied, reason_of
from ledgerflow.worker import NonRetryableError, TaskWorker

log = logging.getLogger("ledgerflow.client")

TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
CREDENTIALS = "/api/workflows/engine/credentials"  # the operator API's credentials routes


def server_url() -> str:
    """The server address: ``LEDGERFLOW_URL``, default ``http://127.0.0.1:5000``."""
    return (os.environ.get("LEDGERFLOW_URL") or DEFAULT_URL).rstrip("/")


def _transient(resp: Answer) -> bool:
    """503 (the server or its database is away) and 429 RATE_LIMITED (a per-credential window or
    long-poll cap: the request did nothing) clear by themselves; a quota's 429 does not."""
    if resp.status_code == 503:
        return True
    if resp.status_code != 429:
        return False
    try:
        code: object = _loads(resp.content).get("code")
        return code == "RATE_LIMITED"
    except (ValueError, AttributeError):
        return False


def run_script(main: Callable[[], Any]) -> None:
    """Run a script's ``main``; an SDK error ends it with its one-line message and exit code 1
    (Ctrl-C: 130) instead of a traceback."""
    try:
        main()
    except ClientError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        sys.exit(1)
    except KeyboardInterrupt:
        sys.exit(130)


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


class _Borrowed(httpx.BaseTransport):
    """A transport given to ``Client(transport=...)``: the caller's, perhaps shared by several clients.
    ``Client.close()`` leaves it open: closing it closes every connection of its pool, also the one
    another client is reading an answer from (that reader then waits on a dead descriptor until its
    read timeout and resends; decision "A transport given to Client is the caller's")."""

    def __init__(self, inner: httpx.BaseTransport) -> None:
        self._inner = inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._inner.handle_request(request)

    def close(self) -> None:
        pass  # the caller closes its transport


class Client(WorkflowControlMixin, IntegrationsMixin):
    """``Client()`` reads LEDGERFLOW_URL (default http://127.0.0.1:5000) and LEDGERFLOW_TOKEN;
    ``Client(url, token)`` takes them directly. ``close()`` closes the client's own connections; a
    ``transport`` given to it stays open (the caller's, and it may serve other clients)."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 40.0,
        retries: int = 4,
        backoff: float = 0.2,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = (base_url or server_url()).rstrip("/")
        self.token_source = "the token given to Client" if token else "LEDGERFLOW_TOKEN"
        token = token or os.environ.get("LEDGERFLOW_TOKEN", "").strip()
        # a bad setting is reported by the first call (inside your error handling, e.g. run_script)
        self._config_problem: str | None = None
        if not self.base_url.startswith(("http://", "https://")):
            self._config_problem = (
                f"LEDGERFLOW_URL must be an http:// or https:// address like {DEFAULT_URL}, "
                f"not {self.base_url!r}"
            )
        elif not token:
            self._config_problem = (
                "LEDGERFLOW_TOKEN is not set: issue a credential with `ledgerflow credentials create "
                "--namespace NS --name NAME <switches> --token-only` and export LEDGERFLOW_TOKEN=<token>"
            )
        _warn_if_plain_http(self.base_url)
        base = self.base_url if self._config_problem is None else DEFAULT_URL
        auth = {"Authorization": f"Bearer {token}"}
        # the SDK's own kept-alive connections (``ledgerflow.wire``: a third of httpx's CPU per request),
        # unless the caller gives a transport or a proxy applies: httpx then
        self._http: httpx.Client | None = None
        self._wire: Connections | None = None
        if transport is None and not proxied(base):
            self._wire = Connections(base, timeout=timeout, headers=auth)
        else:
            self._http = httpx.Client(
                base_url=base,
                timeout=timeout,
                transport=_Borrowed(transport) if transport is not None else None,
                headers=auth,
            )
        self.retries, self.backoff = retries, backoff

    def close(self) -> None:
        if self._wire is not None:
            self._wire.close()
        if self._http is not None:
            self._http.close()

    def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        params: dict[str, Any] | None,
        headers: dict[str, str],
    ) -> Answer:
        """One exchange with the server; ``TransportFailure`` when no answer came."""
        if self._wire is not None:
            return self._wire.request(method, path, content=content, params=params, headers=headers)
        assert self._http is not None
        try:
            return Answer.of(
                self._http.request(method, path, content=content, params=params, headers=headers)
            )
        except httpx.TransportError as exc:
            raise TransportFailure(reason_of(exc)) from exc

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
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """One API call; network errors, 503 and 429 RATE_LIMITED are retried with the same
        Idempotency-Key (after the answer's ``Retry-After``, at most 5 s)."""
        if self._config_problem is not None:
            raise ConfigurationError(self._config_problem)
        headers = {}
        content = None
        if method != "GET":
            headers["Idempotency-Key"] = idempotency_key or uuid.uuid4().hex
        if body is not ABSENT:
            headers["Content-Type"] = "application/json"
            content = _dumps(body).encode()
        for attempt in range(self.retries + 1):
            try:
                resp = self._send(method, path, content, params, headers)
            except TransportFailure as exc:
                if attempt >= self.retries:
                    raise ServerUnreachable(self.base_url, exc.reason) from exc
                time.sleep(self.backoff * 2**attempt)
                continue
            if attempt < self.retries and _transient(resp):
                time.sleep(
                    min(float(resp.headers.get("Retry-After", "0") or 0), 5.0) or self.backoff * 2**attempt
                )
                continue
            return self._result(resp)
        raise AssertionError("unreachable")  # pragma: no cover

    def _result(self, resp: Answer) -> Any:
        if resp.status_code < 400:
            try:
                return _loads(resp.content)
            except ValueError:
                raise ApiError(
                    resp.status_code,
                    "INTERNAL",
                    f"the server at {self.base_url} (LEDGERFLOW_URL) answered with something that is not "
                    "JSON: is that address a Ledgerflow server?",
                ) from None
        try:
            p = _loads(resp.content)
        except ValueError:
            p = {}
        if not isinstance(p, dict):
            p = {}
        code = p.get("code") or ("UNAVAILABLE" if resp.status_code == 503 else "INTERNAL")
        message = p.get("message", resp.reason_phrase)
        if code == "UNAUTHENTICATED":
            message = f"{message} (check {self.token_source})"
        elif not p and resp.status_code == 404:
            message = f"{resp.path} is not a Ledgerflow API at {self.base_url} (LEDGERFLOW_URL)"
        ra = resp.headers.get("Retry-After")
        raise _BY_CODE.get(code, ApiError)(
            resp.status_code,
            code,
            message,
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

    def wait_for_workflow(
        self,
        workflow_id: str,
        *,
        states: Iterable[str] = TERMINAL_STATES,
        timeout: float = 60.0,
        interval: float = 0.25,
        progress: Callable[[str], Any] | None = None,
    ) -> WorkflowInstance:
        """Poll until the workflow is in one of ``states`` (default: finished) and return it.
        ``progress`` (e.g. ``print``) gets one line whenever a step changes state:
        ``revision 4: approve=SUCCEEDED, ship=ACTIVE``. Raises ``WaitTimeout`` after ``timeout`` s."""
        wanted = set(states)
        deadline = time.monotonic() + timeout
        seen = None
        while True:
            if progress is not None:
                steps = self.get_workflow_steps(workflow_id)
                line = ", ".join(f"{s.key}={s.state}" for s in steps.steps)
                if line != seen:
                    progress(f"revision {steps.revision}: {line}")
                    seen = line
            inst = self.get_workflow(workflow_id)
            if inst.state in wanted:
                return inst
            if time.monotonic() > deadline:
                raise WaitTimeout(
                    f"workflow {workflow_id} is still {inst.state} after {timeout:g} s "
                    f"(waiting for {', '.join(sorted(wanted))}); is a task worker running for its queues?"
                )
            time.sleep(interval)

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

    # -- schedules (X-SCHED) ----------------------------------------------------------------
    def create_schedule(
        self,
        name: str,
        definition_id: str,
        version: str,
        input: Any,
        *,
        cron: str | None = None,
        timezone: str | None = None,
        interval_seconds: int | None = None,
        overlap: str | None = None,
        fire_time_field: str | None = None,
        paused: bool = False,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """A schedule of a pinned version: ``cron`` (5 fields or ``@hourly``-style) in ``timezone``
        (IANA, default UTC), or ``interval_seconds``; ``overlap``: skip (default), allow, cancel_previous."""
        body: dict[str, Any] = {
            "name": name,
            "definition_id": definition_id,
            "version": version,
            "input": input,
            "paused": paused,
        }
        for k, v in (
            ("cron", cron),
            ("timezone", timezone),
            ("interval_seconds", interval_seconds),
            ("overlap", overlap),
            ("fire_time_field", fire_time_field),
        ):
            if v is not None:
                body[k] = v
        return _data(self.request("POST", "/v1/schedules", body=body, idempotency_key=idempotency_key))

    def get_schedule(self, schedule_id: str) -> dict[str, Any]:
        return _data(self.request("GET", f"/v1/schedules/{schedule_id}"))

    def list_schedules(self, *, limit: int | None = None, cursor: str | None = None) -> dict[str, Any]:
        params = {k: str(v) for k, v in (("limit", limit), ("cursor", cursor)) if v is not None}
        return _data(self.request("GET", "/v1/schedules", params=params))

    def list_schedule_fires(self, schedule_id: str, *, limit: int = 20) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = _data(
            self.request("GET", f"/v1/schedules/{schedule_id}/fires", params={"limit": str(limit)})
        )["items"]
        return items

    def update_schedule(
        self, schedule_id: str, *, idempotency_key: str | None = None, **changes: Any
    ) -> dict[str, Any]:
        return _data(
            self.request(
                "PATCH", f"/v1/schedules/{schedule_id}", body=changes, idempotency_key=idempotency_key
            )
        )

    def pause_schedule(self, schedule_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        return _data(
            self.request(
                "POST", f"/v1/schedules/{schedule_id}/pause", body={}, idempotency_key=idempotency_key
            )
        )

    def resume_schedule(self, schedule_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """``{"schedule", "missed"}``: ``missed`` says how many fire times passed while paused (they
        are coalesced into one launch)."""
        return _data(
            self.request(
                "POST", f"/v1/schedules/{schedule_id}/resume", body={}, idempotency_key=idempotency_key
            )
        )

    def launch_schedule(self, schedule_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """Launch now: ``{"schedule_id", "fire_at", "job_id"}`` (the instance starts in the advance pool)."""
        return _data(
            self.request(
                "POST", f"/v1/schedules/{schedule_id}/launch", body={}, idempotency_key=idempotency_key
            )
        )

    def delete_schedule(self, schedule_id: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        return _data(
            self.request("DELETE", f"/v1/schedules/{schedule_id}", body={}, idempotency_key=idempotency_key)
        )

    # -- definitions -----------------------------------------------------------------------
    def create_definition(
        self, name: str, description: str | None = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        body = {"name": name, **({"description": description} if description is not None else {})}
        definition: dict[str, Any] = _data(
            self.request("POST", "/v1/workflow-definitions", body=body, idempotency_key=idempotency_key)
        )["definition"]
        return definition

    def publish_version(
        self, definition_id: str, document: dict[str, Any], *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        version: dict[str, Any] = _data(
            self.request(
                "POST",
                f"/v1/workflow-definitions/{_seg(definition_id)}/versions",
                body=document,
                idempotency_key=idempotency_key,
            )
        )["version"]
        return version

    def get_definition(self, definition_id: str) -> dict[str, Any]:
        return _data(self.request("GET", f"/v1/workflow-definitions/{_seg(definition_id)}"))

    def list_definitions(
        self, *, name: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page:
        """One page of the namespace's definitions, newest first; ``name`` filters by exact name."""
        params: dict[str, str] = {}
        if name is not None:
            params["name"] = name
        if limit is not None:
            params["limit"] = str(limit)
        if cursor is not None:
            params["cursor"] = cursor
        d = self.request("GET", "/v1/workflow-definitions", params=params)["data"]
        return Page(d["items"], d.get("next_cursor"))

    def find_definition(self, name: str) -> dict[str, Any] | None:
        """The definition called ``name`` (with its versions), or None."""
        items = self.list_definitions(name=name, limit=1).items
        return items[0] if items else None

    def list_definition_versions(
        self, definition_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> Page:
        """One page of a definition's published versions (without their documents), newest first."""
        params: dict[str, str] = {}
        if limit is not None:
            params["limit"] = str(limit)
        if cursor is not None:
            params["cursor"] = cursor
        d = self.request("GET", f"/v1/workflow-definitions/{definition_id}/versions", params=params)["data"]
        return Page(d["items"], d.get("next_cursor"))

    def get_version(self, definition_id: str, version: str) -> dict[str, Any]:
        return _data(self.request("GET", f"/v1/workflow-definitions/{definition_id}/versions/{version}"))

    def ensure_definition(
        self, name: str, document: dict[str, Any], *, description: str | None = None
    ) -> dict[str, Any]:
        """Create the definition ``name`` unless it exists, and publish ``document`` unless its
        ``version`` is already published. Returns the definition with its versions. Safe to run again
        and again with the same document. Published versions never change: when ``version`` is
        published with a *different* document, raises ``StateConflict`` naming the version (give the
        changed document a new ``version``) instead of going on with the old one."""
        definition = self.find_definition(name)
        if definition is None:
            try:
                self.create_definition(name, description)
            except StateConflict:  # created meanwhile by someone else
                pass
            definition = self.find_definition(name)
            if definition is None:  # pragma: no cover - deleted in between; definitions are never deleted
                raise NotFound(404, "NOT_FOUND", f"definition {name!r} not found")
        version = document.get("version")
        if version not in {v["version"] for v in definition["versions"]}:
            try:
                self.publish_version(definition["id"], document)
            except StateConflict:  # published meanwhile
                pass
            definition = self.get_definition(definition["id"])
        published = self.get_version(definition["id"], str(version))["document"]
        if not _same_json(published, document):
            raise StateConflict(
                409,
                "STATE_CONFLICT",
                f"definition {name!r} already has version {version!r} with a different document; a "
                "published version never changes: give the changed document a new version (e.g. "
                f"{_next_version(str(version))!r}) and start workflows with that version",
            )
        return definition

    def get_contract(self, definition_id: str, version: str) -> dict[str, Any]:
        return _data(
            self.request(
                "GET", f"/v1/workflow-definitions/{_seg(definition_id)}/versions/{_seg(version)}/contract"
            )
        )

    # -- credentials (the operator API; the calling credential needs credentials:manage) ----
    def issue_credential(
        self,
        name: str,
        *,
        switches: Iterable[str] = (),
        scopes: Iterable[str] = (),
        queues: Iterable[str] | None = None,
        platform: bool = False,
        expires_in_seconds: int | None = None,
        namespace: str | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Issue a credential of this namespace with at most the calling credential's rights:
        ``{"token": ..., "credential": {...}}``; the token is shown this once. ``namespace``: when given,
        the calling credential's own (the only one it issues in)."""
        body: dict[str, Any] = {"name": name, "switches": list(switches), "scopes": list(scopes)}
        if namespace is not None:
            body["namespace"] = namespace
        if queues is not None:
            body["queues"] = list(queues)
        if platform:
            body["platform"] = True
        if expires_in_seconds is not None:
            body["expires_in_seconds"] = expires_in_seconds
        return _data(self.request("POST", CREDENTIALS, body=body, idempotency_key=idempotency_key))

    def list_credentials(self, *, limit: int | None = None, cursor: str | None = None) -> Page:
        """One page of this namespace's credentials, oldest first (never a token)."""
        d = self.request("GET", CREDENTIALS, params=_page_params(limit, cursor))["data"]
        return Page(d["items"], d.get("next_cursor"))

    def revoke_credential(
        self, credential_id: str, *, reason: str | None = None, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Revoke a credential of this namespace; its token answers 401 from then on."""
        body = {} if reason is None else {"reason": reason}
        credential: dict[str, Any] = _data(
            self.request(
                "POST",
                f"{CREDENTIALS}/{_seg(credential_id)}/revoke",
                body=body,
                idempotency_key=idempotency_key,
            )
        )["credential"]
        return credential

    # -- tasks -----------------------------------------------------------------------------
    def claim_tasks(
        self,
        queues: Iterable[str],
        *,
        wait_seconds: int = 0,
        max_tasks: int = 1,
        worker: dict[str, Any] | None = None,
    ) -> list[Task]:
        """``worker``: the claiming worker's identity (``ledgerflow.worker.identity()``), kept on the attempts."""
        body: dict[str, Any] = {"queues": list(queues), "wait_seconds": wait_seconds, "max_tasks": max_tasks}
        if worker is not None:
            body["worker"] = worker
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

    def complete_tasks(
        self, completions: Iterable[tuple[str, int, Any]], *, idempotency_key: str | None = None
    ) -> list[CompletionResult]:
        """Complete up to 16 claimed tasks in one request: ``[(task_id, epoch, output), ...]``. Each is
        answered on its own (``CompletionResult``, same order): a stale epoch is a 409 item, not an
        error of the call; a completion applied before answers 200 again (``replayed``)."""
        return self.complete_and_claim(completions, idempotency_key=idempotency_key)[0]

    def complete_and_claim(
        self,
        completions: Iterable[tuple[str, int, Any]],
        queues: Iterable[str] = (),
        *,
        max_tasks: int = 0,
        idempotency_key: str | None = None,
        worker: dict[str, Any] | None = None,
    ) -> tuple[list[CompletionResult], list[Task]]:
        """``complete_tasks``, then (with ``max_tasks`` > 0) claim up to ``max_tasks`` tasks of ``queues``
        in the same request, without waiting: ``(results, claimed tasks)``. The claim is a claim with
        this request's Idempotency-Key: resent with the same key, it answers the same tasks again."""
        body: dict[str, Any] = {"tasks": [{"id": i, "epoch": e, "output": o} for i, e, o in completions]}
        if max_tasks > 0:
            body["claim"] = {"queues": sorted(set(queues)), "max_tasks": max_tasks}
            if worker is not None:
                body["claim"]["worker"] = worker
        d = self.request("POST", "/v1/tasks/complete", body=body, idempotency_key=idempotency_key)["data"]
        claimed = [Task.from_api(t) for t in d.get("claimed", ())]
        return [CompletionResult.from_api(r) for r in d["results"]], claimed

    def release_task(self, task_id: str, epoch: int) -> Task:
        """Hand a claimed task back to its queue now (its lease ends; no attempt is counted)."""
        return Task.from_api(
            self.request("POST", f"/v1/tasks/{_seg(task_id)}/release", body={"epoch": epoch})["data"]["task"]
        )

    def fail_task(
        self,
        task_id: str,
        epoch: int,
        message: str,
        *,
        retryable: bool,
        exc_type: str | None = None,
        stack: str | None = None,
        worker: dict[str, Any] | None = None,
    ) -> Task:
        """``exc_type`` / ``stack``: the exception's type and (bounded) stack trace; ``worker``: the failing
        worker's identity. The server keeps them on the attempt (``GET .../steps/{key}/rounds``)."""
        error: dict[str, Any] = {"message": message, "retryable": retryable}
        if exc_type is not None:
            error["type"] = exc_type
        if stack is not None:
            error["stack"] = stack
        body: dict[str, Any] = {"epoch": epoch, "error": error}
        if worker is not None:
            body["worker"] = worker
        return Task.from_api(
            self.request("POST", f"/v1/tasks/{_seg(task_id)}/fail", body=body)["data"]["task"]
        )

    def get_task(self, task_id: str) -> Task:
        return Task.from_api(self.request("GET", f"/v1/tasks/{_seg(task_id)}")["data"])


__all__ = [
    "ABSENT",
    "DEFAULT_URL",
    "TERMINAL_STATES",
    "ApiError",
    "BodyTooLarge",
    "Client",
    "ClientError",
    "CompletionResult",
    "ConfigurationError",
    "ServerUnreachable",
    "WaitTimeout",
    "run_script",
    "server_url",
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
    "RateLimited",
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


def _same_json(a: Any, b: Any) -> bool:
    """Equal as JSON documents: numbers by value (the server stores 5.0 as 5, the SDK reads 0.1 as a
    Decimal), objects whatever their key order."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float | Decimal) and isinstance(b, int | float | Decimal):
        return Decimal(str(a)) == Decimal(str(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _next_version(version: str) -> str:
    """``v1`` -> ``v2``, ``2024-01`` -> ``2024-02``; otherwise ``<version>-2``."""
    m = re.fullmatch(r"(.*?)(\d+)", version)
    if m is None:
        return f"{version}-2"
    digits = m.group(2)
    return f"{m.group(1)}{int(digits) + 1:0{len(digits)}d}"
