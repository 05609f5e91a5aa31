"""``trigger_dispatch`` jobs (outbound pool): the one call of a TRIGGER step (``decide/triggers``).

1. Under the instance lock: is the activation still current and ACTIVE, the instance not stopping?
   Otherwise the job is skipped and nothing is sent.
2. Outside any transaction: the signed call (``outbound.send``; idempotency key
   ``<operation key>:trigger:<activation id>``, stable across retries; a marker before it).
3. A definite answer completes (2xx, the output is ``{"status", "body"}``) or fails
   (``TRIGGER_REJECTED``) the step through ``advance`` in one effect receipt. A 5xx / 429 / 408 / no
   answer is an unknown outcome: the step and the instance go to NEEDS_REVIEW, the job to the dead
   letter; nothing is re-sent automatically (L-EFFECT-4)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection

from app.engine import driver
from app.engine.decide import triggers as decide
from app.engine.decide.model import CompleteStep, Ignore
from app.engine.documents import DEFAULT_TRIGGER_TIMEOUT_SECONDS
from app.engine.handlers import outbound
from app.engine.handlers.common import (
    instance_lock_first,
    locked_instance,
    run_locked_once,
    step_of_activation,
)
from app.engine.row_access import MISSING, step_specs, version_document
from app.engine.snapshot import inst_model, step_model
from app.ledger import handlers
from app.ledger.context import JobContext
from app.ledger.http import HttpRejected
from app.ledger.outcome import ExternalOutcomeUnknown, RetryableError, Skip, payload_id


def _plan(ctx: JobContext, activation_id: str) -> dict[str, Any] | Ignore:
    iid = str(ctx.instance_id)
    ctx.lock_first = instance_lock_first(iid)
    with ctx.transaction() as conn:
        inst = locked_instance(conn, iid)
        step = step_of_activation(conn, activation_id, iid)
        gate = decide.may_send(inst_model(inst), step_model(step), activation_id)
        if gate is not None:
            return gate
        assert step is not None  # may_send answers a gate without a step
        spec = step_specs(version_document(conn, inst["definition_version_id"]))[step["key"]]
        act_input = step["act_input"] if step["act_input"] is not MISSING else {}
    return {"spec": spec, "body": (act_input or {}).get("body")}


@handlers.register("trigger_dispatch")
def trigger_dispatch(ctx: JobContext) -> Any:
    activation_id = payload_id(ctx.payload, "activation_id")
    if not ctx.instance_id:
        return Skip("job has no instance")
    plan = _plan(ctx, activation_id)
    if isinstance(plan, Ignore):
        return Skip(plan.reason)
    spec = plan["spec"]
    method = spec.get("method", "POST")
    try:
        res = outbound.send(
            ctx,
            method,
            spec["url"],
            None if method == "GET" else plan["body"],
            step_key=f"trigger:{activation_id}",
            headers=spec.get("headers"),
            timeout=spec.get("timeout_seconds", DEFAULT_TRIGGER_TIMEOUT_SECONDS),
        )
        status, raw = res.status_code, res.text
    except HttpRejected as exc:
        status, raw = exc.status_code, exc.text
    except ExternalOutcomeUnknown:
        outbound.review_unknown(ctx)
        raise
    if method == "GET" and (status >= 500 or status in (408, 429)):
        raise RetryableError(f"GET {spec['url']}: HTTP {status}")  # a safe call: the ledger retries it
    output = outbound.response_output(status, raw)

    def write(conn: Connection, inst: dict) -> dict:
        step = step_of_activation(conn, activation_id, inst["id"])
        verdict = decide.answered(inst_model(inst), step_model(step), activation_id, status, output)
        if isinstance(verdict, Ignore):
            return {"skipped": verdict.reason}
        assert step is not None  # answered answers Ignore without a step
        driver.follow(conn, inst["id"], step, verdict)
        return {"status": status, "step": "succeeded" if isinstance(verdict, CompleteStep) else "failed"}

    return run_locked_once(ctx, write, step="trigger")
