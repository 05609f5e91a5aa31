"""The Idempotency-Key receipt claim (app/idempotency.py) inside the caller's transaction: it waits
for a duplicate in flight at most WAIT_SECONDS and leaves the transaction's lock timeout as it was."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import text

from app import idempotency
from app.db import transaction
from app.errors import IdempotencyConflict
from app.sql import run


def test_claim_restores_the_transactions_lock_timeout_and_replays(engine):
    key = uuid.uuid4().hex
    args = {"scope": "ns-test", "route": "POST /v1/test", "key": key, "fp": "f1"}
    with transaction(engine) as conn:
        conn.execute(text("SET LOCAL lock_timeout = '1234ms'"))
        assert idempotency.claim(conn, **args) is None  # this request owns the key
        assert conn.execute(text("SHOW lock_timeout")).scalar_one() == "1234ms"
        idempotency.complete(
            conn, scope="ns-test", route="POST /v1/test", key=key, status=201, body='{"a":1}', fp="f1"
        )
    with transaction(engine) as conn:
        stored = idempotency.claim(conn, **args)
        assert stored is not None and stored.replayed and stored.status == 201 and stored.body == '{"a":1}'
        assert conn.execute(text("SHOW lock_timeout")).scalar_one() == "0"  # the session default


def test_a_duplicate_in_flight_waits_for_the_first_and_replays_it_or_owns_the_key_after_a_rollback(engine):
    """Two requests with one key at once: the second waits on the key's lock and then replays the first's
    committed receipt (its own try, which read before the first committed, fails on the receipt's unique
    key and is run again); after a first that rolled back, it owns the key itself. The receipt is one row
    written once (no insert-then-update)."""
    for outcome in ("commit", "rollback"):
        key = uuid.uuid4().hex
        args = {"scope": "ns-test", "route": "POST /v1/test", "key": key, "fp": "f1"}
        first_has_key, answers, worked = threading.Event(), [], []

        def second(first_has_key: threading.Event, answers: list, worked: list, args: dict) -> None:
            first_has_key.wait(10)

            def work(conn) -> tuple[int, str]:
                worked.append(1)
                return 201, "second"

            answers.append(idempotency.execute_once(work=work, engine=engine, **args))

        t = threading.Thread(target=second, args=(first_has_key, answers, worked, args))
        t.start()
        try:
            with transaction(engine) as conn:
                assert idempotency.claim(conn, **args) is None
                first_has_key.set()
                # the second is now waiting on the key's lock (it cannot have answered yet)
                run(conn, "SELECT pg_sleep(0.3)")
                assert answers == []
                idempotency.complete(conn, status=201, body='{"a":1}', **args)
                if outcome == "rollback":
                    raise RuntimeError("roll back")
        except RuntimeError:
            pass
        t.join(20)
        if outcome == "commit":
            assert answers[0].replayed and answers[0].body == '{"a":1}'
        else:  # the key is the second's now
            assert not answers[0].replayed and answers[0].body == '"second"' and worked == [1]
        with engine.connect() as conn:
            n = conn.execute(
                text("SELECT count(*) FROM idempotency_receipts WHERE key = :k"), {"k": key}
            ).scalar_one()
        assert n == 1


def test_a_claim_in_flight_with_the_same_key_is_waited_for_and_answered_again(engine):
    """A task claim keeps its key on the tasks it claims (no receipt row): a duplicate that arrives while
    the first is still in its transaction waits on the key's lock, then reads with a snapshot taken after
    the first committed, and answers the first's tasks instead of claiming others."""
    from app.engine import task_protocol
    from tests.engine.helpers import publish, start

    ns = "ns-" + uuid.uuid4().hex[:8]
    def_id = publish(
        engine,
        ns,
        {
            "version": "v1",
            "input_schema": {},
            "deadline_seconds": 600,
            "steps": [{"key": "t", "kind": "TASK", "queue": "q"}],
        },
    )
    for i in range(3):
        start(engine, ns, def_id, {"i": i})
    k = idempotency.Key(scope=ns, route="POST /v1/tasks/claim", key=uuid.uuid4().hex, fp="f1")
    first_claimed, answers = threading.Event(), []

    def claim(conn, pause: bool) -> tuple[int, list, bool]:
        tasks, replayed = task_protocol.claim_keyed(conn, ns, ["q"], 2, 60, k.key, k.fp)
        if pause:
            first_claimed.set()
            run(conn, "SELECT pg_sleep(0.3)")  # the second is waiting on the key's lock meanwhile
        return 200, [[t["id"], t["epoch"]] for t in tasks], replayed

    def second() -> None:
        first_claimed.wait(10)
        answers.append(idempotency.execute_on_rows(k, lambda conn: claim(conn, False), engine=engine))

    t = threading.Thread(target=second)
    t.start()
    first = idempotency.execute_on_rows(k, lambda conn: claim(conn, True), engine=engine)
    t.join(20)
    assert not first.replayed and len(first.json()) == 2
    assert answers[0].replayed and answers[0].json() == first.json()
    with engine.connect() as conn:
        states = conn.execute(
            text("SELECT state, count(*) FROM workflow_tasks WHERE namespace_id = :ns GROUP BY state"),
            {"ns": ns},
        ).all()
        receipts = conn.execute(
            text("SELECT count(*) FROM idempotency_receipts WHERE scope = :ns"), {"ns": ns}
        ).scalar_one()
    assert sorted(states) == [("CLAIMED", 2), ("PENDING", 1)] and receipts == 0
    # the same key with another request is refused, and claims nothing
    other = idempotency.Key(scope=ns, route=k.route, key=k.key, fp="f2")
    with pytest.raises(IdempotencyConflict):
        idempotency.execute_on_rows(
            other,
            lambda conn: (200, task_protocol.claim_keyed(conn, ns, ["q"], 2, 60, k.key, "f2")[0], True),
            engine=engine,
        )
