"""Publish the invoice workflow (once) and start one, then wait for it: the other half of worker.py.

LEDGERFLOW_URL=https://... LEDGERFLOW_TOKEN=lf_... python start.py
"""

from __future__ import annotations

from invoice import wf

from ledgerflow.client import Client, run_script


def main() -> None:
    client = Client()  # LEDGERFLOW_URL and LEDGERFLOW_TOKEN
    started = wf.start(client, {"email": "ada@example.com", "lines": [{"amount": 40}, {"amount": 2}]})
    done = client.wait_for_workflow(started.instance.id, timeout=120)
    print(f"{done.state}: {done.output}")


if __name__ == "__main__":
    run_script(main)
