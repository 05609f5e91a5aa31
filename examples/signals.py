"""Signals: a workflow that waits for an approval from outside, sent with the SDK.

.venv/bin/python examples/signals.py
"""

from __future__ import annotations

import time

from ledgerflow.client import Client, Task, TaskWorker, run_script

DEFINITION = {
    "version": "v1",
    "description": "Prepare a payout, wait for a manager's approval signal, then pay.",
    "input_schema": {
        "type": "object",
        "required": ["payout_id", "amount"],
        "properties": {"payout_id": {"type": "string"}, "amount": {"type": "integer"}},
    },
    "deadline_seconds": 600,
    # the signals this definition accepts, each with a JSON Schema for its payload
    "signals": [
        {
            "name": "approved",
            "payload_version": "v1",
            "schema": {"type": "object", "required": ["by"], "properties": {"by": {"type": "string"}}},
        }
    ],
    "steps": [
        {"key": "prepare", "kind": "TASK", "queue": "payouts.prepare", "input": {"amount": "$.input.amount"}},
        {
            "key": "approval",
            "kind": "SIGNAL",
            "after": ["prepare"],
            "signal": "approved",
            "payload_version": "v1",
            "correlation": "$.input.payout_id",  # the signal must carry this correlation key
            "timeout_seconds": 300,
        },
        {
            "key": "pay",
            "kind": "TASK",
            "queue": "payouts.pay",
            "after": ["approval"],
            "input": {"amount": "$.input.amount", "approved_by": "$.steps.approval.output.by"},
        },
    ],
    "output": {"paid": "$.steps.pay.output.paid", "approved_by": "$.steps.approval.output.by"},
}

client = Client()
worker = TaskWorker(client, wait_seconds=1)


@worker.task("payouts.prepare")
def prepare(task: Task) -> dict:
    return {"prepared": task.input["amount"]}


@worker.task("payouts.pay")
def pay(task: Task) -> dict:
    return {"paid": task.input["amount"]}


def main() -> None:
    definition = client.ensure_definition("payouts", DEFINITION)
    with worker.in_background():
        wid = client.start_workflow(definition["id"], "v1", {"payout_id": "P-7", "amount": 120}).instance.id
        print(f"started workflow {wid}")
        while client.get_workflow_step(wid, "approval").step.state != "WAITING":
            time.sleep(0.2)
        print("step approval is WAITING for the signal 'approved'")
        sent = client.send_workflow_signal(
            wid,
            name="approved",
            payload_version="v1",
            target_step_key="approval",
            target_activation_sequence=1,
            correlation_key="P-7",
            payload={"by": "grace"},
            reason="approved in the payout review",
        )
        print(f"sent signal {sent.signal.id}: {sent.signal.state}")
        done = client.wait_for_workflow(wid, progress=print)
    print(f"signal is now {client.get_workflow_signal(wid, sent.signal.id).state}")
    print(f"{done.state}: {done.output}")


if __name__ == "__main__":
    run_script(main)
