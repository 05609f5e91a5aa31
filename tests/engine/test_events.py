"""The events outbox (X-EVENT): every state change writes its event in the same transaction, with a
gap-free per-instance sequence; a rollback writes none; fan-out is one ``event_dispatch`` job per
transaction and instance, and only when the namespace listens."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine import events, instances
from app.ids import new_id
from tests.engine.helpers import claim_task, complete_task, instance, publish, start

NS = "ns-" + new_id()[:8]
DOC = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 3600,
    "steps": [
        {"key": "work", "kind": "TASK", "queue": "ev-q"},
        {"key": "two", "kind": "TASK", "queue": "ev-q", "after": ["work"]},
    ],
}


def _events(engine, iid: str) -> list:
    with engine.connect() as conn:
        return conn.execute(
            text(
                "SELECT seq, type, body, dispatch_job_id FROM workflow_events WHERE instance_id = :i ORDER BY seq"
            ),
            {"i": iid},
        ).all()


def test_every_change_writes_its_event_in_sequence(eng) -> None:
    def_id = publish(eng, NS, DOC)
    iid = start(eng, NS, def_id, {})["id"]
    for _ in range(2):
        complete_task(eng, NS, claim_task(eng, NS, "ev-q"), {"ok": True})
    assert instance(eng, iid)["state"] == "SUCCEEDED"
    rows = _events(eng, iid)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    types = [r.type for r in rows]
    assert types[0] == "workflow.started" and types[-1] == "workflow.succeeded"
    for t in ("step.activated", "task.created", "task.completed", "step.succeeded"):
        assert types.count(t) == 2, (t, types)
    body = rows[0].body
    assert body["instance"]["id"] == iid and body["instance"]["definition_id"] == def_id and body["trace_id"]
    done = next(r.body for r in rows if r.type == "step.succeeded")
    assert done["step_key"] == "work" and done["activation_id"]
    # nobody listens in this namespace: no fan-out job at all
    assert all(r.dispatch_job_id is None for r in rows)
    with eng.connect() as conn:
        assert (
            conn.execute(text("SELECT count(*) FROM workflow_jobs WHERE type = 'event_dispatch'")).scalar()
            == 0
        )


def test_a_rollback_writes_no_event(eng) -> None:
    def_id = publish(eng, NS, DOC)

    class Boom(Exception):
        pass

    with pytest.raises(Boom), transaction(eng) as conn:
        iid = instances.start_workflow(conn, NS, {"definition_id": def_id, "version": "v1", "input": {}})[
            "id"
        ]
        # written with the transaction's batch at its commit: here they wait in the buffer
        assert len(events._batches(conn).by_instance[iid].events) > 0
        raise Boom
    with eng.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM workflow_events")).scalar() == 0


def test_one_batch_row_per_transaction_and_instance(eng) -> None:
    """X-EVENT: the events of one transaction are one row (with the engine's audit entries), numbered on
    from the instance's previous batch; the view shows one row per event with ids naming their batch."""
    def_id = publish(eng, NS, DOC)
    iid = start(eng, NS, def_id, {})["id"]
    complete_task(eng, NS, claim_task(eng, NS, "ev-q"), {"ok": True})
    with eng.connect() as conn:
        batches = conn.execute(
            text(
                "SELECT id, first_seq, last_seq, json_array_length(events_json) AS n, json_array_length(audit_json) AS a "
                "FROM workflow_event_batches WHERE instance_id = :i ORDER BY last_seq"
            ),
            {"i": iid},
        ).all()
        rows = conn.execute(
            text("SELECT id, batch_id, seq FROM workflow_events WHERE instance_id = :i ORDER BY seq"),
            {"i": iid},
        ).all()
    assert len(batches) == 2  # the start, the completion
    assert batches[0].first_seq == 1 and batches[1].first_seq == batches[0].last_seq + 1
    assert all(b.last_seq - b.first_seq + 1 == b.n and b.a > 0 for b in batches)
    assert [r.seq for r in rows] == list(range(1, batches[1].last_seq + 1))
    assert all(r.id[:29] == r.batch_id[:29] and events.batch_of(r.id) == r.batch_id for r in rows)
    assert len({r.id for r in rows}) == len(rows)


def _subscribe(eng, ns: str) -> None:
    """An enabled subscription of every event type in ``ns``."""
    with eng.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO event_subscriptions (id, namespace_id, url, event_types, secret) "
                "VALUES (:id, :ns, 'https://example.com/h', '{*}', 'c2VjcmV0')"
            ),
            {"id": new_id(), "ns": ns},
        )


def test_one_dispatch_job_per_transaction_when_the_namespace_listens(eng) -> None:
    def_id = publish(eng, NS, DOC)
    _subscribe(eng, NS)
    iid = start(eng, NS, def_id, {})["id"]
    complete_task(eng, NS, claim_task(eng, NS, "ev-q"), {"ok": True})
    rows = _events(eng, iid)
    jobs = {r.dispatch_job_id for r in rows}
    assert None not in jobs and len(jobs) == 2  # the start's transaction and the completion's
    with eng.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM workflow_jobs WHERE type = 'event_dispatch'")).scalar()
    assert n == 2


def test_each_transaction_gets_its_own_dispatch_job_however_it_commits(eng) -> None:
    """Regression: the per-transaction dispatch job was cached in connection state that a commit made
    outside ``app.db.transaction`` (``engine.begin()``) left behind, so the next transaction's events
    joined an already finished job and were never fanned out."""
    from app.engine import events

    def_id = publish(eng, NS, DOC)
    iid = start(eng, NS, def_id, {})["id"]
    _subscribe(eng, NS)
    with eng.connect() as conn:
        for _ in range(2):
            with conn.begin():
                events.emit(conn, iid, "workflow.paused")
    jobs = [r.dispatch_job_id for r in _events(eng, iid) if r.type == "workflow.paused"]
    assert len(jobs) == 2 and None not in jobs and jobs[0] != jobs[1]


def test_a_listener_in_another_namespace_fans_out_nothing_here(eng) -> None:
    """Regression: a new instance's INSERT asks whether its namespace has listeners; an unqualified
    ``namespace_id`` inside that question named the subscription's own column, so any enabled
    subscription anywhere gave every start an ``event_dispatch`` job."""
    def_id = publish(eng, NS, DOC)
    _subscribe(eng, "another-namespace")
    iid = start(eng, NS, def_id, {})["id"]
    assert {r.dispatch_job_id for r in _events(eng, iid)} == {None}
    with eng.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM workflow_jobs WHERE type = 'event_dispatch'")).scalar()
    assert n == 0


def test_the_instance_lock_answers_the_listener_question_and_creates_no_job_without_an_event(eng) -> None:
    """The instance lock also reads whether the namespace listens (the first event asks nothing more);
    a transaction that locks and emits nothing fans out nothing, one that emits gets one job."""
    from app.engine.row_access import lock_instance

    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, DOC)
    iid = start(eng, ns, def_id, {})["id"]
    _subscribe(eng, ns)

    def dispatch_jobs() -> list:
        with eng.connect() as conn:
            return conn.execute(
                text("SELECT trace_id FROM workflow_jobs WHERE type = 'event_dispatch' AND instance_id = :i"),
                {"i": iid},
            ).all()

    with transaction(eng) as conn:
        lock_instance(conn, iid)
    assert dispatch_jobs() == []
    with transaction(eng) as conn:
        inst = lock_instance(conn, iid)
        assert "listened" not in inst
        events.emit(conn, iid, "workflow.paused")
    with eng.connect() as conn:
        trace = conn.execute(
            text("SELECT trace_id FROM workflow_instances WHERE id = :i"), {"i": iid}
        ).scalar()
    assert [r.trace_id for r in dispatch_jobs()] == [trace]
    paused = [r for r in _events(eng, iid) if r.type == "workflow.paused"]
    assert len(paused) == 1 and paused[0].dispatch_job_id is not None


def test_the_instance_lock_counts_only_listeners_of_the_instances_own_namespace(eng) -> None:
    """Regression: the lock's listener question named ``namespace_id`` unqualified, which inside it is
    the listener's own column: an enabled subscription in any namespace gave every locked transaction
    of every namespace an ``event_dispatch`` job."""
    from app.engine.row_access import lock_instance

    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, DOC)
    iid = start(eng, ns, def_id, {})["id"]
    _subscribe(eng, "elsewhere-" + new_id()[:8])
    with transaction(eng) as conn:
        lock_instance(conn, iid)
        events.emit(conn, iid, "workflow.paused")
    with eng.connect() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM workflow_jobs WHERE type = 'event_dispatch' AND instance_id = :i"),
            {"i": iid},
        ).scalar()
    assert n == 0


def test_a_transaction_with_more_events_than_a_batch_holds_writes_consecutive_batches(
    eng, monkeypatch
) -> None:
    """Past ``BATCH_EVENTS`` events a transaction writes several batch rows of one instance in its one
    commit statement (``engine_commit_batch``): each continues the sequence where the one before it ends
    (the rows of one statement do not see each other: the statement numbers them itself), for each of two
    instances."""
    from app.engine import commit_batch

    monkeypatch.setattr(commit_batch, "BATCH_EVENTS", 2)
    def_id = publish(eng, NS, DOC)
    first, second = (start(eng, NS, def_id, {})["id"] for _ in range(2))
    before = {iid: len(_events(eng, iid)) for iid in (first, second)}
    with transaction(eng) as conn:
        for iid, n in ((first, 5), (second, 3)):
            for _ in range(n):
                events.emit(conn, iid, "step.active", step_key="work")
    for iid, n in ((first, 5), (second, 3)):
        seqs = [r.seq for r in _events(eng, iid)]
        assert seqs == list(range(1, before[iid] + n + 1)), seqs
    with eng.connect() as conn:
        rows = conn.execute(
            text("SELECT count(*) FROM workflow_event_batches WHERE instance_id = :i AND first_seq > :b"),
            {"i": first, "b": before[first]},
        ).scalar()
    assert rows == 3  # 2 + 2 + 1
