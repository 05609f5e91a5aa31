"""Publish the example definitions, start one order workflow and follow it to the end.

LEDGERFLOW_TOKEN=lf_... .venv/bin/python docs/examples/publish_and_start.py
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

from ledgerflow.client import Client, run_script

HERE = Path(__file__).resolve().parent


def publish(client: Client, suffix: str | None = None) -> tuple[str, str]:
    """Create + publish the child and the order definitions; returns (order id, child id)."""
    suffix = suffix or uuid.uuid4().hex[:6]
    child = client.create_definition(f"reserve-stock-{suffix}")
    client.publish_version(child["id"], json.loads((HERE / "child_definition.json").read_text()))
    raw = (HERE / "order_definition.json").read_text().replace("CHILD_DEFINITION_ID", child["id"])
    order = client.create_definition(f"order-{suffix}")
    client.publish_version(order["id"], json.loads(raw))
    return order["id"], child["id"]


def main() -> None:
    client = Client()  # LEDGERFLOW_URL and LEDGERFLOW_TOKEN
    order_def, _ = publish(client)
    started = client.start_workflow(
        order_def,
        "v1",
        {"order_id": "A-1", "amount": 9007199254740993, "note": None},
        business_key="order A-1",
    )
    wid = started.instance.id
    print(f"started workflow {wid} (state {started.instance.state}, revision {started.instance.revision})")
    seen = None
    while True:
        steps = client.get_workflow_steps(wid)
        line = ", ".join(f"{s.key}={s.state}" for s in steps.steps)
        if line != seen:
            print(f"revision {steps.revision}: {line}")
            seen = line
        inst = client.get_workflow(wid)
        if inst.state in ("SUCCEEDED", "FAILED", "CANCELLED"):
            print(f"{inst.state}: output = {inst.output}")
            return
        time.sleep(0.5)


if __name__ == "__main__":
    run_script(main)
