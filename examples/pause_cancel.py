"""Pause, resume and cancel a workflow.

.venv/bin/python examples/pause_cancel.py
"""

from __future__ import annotations

import time

from ledgerflow.client import Client, Task, TaskWorker, run_script

DEFINITION = {
    "version": "v1",
    "description": "One report task.",
    "input_schema": {"type": "object"},
    "deadline_seconds": 600,
    "steps": [{"key": "report", "kind": "TASK", "queue": "reports.build"}],
    "output": {"pages": "$.steps.report.output.pages"},
}

client = Client()
worker = TaskWorker(client, wait_seconds=1)


@worker.task("reports.build")
def build(task: Task) -> dict:
    return {"pages": 3}


def main() -> None:
    definition = client.ensure_definition("reports", DEFINITION)

    # 1. start a workflow and pause it at once: while paused, no task of it is handed to a worker
    first = client.start_workflow(definition["id"], "v1", {}).instance
    paused = client.control_workflow(first.id, "PAUSE", first.control_revision, "waiting for month end")
    print(f"workflow {first.id}: {paused.instance.state}, paused={paused.instance.paused}")
    with worker.in_background():
        time.sleep(2)
        task = client.get_workflow_step(first.id, "report")
        print(f"after 2 s with a worker running, step report is still {task.step.state} (not claimed)")
        # 2. resume with the control revision just read; a stale one is refused (409)
        resumed = client.control_workflow(
            first.id, "RESUME", paused.instance.control_revision, "month end reached"
        )
        print(f"resumed: paused={resumed.instance.paused}")
        done = client.wait_for_workflow(first.id)
        print(f"{done.state}: {done.output}")

    # 3. cancel a workflow that has not run yet: its open task is withdrawn, it ends CANCELLED
    second = client.start_workflow(definition["id"], "v1", {}).instance
    client.control_workflow(second.id, "CANCEL", second.control_revision, "ordered by mistake")
    cancelled = client.wait_for_workflow(second.id)
    print(f"workflow {second.id}: {cancelled.state} (stop_kind {cancelled.stop_kind})")


if __name__ == "__main__":
    run_script(main)
