"""A task worker in your own project, with only the light SDK installed (docs/sdk.md):

    pip install /path/to/ledgerflow/sdk
    LEDGERFLOW_URL=https://... LEDGERFLOW_TOKEN=lf_... python worker.py     # until Ctrl-C or SIGTERM

It serves the steps of the invoice workflow (invoice.py): a plain function and an ``async def`` one,
up to 8 tasks at once.
"""

from __future__ import annotations

import os
import signal

from invoice import wf

from ledgerflow.client import Client, TaskWorker, run_script

worker = wf.register(
    TaskWorker(Client(), concurrency=int(os.environ.get("WORKER_CONCURRENCY", "8")), wait_seconds=5)
)


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())  # finish or hand back running tasks, then exit
    worker.run()


if __name__ == "__main__":
    run_script(main)
