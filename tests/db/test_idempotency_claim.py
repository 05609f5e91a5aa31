"""The Idempotency-Key receipt claim (app/idempotency.py) inside the caller's transaction: it waits
for a duplicate in flight at most WAIT_SECONDS and leaves the transaction's lock timeout as it was."""

from __future__ import annotations

import uuid

from sqlalchemy import text

from app import idempotency
from app.db import transaction


def test_claim_restores_the_transactions_lock_timeout_and_replays(engine):
    key = uuid.uuid4().hex
    args = {"scope": "ns-test", "route": "POST /v1/test", "key": key, "fp": "f1"}
    with transaction(engine) as conn:
        conn.execute(text("SET LOCAL lock_timeout = '1234ms'"))
        assert idempotency.claim(conn, **args) is None  # this request owns the key
        assert conn.execute(text("SHOW lock_timeout")).scalar_one() == "1234ms"
        idempotency.complete(
            conn, scope="ns-test", route="POST /v1/test", key=key, status=201, body='{"a":1}'
        )
    with transaction(engine) as conn:
        stored = idempotency.claim(conn, **args)
        assert stored is not None and stored.replayed and stored.status == 201 and stored.body == '{"a":1}'
        assert conn.execute(text("SHOW lock_timeout")).scalar_one() == "0"  # the session default
