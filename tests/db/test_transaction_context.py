"""A transaction's context (``app.db.Tx``, ``tx(conn)``): one typed object per transaction, made when the
transaction begins and never seen by the next transaction of the same pooled connection, however the first
one ended (a commit, a rollback, a transaction begun by SQLAlchemy rather than ``transaction()``)."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine

from app.db import Tx, transaction, tx
from app.sql import run


def test_transaction_makes_its_context_when_it_begins_and_the_next_transaction_gets_a_new_one(engine: Engine):
    # one pooled connection, so the second transaction runs on the first one's (an engine without the
    # application's own listeners: the context is bound to its transaction, not dropped by them)
    engine = create_engine(engine.url, pool_size=1, max_overflow=0)
    with transaction(engine) as conn:
        first = tx(conn)
        assert isinstance(first, Tx) and tx(conn) is first  # one object for the whole transaction
        first.hinted_queues.add("workflow-advance")
        first.watch_due["i1"] = 30.0
        dbapi = conn.connection.dbapi_connection
    with transaction(engine) as conn:
        assert conn.connection.dbapi_connection is dbapi  # the same pooled connection ...
        second = tx(conn)
        assert second is not first  # ... and a context of its own: nothing carried over
        assert second.hinted_queues == set() and second.watch_due == {}
    engine.dispose()


def test_a_context_made_at_first_use_ends_with_its_transaction_committed_or_rolled_back(engine: Engine):
    with engine.connect() as conn:
        run(conn, "SELECT 1")  # a transaction begun by SQLAlchemy (autobegin), not by ``transaction()``
        made = tx(conn)
        made.watch_absent.add("i1")
        made.locked_instance = {"id": "i1", "state": "RUNNING"}
        conn.rollback()
        after_rollback = tx(conn)  # begins the next transaction
        assert after_rollback is not made and after_rollback.watch_absent == set()
        assert after_rollback.take_locked_instance() is None
        after_rollback.enqueued_counts = {("delay_wake", "advance"): 1}
        conn.commit()
        assert tx(conn) is not after_rollback and tx(conn).enqueued_counts is None
        conn.rollback()


def test_the_locked_instance_is_taken_once(engine: Engine):
    with transaction(engine) as conn:
        t = tx(conn)
        t.locked_instance = {"id": "i1"}
        assert t.take_locked_instance() == {"id": "i1"}
        assert t.take_locked_instance() is None
