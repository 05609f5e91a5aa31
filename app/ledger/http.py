"""Outbound HTTP in a job context (L-EFFECT-3, -4, -5).

- every request carries a stable ``X-Idempotency-Key`` (operation key + step key) and a W3C
  ``traceparent`` (app/observability/tracing.py);
- transport retries are off and redirects are not followed: recovery belongs to the ledger;
- before an unsafe request a side-effect marker is committed on the job; no response, a timeout,
  408, 429 or 5xx leave it open and the job goes ``dead`` with EXTERNAL_OUTCOME_UNKNOWN (never
  re-sent automatically); a drain that finds the marker open after an executor loss does the same;
- a clearly successful unsafe call stores a receipt, so a later retry of the settlement reuses it;
- the destination policy (``app.ledger.destinations``: resolve once, refuse private / loopback /
  metadata addresses, connect to the checked address), a body byte cap and a total deadline apply
  to every request; URLs appear only redacted.
"""

from __future__ import annotations

import json
import ssl
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import lru_cache
from typing import Any, Protocol

import httpx
from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from app.ledger import transitions
from app.ledger.destinations import (
    DESTINATION_FORBIDDEN,
    Destination,
    DestinationForbidden,
    Resolver,
    check,
)
from app.ledger.outcome import (
    RETRY_AFTER_CAP_SECONDS,
    ExternalOutcomeUnknown,
    JobAborted,
    PermanentError,
    RetryableError,
)
from app.observability import tracing
from app.observability.logs import redact_url

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
UNKNOWN_STATUSES = frozenset({408, 429})


@dataclass(frozen=True)
class HttpResult:
    status_code: int
    headers: dict[str, str]
    text: str
    reused: bool = False  # True when the result came from a stored receipt

    def json(self) -> Any:
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
    trace_id: str

    def check(self) -> None: ...

    def sleep(self, seconds: float) -> None: ...

    def transaction(self) -> AbstractContextManager[Connection]: ...

    def receipt(self, step_key: str) -> tuple[bool, Any]: ...

    def store_receipt(self, conn: Connection, step_key: str, result: Any) -> None: ...


class DestinationRefused(PermanentError):
    """The destination policy (``app.ledger.destinations``) refused the URL: dead, never retried."""

    code = DESTINATION_FORBIDDEN


MAX_BODY_BYTES = 65536  # kept of a response body; the rest is never read
# How long an executor whose effect marker's write failed keeps trying to clear it (``SafeHttp._open_marker``):
# a PostgreSQL failover's few seconds, well within a lease (60 s by default)
UNSENT_CLEAR_SECONDS = 30.0
MARKER_WRITE_FAILED = "MARKER_WRITE_FAILED"
_BEFORE_SENDING = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


def retry_after_seconds(value: str | None, cap: float = RETRY_AFTER_CAP_SECONDS) -> float | None:
    """A ``Retry-After`` header (delta seconds or an HTTP date) as seconds, capped; None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return min(float(value), cap)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, min((when - datetime.now(UTC)).total_seconds(), cap))


@lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context per process: building one (the CA bundle) costs ~25 ms, which every
    request paid when each made its own client."""
    return httpx.create_ssl_context()


class SafeHttp:
    """Outbound HTTP of a job. Every request goes through the destination policy, connects to the
    checked address (Host and TLS SNI keep the name), reads at most ``MAX_BODY_BYTES`` of the answer
    within the job's deadline, and names the URL only redacted (markers, errors, logs)."""

    def __init__(self, ctx: FencedContext, timeout: float = 10.0, resolver: Resolver | None = None) -> None:
        self.ctx = ctx
        self.timeout = timeout
        self.resolver = resolver

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
        receiver_dedups: bool = False,
    ) -> HttpResult:
        """``receiver_dedups``: the receiver deduplicates by the idempotency key (a signed webhook), so a
        definite 408, 429 (after its Retry-After) or 5xx answer, and a connection that failed before the
        request was sent, are retried with backoff; an unknown outcome (no answer after sending) still
        goes to the L-EFFECT-4 dead letter."""
        ctx = self.ctx
        method = method.upper()
        unsafe = method not in SAFE_METHODS
        shown = redact_url(url)
        try:
            dest = check(url, resolver=self.resolver)
        except DestinationForbidden as exc:
            raise DestinationRefused(f"{method} {shown}: {exc}") from None
        receipt_key = f"http:{step_key}"
        if unsafe:
            found, stored = ctx.receipt(receipt_key)
            if found:
                return HttpResult(
                    stored["status_code"], stored.get("headers", {}), stored.get("text", ""), True
                )
            marker = {"method": method, "url": shown, "step_key": step_key, "attempt_id": ctx.attempt_id}
            self._open_marker(marker, f"{method} {shown}")
        ctx.check()
        all_headers = {"X-Idempotency-Key": self.idempotency_key(step_key), **(headers or {})}
        all_headers["Host"] = dest.host_header
        if not tracing.ENABLED and "traceparent" not in {k.lower() for k in all_headers}:
            # tracing on: the httpx instrumentation sends the client span's traceparent instead
            parent = tracing.outbound_traceparent(ctx.trace_id, ctx.attempt_id)
            if parent:
                all_headers["traceparent"] = parent
        try:
            resp = self._send(method, dest, all_headers, json, content, timeout)
        except httpx.HTTPError as exc:
            before = isinstance(exc, _BEFORE_SENDING)
            what = f"{method} {shown}: no response ({type(exc).__name__})"
            if unsafe and not (before and receiver_dedups):
                raise ExternalOutcomeUnknown(what) from None
            if unsafe:
                self._close_marker(None, receipt_key)
            raise RetryableError(what, code="NETWORK_ERROR") from None
        if not unsafe:
            return resp
        code = resp.status_code
        if code in UNKNOWN_STATUSES or code >= 500:
            if not receiver_dedups:
                raise ExternalOutcomeUnknown(f"{method} {shown}: HTTP {code}, outcome needs confirmation")
            self._close_marker(None, receipt_key)
            wait = retry_after_seconds(resp.headers.get("retry-after")) if code == 429 else None
            raise RetryableError(f"{method} {shown}: HTTP {code}", retry_after=wait, code=f"HTTP_{code}")
        # A definite answer: close the marker; store a receipt for a success.
        self._close_marker(resp if 200 <= code < 300 else None, receipt_key, shown=f"{method} {shown}")
        if 200 <= code < 300:
            return resp
        if 300 <= code < 400:
            raise HttpRejected(f"{method} {shown}: redirect {code} not followed", code, "")
        raise HttpRejected(f"{method} {shown}: HTTP {code} rejected", code, resp.text[:4096])

    def _open_marker(self, marker: dict[str, Any], shown: str) -> None:
        """Commit the side-effect marker before the request. A COMMIT whose answer was lost (the connection
        broke while it was in flight: a failover) may still have taken effect, so a failed marker write
        leaves the job with the marker perhaps recorded and the request certainly not sent: without more,
        L-EFFECT-4 would hold a call that never left for an operator's confirmation. While this executor
        still owns the job it clears the marker (retrying for ``UNSENT_CLEAR_SECONDS`` at most, within
        the job's deadline) and the attempt is retried; if it cannot, the job goes dead as any open marker
        does, its error saying the request was not sent (the operator may retry it)."""
        ctx = self.ctx
        try:
            with ctx.transaction() as conn:
                transitions.set_effect_marker(conn, ctx.job_id, ctx.generation, ctx.lease_token, marker)
        except DBAPIError as exc:
            cleared = self._clear_unsent_marker()
            raise RetryableError(
                f"{shown}: the request was not sent: the effect marker's write failed ({type(exc).__name__})"
                + ("" if cleared else "; the marker could not be cleared and may be recorded"),
                code=MARKER_WRITE_FAILED,
            ) from None

    def _clear_unsent_marker(self) -> bool:
        """Clear this attempt's marker (fenced); False once ownership, the deadline or the budget is gone."""
        ctx = self.ctx
        until = min(time.monotonic() + UNSENT_CLEAR_SECONDS, ctx.deadline_monotonic)
        delay = 0.1
        while True:
            try:
                with ctx.transaction() as conn:
                    return transitions.set_effect_marker(
                        conn, ctx.job_id, ctx.generation, ctx.lease_token, None
                    )
            except JobAborted:
                return False
            except DBAPIError:
                if time.monotonic() + delay >= until:
                    return False
            try:
                ctx.sleep(delay)
            except JobAborted:
                return False
            delay = min(delay * 2, 2.0)

    def _close_marker(self, success: HttpResult | None, receipt_key: str, shown: str = "") -> None:
        ctx = self.ctx
        try:
            with ctx.transaction() as conn:
                if success is not None:
                    ctx.store_receipt(
                        conn,
                        receipt_key,
                        {"status_code": success.status_code, "headers": {}, "text": success.text},
                    )
                transitions.set_effect_marker(conn, ctx.job_id, ctx.generation, ctx.lease_token, None)
        except JobAborted:
            # lost ownership right after the call: the marker stays open and the drain marks it
            raise ExternalOutcomeUnknown(f"{shown}: executor lost after the call") from None

    def _send(
        self,
        method: str,
        dest: Destination,
        headers: dict[str, str],
        json: Any,
        content: Any,
        timeout: float | None,
    ) -> HttpResult:
        """One request to the checked address; at most ``MAX_BODY_BYTES`` of the body are read, and
        the whole exchange ends by the job's deadline (a slow or endless answer cannot hold the slot)."""
        ctx = self.ctx
        started = time.monotonic()
        total = max(0.1, min(timeout or self.timeout, ctx.deadline_monotonic - started))
        ext = {"sni_hostname": dest.host} if dest.scheme == "https" else {}
        tls = _tls_context()
        transport = httpx.HTTPTransport(retries=0, verify=tls)
        with httpx.Client(
            transport=transport, follow_redirects=False, timeout=total, trust_env=False, verify=tls
        ) as client:
            req = client.build_request(
                method, dest.connect_url(), json=json, content=content, headers=headers, extensions=ext
            )
            resp = client.send(req, stream=True)
            try:
                kept = bytearray()
                for chunk in resp.iter_raw():
                    if len(kept) < MAX_BODY_BYTES:
                        kept += chunk[: MAX_BODY_BYTES - len(kept)]
                    if len(kept) >= MAX_BODY_BYTES or time.monotonic() - started > total:
                        break  # the rest is discarded (the connection is closed, not drained)
            finally:
                resp.close()
        body = bytes(kept).decode(resp.encoding or "utf-8", errors="replace")
        return HttpResult(resp.status_code, dict(resp.headers), body)
