"""Outbound HTTP in a job context (L-EFFECT-3, -4, -5).

- every request carries a stable ``X-Idempotency-Key`` (operation key + step key) and a W3C
  ``traceparent`` (app/observability/tracing.py);
- transport retries are off and redirects are not followed: recovery belongs to the ledger;
- before an unsafe request a side-effect marker is committed on the job; no response, a timeout,
  408, 429 or 5xx leave it open and the job goes ``dead`` with EXTERNAL_OUTCOME_UNKNOWN (never
  re-sent automatically); a drain that finds the marker open after an executor loss does the same;
- a clearly successful unsafe call stores a receipt, so a later retry of the settlement reuses it.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from sqlalchemy import Connection

from app.ledger import transitions
from app.ledger.outcome import ExternalOutcomeUnknown, JobAborted, PermanentError
from app.observability import tracing

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
UNKNOWN_STATUSES = frozenset({408, 429})


@dataclass(frozen=True)
class HttpResult:
    status_code: int
    headers: dict[str, str]
    text: str
    reused: bool = False  # True when the result came from a stored receipt

    def json(self) -> Any:
        import json

        return json.loads(self.text)


class HttpRejected(PermanentError):
    """A definite refusal of an unsafe call (3xx: redirects are not followed, or 4xx other than 408
    and 429): nothing took effect; the caller may read the answer."""

    def __init__(self, message: str, status_code: int, text: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.text = text


class FencedContext(Protocol):
    """What SafeHttp needs of a running job (``app.ledger.context.JobContext`` provides it): the
    fencing triple, the effect receipts and the abort check. Declared here so that ``context`` may
    import ``http`` and not the other way round."""

    job_id: int
    generation: int
    lease_token: str
    attempt_id: int
    operation_key: str
    deadline_monotonic: float

    def check(self) -> None: ...

    def transaction(self) -> AbstractContextManager[Connection]: ...

    def receipt(self, step_key: str) -> tuple[bool, Any]: ...

    def store_receipt(self, conn: Connection, step_key: str, result: Any) -> None: ...


class SafeHttp:
    def __init__(self, ctx: FencedContext, timeout: float = 10.0) -> None:
        self.ctx = ctx
        self.timeout = timeout

    def idempotency_key(self, step_key: str) -> str:
        return f"{self.ctx.operation_key}:{step_key}"

    def request(
        self,
        method: str,
        url: str,
        *,
        step_key: str,
        json: Any = None,
        content: bytes | str | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> HttpResult:
        ctx = self.ctx
        method = method.upper()
        unsafe = method not in SAFE_METHODS
        receipt_key = f"http:{step_key}"
        if unsafe:
            found, stored = ctx.receipt(receipt_key)
            if found:
                return HttpResult(
                    stored["status_code"], stored.get("headers", {}), stored.get("text", ""), True
                )
            marker = {"method": method, "url": url, "step_key": step_key, "attempt_id": ctx.attempt_id}
            with ctx.transaction() as conn:
                transitions.set_effect_marker(conn, ctx.job_id, ctx.generation, ctx.lease_token, marker)
        ctx.check()
        all_headers = {"X-Idempotency-Key": self.idempotency_key(step_key), **(headers or {})}
        if not tracing.ENABLED and "traceparent" not in {k.lower() for k in all_headers}:
            # tracing on: the httpx instrumentation sends the client span's traceparent instead
            parent = tracing.outbound_traceparent(ctx.trace_id, ctx.attempt_id)
            if parent:
                all_headers["traceparent"] = parent
        remaining = max(0.1, ctx.deadline_monotonic - time.monotonic())
        transport = httpx.HTTPTransport(retries=0)
        try:
            with httpx.Client(
                transport=transport, follow_redirects=False, timeout=min(timeout or self.timeout, remaining)
            ) as client:
                resp = client.request(method, url, json=json, content=content, headers=all_headers)
        except httpx.HTTPError as exc:
            if unsafe:
                raise ExternalOutcomeUnknown(f"{method} {url}: no response ({type(exc).__name__})") from exc
            raise
        result = HttpResult(resp.status_code, dict(resp.headers), resp.text)
        if not unsafe:
            return result
        if resp.status_code in UNKNOWN_STATUSES or resp.status_code >= 500:
            raise ExternalOutcomeUnknown(
                f"{method} {url}: HTTP {resp.status_code}, outcome needs confirmation"
            )
        # A definite answer: close the marker; store a receipt for a success.
        try:
            with ctx.transaction() as conn:
                if 200 <= resp.status_code < 300:
                    ctx.store_receipt(
                        conn,
                        receipt_key,
                        {"status_code": resp.status_code, "headers": {}, "text": resp.text[:65536]},
                    )
                transitions.set_effect_marker(conn, ctx.job_id, ctx.generation, ctx.lease_token, None)
        except JobAborted:
            # lost ownership right after the call: the marker stays open and the drain marks it
            raise ExternalOutcomeUnknown(f"{method} {url}: executor lost after the call") from None
        if 200 <= resp.status_code < 300:
            return result
        if 300 <= resp.status_code < 400:
            raise HttpRejected(
                f"{method} {url}: redirect {resp.status_code} not followed", resp.status_code, ""
            )
        raise HttpRejected(
            f"{method} {url}: HTTP {resp.status_code} rejected", resp.status_code, resp.text[:4096]
        )
