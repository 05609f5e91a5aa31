"""A separate business process for the worker-process tests: it enqueues jobs through the real
hint publisher of *its* REDIS_URL (which may be stopped mid-run).

Reads one JSON command per line on stdin: {"n": 5, "type": "delay_wake", "payload": {...}} and
enqueues ``n`` jobs in one business transaction that also writes a row of ``test_business``;
answers one JSON line: {"ids": [...], "ms": <wall time of the transaction incl. after-commit>} or
{"error": "..."} if anything escaped into the transaction.
"""

from __future__ import annotations

import json
import sys
import time

from sqlalchemy import text


def main() -> None:
    from actors.hints import install_publisher
    from app.db import transaction
    from app.ledger.enqueue import enqueue

    install_publisher()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        t0 = time.monotonic()
        try:
            with transaction() as conn:
                conn.execute(text("INSERT INTO test_business (note) VALUES ('order placed')"))
                ids = [
                    enqueue(conn, cmd.get("type", "delay_wake"), cmd.get("payload") or {"mode": "noop"}).id
                    for _ in range(int(cmd.get("n", 1)))
                ]
            out = {"ids": ids, "ms": (time.monotonic() - t0) * 1000}
        except Exception as exc:  # reported to the test
            out = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
