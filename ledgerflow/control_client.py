"""SDK calls for control, signals, operation audit, recovery and history (W-CTL, W-SIG, W-AUDIT,
X-RECOVER, X-HIST). Mixed into ``ledgerflow.client.Client``: the same transport, the same
idempotent retries (network errors and 503 resend the same Idempotency-Key) and typed errors."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledgerflow.sdk_types import ABSENT, WorkflowInstance, _seg, _time


@dataclass(frozen=True)
class ControlResult:
    instance: WorkflowInstance
    deduplicated: bool


@dataclass(frozen=True)
class WorkflowSignal:
    id: str
    namespace_id: str
    workflow_id: str
    revision: int
    name: str
    payload_version: str
    target_step_key: str
    target_activation_sequence: int
    correlation_key: str
    payload: Any
    actor_id: str
    state: str
    accepted_at: datetime
    expires_at: datetime
    evidence_ref: str | None = None
    disposition: str | None = None
    consumed_wait_id: str | None = None

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> WorkflowSignal:
        return cls(
            id=d["id"],
            namespace_id=d["namespace_id"],
            workflow_id=d["workflow_id"],
            revision=int(d["revision"]),
            name=d["name"],
            payload_version=d["payload_version"],
            target_step_key=d["target_step_key"],
            target_activation_sequence=d["target_activation_sequence"],
            correlation_key=d["correlation_key"],
            payload=d["payload"],
            actor_id=d["actor_id"],
            state=d["state"],
            accepted_at=_time(d["accepted_at"]),
            expires_at=_time(d["expires_at"]),
            evidence_ref=d.get("evidence_ref"),
            disposition=d.get("disposition"),
            consumed_wait_id=d.get("consumed_wait_id"),
        )


@dataclass(frozen=True)
class SignalResult:
    signal: WorkflowSignal
    deduplicated: bool


@dataclass(frozen=True)
class Operation:
    id: str
    workflow_id: str
    operation_id: str
    actor_id: str
    action: str
    created_at: datetime
    reason: str | None = None
    evidence_ref: str | None = None
    before: Any = ABSENT  # ABSENT in list items (read one operation for its body)
    after: Any = ABSENT
    signal_id: str | None = None  # signal-resource audit entries only

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> Operation:
        return cls(
            id=d["id"],
            workflow_id=d["workflow_id"],
            operation_id=d["operation_id"],
            actor_id=d["actor_id"],
            action=d["action"],
            created_at=_time(d["created_at"]),
            reason=d.get("reason"),
            evidence_ref=d.get("evidence_ref"),
            before=d.get("before", ABSENT),
            after=d.get("after", ABSENT),
            signal_id=d.get("signal_id"),
        )


@dataclass(frozen=True)
class Page:
    items: list[Any]
    next_cursor: str | None


@dataclass(frozen=True)
class RecoveryResult:
    instance: WorkflowInstance
    step: dict[str, Any]
    operation_id: str
    deduplicated: bool


@dataclass(frozen=True)
class InstanceRecoveryResult:
    instance: WorkflowInstance
    resolution: dict[str, Any]  # {resolution, review: UNKNOWN_OUTCOME | COMPENSATION_FAILED, ...}
    operation_id: str
    deduplicated: bool


def _page_params(limit: int | None, cursor: str | None) -> dict[str, str]:
    params = {}
    if limit is not None:
        params["limit"] = str(limit)
    if cursor is not None:
        params["cursor"] = cursor
    return params


def _every_item(fetch_page: Callable[[str | None], Page]) -> Iterator[Any]:
    """Follow ``next_cursor`` page by page, yielding every item."""
    cursor = None
    while True:
        page = fetch_page(cursor)
        yield from page.items
        if not page.next_cursor:
            return
        cursor = page.next_cursor


class WorkflowControlMixin:
    request: Any  # provided by Client

    # -- control ---------------------------------------------------------------------------
    def control_workflow(
        self,
        workflow_id: str,
        operation: str,
        expected_control_revision: int,
        reason: str,
        *,
        idempotency_key: str | None = None,
    ) -> ControlResult:
        """PAUSE / RESUME / CANCEL on the control revision you read (409 StateConflict when stale)."""
        body = {
            "operation": operation,
            "expected_control_revision": str(expected_control_revision),
            "reason": reason,
        }
        d = self.request(
            "POST", f"/v1/workflows/{_seg(workflow_id)}/control", body=body, idempotency_key=idempotency_key
        )["data"]
        return ControlResult(WorkflowInstance.from_api(d["instance"]), d["deduplicated"])

    # -- signals ---------------------------------------------------------------------------
    def send_workflow_signal(
        self,
        workflow_id: str,
        *,
        name: str,
        payload_version: str,
        target_step_key: str,
        target_activation_sequence: int,
        correlation_key: str,
        payload: Any,
        reason: str,
        evidence_ref: str | None = None,
        idempotency_key: str | None = None,
    ) -> SignalResult:
        body: dict[str, Any] = {
            "name": name,
            "payload_version": payload_version,
            "target_step_key": target_step_key,
            "target_activation_sequence": target_activation_sequence,
            "correlation_key": correlation_key,
            "payload": payload,
            "reason": reason,
        }
        if evidence_ref is not None:
            body["evidence_ref"] = evidence_ref
        d = self.request(
            "POST", f"/v1/workflows/{_seg(workflow_id)}/signals", body=body, idempotency_key=idempotency_key
        )["data"]
        return SignalResult(WorkflowSignal.from_api(d["signal"]), d["deduplicated"])

    def get_workflow_signal(self, workflow_id: str, signal_id: str) -> WorkflowSignal:
        return WorkflowSignal.from_api(
            self.request("GET", f"/v1/workflows/{_seg(workflow_id)}/signals/{_seg(signal_id)}")["data"]
        )

    def list_workflow_signals(
        self, workflow_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> Page:
        d = self.request(
            "GET", f"/v1/workflows/{_seg(workflow_id)}/signals", params=_page_params(limit, cursor)
        )["data"]
        return Page([WorkflowSignal.from_api(s) for s in d["items"]], d.get("next_cursor"))

    # -- operation audit -------------------------------------------------------------------
    def list_workflow_operations_page(
        self, workflow_id: str, *, limit: int | None = None, cursor: str | None = None
    ) -> Page:
        d = self.request(
            "GET", f"/v1/workflows/{_seg(workflow_id)}/operations", params=_page_params(limit, cursor)
        )["data"]
        return Page([Operation.from_api(o) for o in d["items"]], d.get("next_cursor"))

    def list_workflow_operations(self, workflow_id: str, *, page_size: int = 20) -> Iterator[Operation]:
        """Every audited operation, newest first, following next_cursor page by page."""
        return _every_item(
            lambda cursor: self.list_workflow_operations_page(workflow_id, limit=page_size, cursor=cursor)
        )

    def get_workflow_operation(self, workflow_id: str, operation_id: str) -> Operation:
        return Operation.from_api(
            self.request("GET", f"/v1/workflows/{_seg(workflow_id)}/operations/{_seg(operation_id)}")["data"]
        )

    def list_signal_operations_page(
        self,
        workflow_id: str,
        *,
        signal_id: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page:
        params = _page_params(limit, cursor)
        if signal_id is not None:
            params["signal_id"] = signal_id
        d = self.request("GET", f"/v1/workflows/{_seg(workflow_id)}/signal-operations", params=params)["data"]
        return Page([Operation.from_api(o) for o in d["items"]], d.get("next_cursor"))

    def list_signal_operations(
        self, workflow_id: str, *, signal_id: str | None = None, page_size: int = 20
    ) -> Iterator[Operation]:
        """The signal-resource audit of a workflow (or of one signal), newest first, page by page."""
        return _every_item(
            lambda cursor: self.list_signal_operations_page(
                workflow_id, signal_id=signal_id, limit=page_size, cursor=cursor
            )
        )

    def get_signal_operation(self, workflow_id: str, operation_id: str) -> Operation:
        return Operation.from_api(
            self.request("GET", f"/v1/workflows/{_seg(workflow_id)}/signal-operations/{_seg(operation_id)}")[
                "data"
            ]
        )

    # -- recovery and history --------------------------------------------------------------
    def recover_workflow_step(
        self,
        workflow_id: str,
        action: str,
        step_key: str,
        reason: str,
        *,
        output: Any = ABSENT,
        evidence_ref: str | None = None,
        idempotency_key: str | None = None,
    ) -> RecoveryResult:
        """RETRY_STEP, SUCCEED_STEP (with ``output``) or FAIL_STEP on a NEEDS_REVIEW step."""
        body: dict[str, Any] = {"action": action, "step_key": step_key, "reason": reason}
        if output is not ABSENT:
            body["output"] = output
        if evidence_ref is not None:
            body["evidence_ref"] = evidence_ref
        d = self.request(
            "POST", f"/v1/workflows/{_seg(workflow_id)}/recovery", body=body, idempotency_key=idempotency_key
        )["data"]
        return RecoveryResult(
            WorkflowInstance.from_api(d["instance"]), d["step"], d["operation_id"], d["deduplicated"]
        )

    def resolve_workflow_instance(
        self,
        workflow_id: str,
        resolution: str,
        reason: str,
        *,
        evidence_ref: str | None = None,
        idempotency_key: str | None = None,
    ) -> InstanceRecoveryResult:
        """RESOLVE_INSTANCE on a NEEDS_REVIEW workflow (no step in review): CONTINUE, CANCEL or FAIL."""
        body: dict[str, Any] = {"action": "RESOLVE_INSTANCE", "resolution": resolution, "reason": reason}
        if evidence_ref is not None:
            body["evidence_ref"] = evidence_ref
        d = self.request(
            "POST", f"/v1/workflows/{_seg(workflow_id)}/recovery", body=body, idempotency_key=idempotency_key
        )["data"]
        return InstanceRecoveryResult(
            WorkflowInstance.from_api(d["instance"]), d["resolution"], d["operation_id"], d["deduplicated"]
        )

    def list_step_activations(
        self, workflow_id: str, step_key: str, *, limit: int | None = None, cursor: str | None = None
    ) -> Page:
        d = self.request(
            "GET",
            f"/v1/workflows/{_seg(workflow_id)}/steps/{_seg(step_key)}/activations",
            params=_page_params(limit, cursor),
        )["data"]
        return Page(d["items"], d.get("next_cursor"))

    def list_step_rounds(
        self, workflow_id: str, step_key: str, *, limit: int | None = None, cursor: str | None = None
    ) -> Page:
        d = self.request(
            "GET",
            f"/v1/workflows/{_seg(workflow_id)}/steps/{_seg(step_key)}/rounds",
            params=_page_params(limit, cursor),
        )["data"]
        return Page(d["items"], d.get("next_cursor"))
