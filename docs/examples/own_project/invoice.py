"""The invoice workflow, declared in Python next to the functions that run its steps (docs/sdk.md).
worker.py serves its functions, start.py publishes it and starts one; the same document as JSON is
invoice.json (a test checks they are equal)."""

from __future__ import annotations

import asyncio

from ledgerflow.client import Task
from ledgerflow.workflow import Workflow

wf = Workflow(
    "invoice",
    version="v2",  # v1 was the same workflow without the condition
    input_schema={"type": "object", "required": ["email", "lines"]},
    deadline_seconds=600,
)


@wf.task("invoices.render", input={"lines": wf.input["lines"]})
def render(task: Task) -> dict:
    # plain functions run in the worker's threads (up to `concurrency` at once): keep them thread-safe
    lines = task.input["lines"]
    return {"total": sum(line["amount"] for line in lines), "count": len(lines)}


@wf.task(
    "invoices.send",
    after=[render],
    when=render.output["total"] > 0,  # nothing to send for an empty invoice: the step is SKIPPED
    input={"email": wf.input["email"], "total": render.output["total"]},
)
async def send(task: Task) -> dict:
    # async functions run on one event loop: await your HTTP client, database driver, ...
    await asyncio.sleep(0)
    return {"sent_to": task.input["email"], "total": task.input["total"]}


wf.output({"invoice": render.output, "delivery": send.output})
