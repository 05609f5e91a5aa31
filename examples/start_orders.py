"""Start two order workflows and wait for them; examples/task_worker.py must be running.

.venv/bin/python examples/start_orders.py
"""

from __future__ import annotations

from ledgerflow.client import Client, run_script

DEFINITION = {
    "version": "v1",
    "description": "Check an order, then charge it (the charge is retried at once, up to 3 attempts).",
    "input_schema": {
        "type": "object",
        "required": ["order_id", "amount"],
        "properties": {"order_id": {"type": "string"}, "amount": {"type": "integer"}},
    },
    "deadline_seconds": 600,
    "steps": [
        {"key": "check", "kind": "TASK", "queue": "orders.check", "input": {"amount": "$.input.amount"}},
        {
            "key": "charge",
            "kind": "TASK",
            "queue": "orders.charge",
            "after": ["check"],
            "input": {"amount": "$.steps.check.output.amount"},
            "retry": {"max_attempts": 3, "backoff_seconds": 0},
        },
    ],
    "output": {"charged": "$.steps.charge.output.charged", "attempts": "$.steps.charge.output.attempt"},
}


def main() -> None:
    client = Client()
    definition = client.ensure_definition("orders", DEFINITION)
    good = client.start_workflow(definition["id"], "v1", {"order_id": "A-1", "amount": 42})
    bad = client.start_workflow(definition["id"], "v1", {"order_id": "A-2", "amount": 0})
    for started in (good, bad):
        done = client.wait_for_workflow(started.instance.id, timeout=30)
        detail = (
            done.output if done.state == "SUCCEEDED" else client.get_workflow_step(done.id, "check").error
        )
        print(f"order {done.input['order_id']}: {done.state} {detail}")


if __name__ == "__main__":
    run_script(main)
