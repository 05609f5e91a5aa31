"""The order workflow written in Python: a branch on the amount (a manual approval SIGNAL above the
limit, an automatic approval task below it), the branches joined again by a fan-out that reserves each
order line, a hold with a compensation, a timer, and a charge that may fail for good (the hold is then
released).

    .venv/bin/python examples/order_flow.py

The same workflow as a JSON document: examples/order_flow.json (a test checks they are equal).
"""

from __future__ import annotations

import time

from ledgerflow.client import Client, NonRetryableError, Task, TaskWorker, run_script
from ledgerflow.workflow import Workflow

LIMIT = 1000  # above it, a person approves the order

wf = Workflow(
    "order_flow",
    version="v1",
    description="Approve an order (by hand above the limit), reserve its lines, cool off, charge it.",
    input_schema={
        "type": "object",
        "required": ["order_id", "amount", "lines"],
        "properties": {
            "order_id": {"type": "string"},
            "amount": {"type": "integer"},
            "lines": {"type": "array", "items": {"type": "object"}},
        },
    },
    deadline_seconds=600,
)


@wf.task("orders.check", input={"order_id": wf.input["order_id"], "amount": wf.input["amount"]})
def check(task: Task) -> dict:
    return {"order_id": task.input["order_id"], "amount": task.input["amount"]}


big = wf.input["amount"] > LIMIT
# above the limit: wait for a person's approval signal; at or below it: approve by rule
manual = wf.signal(
    "manual_approval",
    name="approved",
    payload_version="v1",
    schema={"type": "object", "required": ["by"], "properties": {"by": {"type": "string"}}},
    correlation=wf.input["order_id"],
    after=[check],
    when=big,
    timeout_seconds=300,
)


@wf.task("orders.auto_approve", after=[check], when=~big, input={"amount": check.output["amount"]})
def auto_approve(task: Task) -> dict:
    return {"by": "rule", "amount": task.input["amount"]}


# the join: runs once, after whichever approval ran (the other one is SKIPPED); a fan-out over the
# order's lines: one task per line, at most 4 at once, its output the lines' outputs in line order
@wf.task(
    "orders.reserve",
    after=[manual, auto_approve],
    for_each=wf.input["lines"],
    max_parallel=4,
    input={"sku": wf.item["sku"], "line": wf.index},
)
def reserve(task: Task) -> dict:
    return {"reservation": f"R-{task.input['sku']}"}


@wf.task(
    "orders.hold",
    after=[reserve],
    input={"reserved": reserve.output, "manual": manual.output["by"], "auto": auto_approve.output["by"]},
    compensation="orders.release",
)
def hold(task: Task) -> dict:
    approved_by = task.input.get("manual") or task.input.get("auto")
    return {"reservations": [r["reservation"] for r in task.input["reserved"]], "approved_by": approved_by}


@hold.compensate
def release(task: Task) -> dict:
    # the compensation's input names the step it undoes and that step's output
    return {"released": task.input["output"]["reservations"]}


cool_off = wf.timer("cool_off", seconds=1, after=[hold])


@wf.task(
    "orders.charge", after=[cool_off], input={"order_id": wf.input["order_id"], "amount": wf.input["amount"]}
)
def charge(task: Task) -> dict:
    if task.input["order_id"].startswith("DECLINED"):
        raise NonRetryableError("the card was declined")
    return {"charged": task.input["amount"]}


wf.output(
    {
        "approved_by": hold.output["approved_by"],
        "reservations": hold.output["reservations"],
        "charged": charge.output["charged"],
    }
)

ORDERS = [
    {"order_id": "A-1", "amount": 120, "lines": [{"sku": "pen"}, {"sku": "ink"}]},
    {"order_id": "B-2", "amount": 5000, "lines": [{"sku": "desk"}]},
    {"order_id": "DECLINED-3", "amount": 80, "lines": [{"sku": "lamp"}]},
]


def main() -> None:
    client = Client()  # LEDGERFLOW_URL and LEDGERFLOW_TOKEN
    with wf.register(TaskWorker(client, wait_seconds=1)).in_background():
        started = {o["order_id"]: wf.start(client, o).instance.id for o in ORDERS}
        wid = started["B-2"]  # above the limit: it waits for a person
        while client.get_workflow_step(wid, "manual_approval").step.state != "WAITING":
            time.sleep(0.2)
        client.send_workflow_signal(
            wid,
            name="approved",
            payload_version="v1",
            target_step_key="manual_approval",
            target_activation_sequence=1,
            correlation_key="B-2",
            payload={"by": "grace"},
            reason="a large order, checked by hand",
        )
        for order_id, wid in started.items():
            done = client.wait_for_workflow(wid, timeout=60)
            steps = client.get_workflow_steps(wid).steps
            skipped = [s.key for s in steps if s.state == "SKIPPED"]
            print(
                f"order {order_id}: {done.state} {done.output if done.state == 'SUCCEEDED' else ''}".rstrip()
            )
            print(f"  skipped: {', '.join(skipped) or '-'}")


if __name__ == "__main__":
    run_script(main)
