"""Recovery: a compensation that fails stops the chain and the workflow waits in NEEDS_REVIEW until
an operator resolves it (here: "I undid it by hand, carry on").

    .venv/bin/python examples/recovery.py
"""

from __future__ import annotations

from ledgerflow.client import Client, NonRetryableError, Task, TaskWorker, run_script

UNDO = {"queue": "shop.undo"}
DEFINITION = {
    "version": "v1",
    "description": "Reserve stock, charge the card, ship; undo in reverse order when a step fails.",
    "input_schema": {"type": "object"},
    "deadline_seconds": 600,
    "steps": [
        {"key": "stock", "kind": "TASK", "queue": "shop.stock", "compensation": UNDO},
        {"key": "card", "kind": "TASK", "queue": "shop.card", "after": ["stock"], "compensation": UNDO},
        {"key": "ship", "kind": "TASK", "queue": "shop.ship", "after": ["card"]},
    ],
}

client = Client()
worker = TaskWorker(client, wait_seconds=1)


@worker.task("shop.stock")
def stock(task: Task) -> dict:
    return {"reserved": 1}


@worker.task("shop.card")
def card(task: Task) -> dict:
    return {"charge": "C-9"}


@worker.task("shop.ship")
def ship(task: Task) -> dict:
    raise NonRetryableError("address unknown")


@worker.task("shop.undo")
def undo(task: Task) -> dict:
    if task.input["compensate"] == "card":
        raise NonRetryableError("the card processor refused the refund")
    print(f"undo {task.input['compensate']}")
    return {"undone": True}


def main() -> None:
    definition = client.ensure_definition("shop", DEFINITION)
    with worker.in_background():
        wid = client.start_workflow(definition["id"], "v1", {}).instance.id
        review = client.wait_for_workflow(wid, states={"NEEDS_REVIEW", "FAILED"})
        print(f"workflow {wid}: {review.state} (the refund of step card failed)")
        # an operator refunds by hand, then tells the engine to carry on with the next compensation
        resolved = client.resolve_workflow_instance(
            wid, "CONTINUE", "refunded by hand in the card portal", evidence_ref="ticket:4711"
        )
        print(f"resolved: {resolved.resolution['review']} -> {resolved.instance.state}")
        done = client.wait_for_workflow(wid)
    print(f"{done.state} (stop_kind {done.stop_kind})")


if __name__ == "__main__":
    run_script(main)
