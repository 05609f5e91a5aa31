"""A task worker in your own project, with only the light SDK installed (docs/sdk.md):

    pip install /path/to/ledgerflow/sdk
    LEDGERFLOW_URL=https://... LEDGERFLOW_TOKEN=lf_... python worker.py     # until Ctrl-C or SIGTERM

It serves the two queues of start.py: a plain function and an ``async def`` one, up to 8 tasks at once.
"""

from __future__ import annotations

import asyncio
import os
import signal

from ledgerflow.client import Client, Task, TaskWorker, run_script

worker = TaskWorker(Client(), concurrency=int(os.environ.get("WORKER_CONCURRENCY", "8")), wait_seconds=5)


@worker.task("invoices.render")
def render(task: Task) -> dict:
    # plain functions run in the worker's threads (up to `concurrency` at once): keep them thread-safe
    lines = task.input["lines"]
    return {"total": sum(line["amount"] for line in lines), "count": len(lines)}


@worker.task("invoices.send")
async def send(task: Task) -> dict:
    # async functions run on one event loop: await your HTTP client, database driver, ...
    await asyncio.sleep(0)
    return {"sent_to": task.input["email"], "total": task.input["total"]}


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())  # finish or hand back running tasks, then exit
    worker.run()


if __name__ == "__main__":
    run_script(main)
