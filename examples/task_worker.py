"""A long-running task worker process: what you deploy next to your application.

    .venv/bin/python examples/task_worker.py      # until Ctrl-C or SIGTERM

It serves the queues of examples/start_orders.py: `orders.check` and `orders.charge`. Each task
logs one line (claimed -> completed / failed, with its duration). SIGTERM stops it cleanly: no new
claims, running tasks finish (or are handed back after 20 s), then it exits.
"""

from __future__ import annotations

import signal

from ledgerflow.client import Client, NonRetryableError, Task, TaskWorker, run_script

# up to 4 tasks at once (plain functions run in 4 threads: these two keep no shared state)
worker = TaskWorker(Client(), wait_seconds=5, concurrency=4)


@worker.task("orders.check")  # decorator style
def check(task: Task) -> dict:
    if task.input["amount"] <= 0:
        # a permanent problem: fail the task without a retry (the step and the workflow fail)
        raise NonRetryableError(f"amount must be positive, got {task.input['amount']}")
    return {"ok": True, "amount": task.input["amount"]}


def charge(task: Task) -> dict:
    if task.attempt == 1:
        # a passing problem: any other exception fails the task as retryable, and the step's
        # retry policy (max_attempts, backoff_seconds) starts another attempt
        raise ConnectionError("the payment service is busy")
    return {"charged": task.input["amount"], "attempt": task.attempt}


worker.register("orders.charge", charge)  # plain registration works too


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    worker.run()


if __name__ == "__main__":
    run_script(main)
