"""``external_dispatch`` jobs (outbound pool): a TASK step with ``"dispatch": {"url": ...}`` sends each
attempt's task to an external approval system, which then claims and completes (or fails) it through
the task API like any task worker.

- Sent only while the task is open (PENDING / CLAIMED) and the instance is not finished or stopping;
  otherwise the job is skipped.
- One signed POST through ``SafeHttp`` (idempotency key ``<operation key>:dispatch:<task id>``, marker
  first): ``{"task": {id, epoch, queue, workflow_id, step_key, attempt, input, deadline_at},
  "callback": {...}}``. A 2xx settles the job with the receiver's answer.
- A failed dispatch follows the ledger's outcome rules (a refusal is a permanent failure, an unknown
  outcome the "needs confirmation" dead letter; never re-sent automatically), and the task stays
  claimable: a person (or any task worker on the queue) can still act on it; the step waits as usual
  for the task's result or its timeout.
"""

from __future__ import annotations

from typing import Any

from app.engine.documents import DEFAULT_TRIGGER_TIMEOUT_SECONDS
from app.engine.handlers import outbound
from app.engine.handlers.common import bind, instance_lock_first, locked_instance
from app.engine.row_access import MISSING, step_specs, version_document
from app.engine.states import TERMINAL
from app.engine.task_protocol import read_task, task_view
from app.ledger import handlers
from app.ledger.context import JobContext
from app.ledger.http import HttpRejected
from app.ledger.outcome import PermanentError, Skip


def callback(task: dict) -> dict[str, Any]:
    """How the external system answers: the existing task API (W-API: a ``tasks:work`` credential)."""
    tid = task["id"]
    return {
        "claim": {"method": "POST", "path": "/v1/tasks/claim", "body": {"queues": [task["queue"]]}},
        "complete": {
            "method": "POST",
            "path": f"/v1/tasks/{tid}/complete",
            "body": {"epoch": "<claim epoch>", "output": "<any JSON>"},
        },
        "fail": {
            "method": "POST",
            "path": f"/v1/tasks/{tid}/fail",
            "body": {"epoch": "<claim epoch>", "error": {"message": "<why>", "retryable": False}},
        },
        "read": {"method": "GET", "path": f"/v1/tasks/{tid}"},
        "note": "claim the task (each claim increments the epoch), then complete or fail it with the claim's "
        "epoch; a person may act on the same task meanwhile: the first result wins",
    }


def _plan(ctx: JobContext, task_id: str) -> dict[str, Any] | str:
    iid = str(ctx.instance_id)
    ctx.lock_first = instance_lock_first(iid)
    with ctx.transaction() as conn:
        inst = locked_instance(conn, iid)
        if inst["state"] in TERMINAL or inst["cancel_requested_at"] is not None:
            return f"workflow is {inst['state']}"
        task = read_task(conn, task_id, inst["namespace_id"])
        bind("task", task_id, task["instance_id"], iid)
        if task["state"] not in ("PENDING", "CLAIMED"):
            return f"the task is {task['state']}"
        spec = step_specs(version_document(conn, inst["definition_version_id"]))[task["step_key"]]
    view = task_view(task)
    view["input"] = task["input"] if task["input"] is not MISSING else None
    return {"dispatch": spec["dispatch"], "body": {"task": view, "callback": callback(task)}}


@handlers.register("external_dispatch")
def external_dispatch(ctx: JobContext) -> Any:
    task_id = str((ctx.payload or {}).get("task_id") or ctx.task_id)
    if not ctx.instance_id:
        return Skip("job has no instance")
    plan = _plan(ctx, task_id)
    if isinstance(plan, str):
        return Skip(plan)
    target = plan["dispatch"]
    try:
        res = outbound.send(
            ctx,
            "POST",
            target["url"],
            plan["body"],
            step_key=f"dispatch:{task_id}",
            headers=target.get("headers"),
            timeout=target.get("timeout_seconds", DEFAULT_TRIGGER_TIMEOUT_SECONDS),
        )
    except HttpRejected as exc:
        raise PermanentError(f"dispatch refused: HTTP {exc.status_code}; the task stays claimable") from exc
    return {"dispatched": task_id, "receiver": outbound.response_output(res.status_code, res.text)}
