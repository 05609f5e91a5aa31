"""Publish the invoice workflow (once) and start one, then wait for it: the other half of worker.py.

LEDGERFLOW_URL=https://... LEDGERFLOW_TOKEN=lf_... python start.py
"""

from __future__ import annotations

import sys

from ledgerflow.client import Client, run_script

DEFINITION = {
    "version": "v1",
    "input_schema": {"type": "object", "required": ["email", "lines"]},
    "deadline_seconds": 600,
    "steps": [
        {"key": "render", "kind": "TASK", "queue": "invoices.render", "input": {"lines": "$.input.lines"}},
        {
            "key": "send",
            "kind": "TASK",
            "queue": "invoices.send",
            "after": ["render"],
            "input": {"email": "$.input.email", "total": "$.steps.render.output.total"},
        },
    ],
    "output": {"invoice": "$.steps.render.output", "delivery": "$.steps.send.output"},
}


def main() -> None:
    client = Client()  # LEDGERFLOW_URL and LEDGERFLOW_TOKEN
    definition = client.ensure_definition(sys.argv[1] if len(sys.argv) > 1 else "invoice", DEFINITION)
    started = client.start_workflow(
        definition["id"], "v1", {"email": "ada@example.com", "lines": [{"amount": 40}, {"amount": 2}]}
    )
    done = client.wait_for_workflow(started.instance.id, timeout=120)
    print(f"{done.state}: {done.output}")


if __name__ == "__main__":
    run_script(main)
