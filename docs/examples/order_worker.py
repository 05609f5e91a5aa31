"""A task worker for the order example: run it next to `make run`.

LEDGERFLOW_TOKEN=lf_... .venv/bin/python docs/examples/order_worker.py    (LEDGERFLOW_URL: the server)
"""

from __future__ import annotations

import os
import signal

from ledgerflow.client import Client, Task, TaskWorker, run_script

client = Client()
worker = TaskWorker(client, wait_seconds=int(os.environ.get("LEDGERFLOW_WAIT_SECONDS", "10")))


@worker.task("approvals")
def approve(task: Task) -> dict:
    # a human approval is a task completed through the same API; here a rule decides
    return {"approved": True, "amount": task.input["amount"], "note": task.input.get("note")}


@worker.task("stock")
def reserve(task: Task) -> dict:
    return {"reservation": "R-" + task.input["order_id"]}


@worker.task("shipping")
def shipped(task: Task) -> dict:
    # a POLL task reports whether the poll is done; here the parcel ships on the second round
    if (task.poll_round or 1) < 2:
        return {"done": False}
    return {"done": True, "tracking": "T-" + task.input["order_id"]}


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    print("order worker ready", flush=True)
    run_script(worker.run)
