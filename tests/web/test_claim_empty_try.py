"""A long-poll claim's empty try writes nothing and commits its transaction instead of rolling it back: a
ROLLBACK makes psycopg deallocate every statement the connection had prepared (each would then be parsed
and planned again), and an idle worker's claim tries are the API's most frequent transaction."""

from __future__ import annotations

import json
import uuid
from typing import Any

from psycopg.pq import TransactionStatus
from sqlalchemy import Engine, event


def test_an_empty_long_poll_try_commits_and_answers_no_task(client, token, clean: Engine):
    auth = {"Authorization": "Bearer " + token("tasks:work", namespace="claimers")}
    ends: list[str] = []

    def on_commit(conn: Any) -> None:
        ends.append("commit")

    def on_rollback(conn: Any) -> None:
        # a ROLLBACK reaches the server only from inside a transaction (an autocommit read's close sends none)
        if conn.connection.driver_connection.info.transaction_status != TransactionStatus.IDLE:
            ends.append("rollback")

    event.listen(clean, "commit", on_commit)
    event.listen(clean, "rollback", on_rollback)
    try:
        resp = client.post(
            "/v1/tasks/claim",
            headers={**auth, "Idempotency-Key": uuid.uuid4().hex},
            data=json.dumps({"queues": ["nothing.here"], "wait_seconds": 1, "max_tasks": 2}),
            content_type="application/json",
        )
    finally:
        event.remove(clean, "commit", on_commit)
        event.remove(clean, "rollback", on_rollback)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    assert resp.get_json()["data"]["tasks"] == []
    assert ends.count("commit") >= 2, ends  # an empty try, then the final one at the deadline
    assert "rollback" not in ends, ends
