"""What the engine's outbound jobs (``trigger_dispatch``, ``external_dispatch``) share: one signed call
through the ledger's safe HTTP client (``app.ledger.http.SafeHttp``: stable ``X-Idempotency-Key``, no
transport retries, no redirects, a side-effect marker before an unsafe call, a receipt after a clear
success), and, for a TRIGGER, the L-EFFECT-4 rule that an unknown outcome sends the step and the
instance to NEEDS_REVIEW while the job goes to the dead letter ("external outcome needs confirmation").

Destination policy: every URL goes out through ``SafeHttp`` only, so the destination policy of ``app.ledger.destinations`` (resolve
once, refuse private / loopback / metadata addresses, connect to the checked address) applies here
as soon as it lands there."""

from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

from sqlalchemy import Connection

from app import jsonx
from app.engine import stopping
from app.engine.handlers.common import instance_lock_first, locked_instance
from app.engine.row_access import lock_instance
from app.engine.states import TERMINAL
from app.ledger.context import JobContext
from app.ledger.http import HttpResult, SafeHttp
from app.ledger.outcome import EXTERNAL_OUTCOME_UNKNOWN
from app.settings import get_settings
from app.sql import query, run

MAX_RESPONSE_BYTES = 64 * 1024  # a response body larger than this is not kept in the step output
MAX_TEXT_CHARS = 4096


def signature_headers(body: str, secret: str | None, now: float | None = None) -> dict[str, str]:
    """``X-Ledgerflow-Timestamp`` and ``X-Ledgerflow-Signature: v1=<hex HMAC-SHA256(secret, ts + "." + body)>``
    (no headers without a configured ``LEDGERFLOW_SIGNING_SECRET``)."""
    if not secret:
        return {}
    ts = str(int(now if now is not None else time.time()))
    mac = hmac.new(secret.encode(), f"{ts}.{body}".encode(), hashlib.sha256).hexdigest()
    return {"X-Ledgerflow-Timestamp": ts, "X-Ledgerflow-Signature": f"v1={mac}"}


def send(
    ctx: JobContext,
    method: str,
    url: str,
    body: Any,
    *,
    step_key: str,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> HttpResult:
    """One signed JSON call (``body`` None: no body). Raises as ``SafeHttp`` does."""
    content = None if body is None else jsonx.dumps(body)
    all_headers = {**(headers or {}), **signature_headers(content or "", get_settings().signing_secret)}
    if content is not None:
        all_headers["Content-Type"] = "application/json"
    return SafeHttp(ctx, timeout=timeout).request(
        method, url, step_key=step_key, content=content, headers=all_headers
    )


def response_output(status: int, raw: str) -> dict[str, Any]:
    """The answer as a step output: ``{"status", "body"}`` for JSON within the byte cap, ``text`` for
    anything else (first 4096 characters), ``body_too_large`` beyond the cap."""
    out: dict[str, Any] = {"status": status}
    if len(raw.encode("utf-8", "surrogatepass")) > MAX_RESPONSE_BYTES:
        out["body_too_large"] = True
        return out
    if not raw.strip():
        out["body"] = None
        return out
    try:
        out["body"] = jsonx.loads(raw)
    except ValueError:
        out["text"] = raw[:MAX_TEXT_CHARS]
    return out


def review_unknown(ctx: JobContext) -> None:
    """L-EFFECT-4: the job's call has an unknown outcome -> its step and the instance go to
    NEEDS_REVIEW now (the job then settles dead; ``review_dead_unknown`` catches the drain's path)."""
    iid = ctx.instance_id
    if not iid:
        return
    ctx.lock_first = instance_lock_first(iid)
    with ctx.transaction() as conn:
        inst = locked_instance(conn, iid)
        if inst["state"] not in TERMINAL and inst["state"] != "NEEDS_REVIEW":
            stopping.to_review(conn, iid, [ctx.job_id])


_OUTBOUND_DEAD_UNKNOWN_JOBS = query(
    "outbound_dead_unknown_jobs",
    "SELECT j.instance_id, array_agg(j.id ORDER BY j.id) AS ids FROM workflow_jobs j "
    "JOIN workflow_steps s ON s.instance_id = j.instance_id AND s.key = j.step_key "
    "JOIN workflow_instances i ON i.id = j.instance_id "
    "WHERE j.type = 'trigger_dispatch' AND j.status = 'dead' AND j.error_code = :u "
    "AND s.state IN ('ACTIVE', 'WAITING') AND i.state IN ('RUNNING', 'WAITING', 'CANCELLING') "
    "GROUP BY j.instance_id ORDER BY j.instance_id LIMIT :n",
)


def review_dead_unknown(conn: Connection, limit: int) -> int:
    """Drain sweep: a ``trigger_dispatch`` job the drain sent to the dead letter with an unknown outcome
    (its executor was lost mid-call) while its step is still ACTIVE -> the step and the instance to
    NEEDS_REVIEW. (An ``external_dispatch`` job stays a dead letter only: its task stays claimable.)
    Bounded by ``limit`` instances per pass."""
    rows = run(
        conn,
        _OUTBOUND_DEAD_UNKNOWN_JOBS,
        {"u": EXTERNAL_OUTCOME_UNKNOWN, "n": limit},
    ).all()
    for r in rows:
        inst = lock_instance(conn, r.instance_id)
        if inst["state"] not in TERMINAL and inst["state"] != "NEEDS_REVIEW":
            stopping.to_review(conn, r.instance_id, list(r.ids))
    return len(rows)
