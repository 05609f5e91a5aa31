"""Compensation: when a later step fails, the completed steps are undone, newest first.

.venv/bin/python examples/compensation.py
"""

from __future__ import annotations

from ledgerflow.client import Client, NonRetryableError, Task, TaskWorker, run_script

UNDO = {"queue": "trip.undo"}  # a completed step with "compensation" gets an undo task on that queue
DEFINITION = {
    "version": "v1",
    "description": "Reserve a hotel, pay, book the flight; undo in reverse order when a step fails.",
    "input_schema": {"type": "object", "required": ["trip"], "properties": {"trip": {"type": "string"}}},
    "deadline_seconds": 600,
    "steps": [
        {"key": "hotel", "kind": "TASK", "queue": "trip.hotel", "compensation": UNDO},
        {"key": "payment", "kind": "TASK", "queue": "trip.pay", "after": ["hotel"], "compensation": UNDO},
        {"key": "flight", "kind": "TASK", "queue": "trip.flight", "after": ["payment"]},
    ],
}

client = Client()
worker = TaskWorker(client, wait_seconds=1)
undone: list[str] = []


@worker.task("trip.hotel")
def hotel(task: Task) -> dict:
    return {"reservation": "H-1"}


@worker.task("trip.pay")
def pay(task: Task) -> dict:
    return {"payment": "P-1"}


@worker.task("trip.flight")
def flight(task: Task) -> dict:
    raise NonRetryableError("no seats left")


@worker.task("trip.undo")
def undo(task: Task) -> dict:
    # input: {"compensate": <step key>, "output": <that step's output>, "order": n, ...}
    undone.append(task.input["compensate"])
    print(f"undo {task.input['compensate']}: {task.input['output']}")
    return {"undone": True}


def main() -> None:
    definition = client.ensure_definition("trip", DEFINITION)
    with worker.in_background():
        wid = client.start_workflow(definition["id"], "v1", {"trip": "Lisbon"}).instance.id
        done = client.wait_for_workflow(wid)
    print(f"{done.state} (stop_kind {done.stop_kind}); undone in this order: {', '.join(undone)}")


if __name__ == "__main__":
    run_script(main)
