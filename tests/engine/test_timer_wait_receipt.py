"""A timer's wait is the receipt of its firing (L-EFFECT-1, ``handlers.timers.WaitReceipt``): the
UPDATE that resolves the wait records the job's operation, no ``workflow_job_effects`` row is written,
and a retry of the same operation (settle lost, lease taken over, a manual retry) answers the first
execution's result without advancing again; a stale execution is fenced; an execution of another
operation finds the wait ended and is skipped. The same holds for a signal wait's timeout."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine.handlers import timers
from app.engine.transitions import wait_moves
from app.engine.transitions._guard import TransitionRefused
from app.ids import new_id
from app.ledger import handlers, transitions
from app.ledger.drain import drain
from app.ledger.outcome import JobAborted, PermanentError, Skip
from tests.engine.helpers import claim_task, complete_task, instance, make_due, publish, start, step
from tests.ledger_helpers import (
    add_job,
    claim,
    context_for,
    scalar,
    settle,
    settlement,
    statements_sent,
    wait_for,
)

NS = "ns-" + new_id()[:8]

TIMER_DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "w", "kind": "TIMER", "delay_seconds": 30},
        {"key": "t", "kind": "TASK", "queue": "wr.q", "after": ["w"]},
    ],
}

SIGNAL_DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "signals": [{"name": "done", "payload_version": "v1", "schema": {}}],
    "steps": [
        {
            "key": "s",
            "kind": "SIGNAL",
            "signal": "done",
            "payload_version": "v1",
            "correlation": "$.business_key",
            "timeout_seconds": 5,
        }
    ],
}


def _due_timer(eng, doc=TIMER_DOC, wake="timer", **start_kw) -> tuple[str, dict]:
    """A started instance whose ``wake`` job is due and claimed (a short lease); (instance id, claimed row)."""
    iid = start(eng, NS, publish(eng, NS, doc), {}, **start_kw)["id"]
    make_due(eng)
    with eng.begin() as conn:
        conn.execute(text("UPDATE workflow_waits SET deadline_at = now() - interval '1 ms'"))
    [row] = [r for r in claim(eng, limit=5, lease_seconds=0.3) if r["payload"].get("wake") == wake]
    return iid, row


def _run(eng, row) -> object:
    return handlers.resolve("delay_wake")(context_for(row, eng))


def _wait(eng, iid: str) -> tuple:
    with eng.connect() as conn:
        return tuple(
            conn.execute(
                text("SELECT state, resolved_by_operation FROM workflow_waits WHERE instance_id = :i"),
                {"i": iid},
            ).one()
        )


def _tasks(eng, iid: str) -> int:
    return scalar(eng, "SELECT count(*) FROM workflow_tasks WHERE instance_id = :i", i=iid)


def _reclaim(eng, settings, row) -> dict:
    """What the drain does once the claimed ``row``'s lease has run out: the job is pending again and
    claimed anew (same generation, new lease token, next attempt)."""
    wait_for(
        lambda: scalar(eng, "SELECT lease_until <= now() FROM workflow_jobs WHERE id = :id", id=row["id"])
    )
    report = drain(eng, replace(settings, backoff_base_seconds=0.0))
    assert [(r["id"], r["status"]) for r in report.reclaimed] == [(row["id"], "pending")]
    [again] = claim(eng)
    assert again["id"] == row["id"] and again["lease_token"] != row["lease_token"]
    return again


def test_a_timer_fires_with_its_wait_as_the_receipt(eng):
    iid, row = _due_timer(eng)
    assert _run(eng, row) == {"fired": "w"}
    assert _wait(eng, iid) == ("RESOLVED", row["operation_key"])
    assert scalar(eng, "SELECT count(*) FROM workflow_job_effects") == 0
    assert step(eng, NS, iid, "w")["step"]["state"] == "SUCCEEDED" and _tasks(eng, iid) == 1


def test_committed_effect_then_lost_settle_fires_once_and_the_retry_answers_the_same(eng, settings):
    """The worker committed the timer's effect and died before settling the job: the drain hands the
    job out again and the retry answers {"fired": ...} from the wait, even after the workflow moved
    on to its end, without advancing anything."""
    iid, row = _due_timer(eng)
    assert _run(eng, row) == {"fired": "w"}  # committed; the settle never comes
    complete_task(eng, NS, claim_task(eng, NS, "wr.q"), {"ok": True})
    done = instance(eng, iid)
    assert done["state"] == "SUCCEEDED"

    again = _reclaim(eng, settings, row)
    assert again["attempts"] == 2
    assert _run(eng, again) == {"fired": "w"}  # not "skipped: workflow is SUCCEEDED"
    assert instance(eng, iid)["revision"] == done["revision"] and _tasks(eng, iid) == 1
    assert settle(eng, [settlement(again, "succeeded", result={"fired": "w"})]) == {row["id"]: "succeeded"}
    assert scalar(eng, "SELECT count(*) FROM workflow_job_effects") == 0


def test_a_manual_retry_of_the_same_operation_answers_the_same(eng):
    """A manual retry moves the job to a new generation and keeps its operation key (same input):
    the wait answers it; a retry with a changed payload is another operation and is skipped."""
    iid, row = _due_timer(eng)
    assert _run(eng, row) == {"fired": "w"}
    assert settle(eng, [settlement(row, "dead", error="lost after the commit")]) == {row["id"]: "dead"}
    rev = instance(eng, iid)["revision"]
    with transaction(eng) as conn:
        assert transitions.retry_job(conn, row["id"])["generation"] == row["generation"] + 1
    [retried] = claim(eng)
    assert retried["operation_key"] == row["operation_key"]
    assert _run(eng, retried) == {"fired": "w"}
    assert settle(eng, [settlement(retried, "dead", error="again")]) == {row["id"]: "dead"}
    with transaction(eng) as conn:
        transitions.retry_job(conn, row["id"], payload=row["payload"], operation_key="op-changed")
    [changed] = claim(eng)
    assert isinstance(out := _run(eng, changed), Skip), out
    assert instance(eng, iid)["revision"] == rev and _tasks(eng, iid) == 1


def test_a_stale_execution_is_fenced_and_writes_nothing(eng, settings):
    """The first execution stalls past its lease before writing; the drain hands the job to a second
    one. The stale one is fenced (ownership lost) and the wait stays WAITING until the owner fires it."""
    iid, stale = _due_timer(eng)
    owner = _reclaim(eng, settings, stale)
    with pytest.raises(JobAborted):
        _run(eng, stale)
    assert _wait(eng, iid) == ("WAITING", None) and _tasks(eng, iid) == 0
    assert _run(eng, owner) == {"fired": "w"}
    with pytest.raises(JobAborted):  # and after the owner's commit, still fenced (no stored answer)
        _run(eng, stale)
    assert _wait(eng, iid) == ("RESOLVED", owner["operation_key"]) and _tasks(eng, iid) == 1


def test_a_wait_ended_by_another_operation_is_skipped(eng):
    """A second job of another operation for the same activation finds the wait resolved by the first:
    skipped, nothing advances; so is a wake whose wait was stamped by another operation while its step
    still waits (the guarded UPDATE refuses it)."""
    iid, row = _due_timer(eng)
    assert _run(eng, row) == {"fired": "w"}
    rev = instance(eng, iid)["revision"]
    other = add_job(eng, "delay_wake", row["payload"], instance_id=iid, operation_key="op-other")
    [other_row] = [r for r in claim(eng, limit=5) if r["id"] == other]
    assert isinstance(out := _run(eng, other_row), Skip), out
    assert instance(eng, iid)["revision"] == rev and _tasks(eng, iid) == 1
    assert _wait(eng, iid) == ("RESOLVED", row["operation_key"])

    iid2, row2 = _due_timer(eng)
    with eng.begin() as conn:
        conn.execute(
            text(
                "UPDATE workflow_waits SET state = 'RESOLVED', resolved_by_operation = 'op-other' WHERE instance_id = :i"
            ),
            {"i": iid2},
        )
    out = _run(eng, row2)
    assert isinstance(out, Skip) and "already resolved" in out.reason, out
    assert step(eng, NS, iid2, "w")["step"]["state"] == "WAITING" and _tasks(eng, iid2) == 0


def test_concurrent_executions_of_one_operation_fire_once_and_answer_alike(eng):
    """Two jobs carrying the timer's operation key run at once: one fires, the other waits for it and
    answers the same result from the wait."""
    iid, row = _due_timer(eng)
    twin = add_job(eng, "delay_wake", row["payload"], instance_id=iid, operation_key=row["operation_key"])
    [twin_row] = [r for r in claim(eng, limit=5) if r["id"] == twin]
    results: dict[int, object] = {}

    def go(i: int, r: dict) -> None:
        try:
            results[i] = _run(eng, r)
        except BaseException as exc:  # reported by the assertion
            results[i] = exc

    threads = [threading.Thread(target=go, args=(i, r)) for i, r in enumerate((row, twin_row))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert results == {0: {"fired": "w"}, 1: {"fired": "w"}}
    assert _tasks(eng, iid) == 1 and scalar(eng, "SELECT count(*) FROM workflow_job_effects") == 0


def test_ended_by_waits_for_an_uncommitted_resolve_and_then_sees_it(eng):
    """The receipt read locks the wait: a reader of the same operation blocks while another
    transaction resolves it, then answers from the committed row."""
    iid, row = _due_timer(eng)
    act = row["payload"]["activation_id"]
    op = row["operation_key"]
    seen: list[object] = []
    with transaction(eng) as conn:
        assert wait_moves.try_fire_due(conn, iid, act, op) is not None

        def read() -> None:
            with transaction(eng) as c2:
                seen.append(wait_moves.ended_by(c2, iid, act, op))

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(0.5)
        assert reader.is_alive() and seen == []  # blocked on the row lock
    reader.join(10)
    assert seen == ["w"]
    with eng.connect() as conn:
        assert wait_moves.ended_by(conn, iid, act, "op-other") is None
        assert wait_moves.ended_by(conn, "another-instance", act, op) is None


def test_a_timer_firing_sends_no_statement_to_the_receipt_table(eng, monkeypatch):
    """Counted as the psycopg cursor executions they are: the firing neither reads nor writes
    ``workflow_job_effects``."""
    _, row = _due_timer(eng)
    fired, sent = _statements_of(monkeypatch, lambda: _run(eng, row))
    assert fired == {"fired": "w"}
    assert [s for s in sent if "workflow_job_effects" in s] == []
    assert [s for s in sent if "resolved_by_operation" in s]  # the wait's read and its stamp


def test_a_signal_timeout_is_received_on_its_wait_too(eng, settings):
    iid, row = _due_timer(eng, SIGNAL_DOC, "signal_timeout", business_key="b")
    assert _run(eng, row) == {"expired": "s"}
    assert _wait(eng, iid) == ("EXPIRED", row["operation_key"])
    failed = instance(eng, iid)
    assert failed["state"] == "FAILED"
    again = _reclaim(eng, settings, row)
    assert _run(eng, again) == {"expired": "s"}
    assert instance(eng, iid)["revision"] == failed["revision"]
    assert scalar(eng, "SELECT count(*) FROM workflow_job_effects") == 0


def test_an_unknown_wake_names_every_wake():
    ctx = type("Ctx", (), {"payload": {"wake": "bogus"}})()
    with pytest.raises(PermanentError) as err:
        timers.delay_wake(ctx)
    assert str(err.value) == (
        "unknown wake 'bogus': one of cancel_settle, deadline, element_retry, poll, signal_expiry, signal_timeout, task_retry, timer"
    )


def test_a_timer_firing_locks_and_reads_its_instance_once(eng, monkeypatch):
    """``run_locked_once`` locks the instance before the job (``lock_first``) and its write uses that row:
    one locking read of the instance per firing, not a second one inside the write; the job's fence is in
    the same statement, after the instance's lock (``instance_lock_job_fence``), and no statement of its own
    asks the deadline again at the end (``job_within_deadline``: only near the deadline)."""
    _, row = _due_timer(eng)
    fired, sent = _statements_of(monkeypatch, lambda: _run(eng, row))
    assert fired == {"fired": "w"}
    locks = [s for s in sent if "FROM workflow_instances i WHERE i.id = %(id)s FOR UPDATE" in s]
    assert len(locks) == 1, locks
    assert "FROM workflow_jobs j WHERE j.id = %(job_id)s" in locks[0], locks  # the fence, in it
    assert locks[0].index("FROM workflow_instances i") < locks[0].index("FROM workflow_jobs j")
    assert [s for s in sent if s.startswith("SELECT") and "FROM workflow_jobs j WHERE j.id" in s] == []
    assert [s for s in sent if "clock_timestamp() <" in s] == [], sent


def _statements_of(monkeypatch, call) -> tuple[object, list[str]]:
    """``call()``'s answer and the statements it sent (``statements_sent``)."""
    sent = statements_sent(monkeypatch)
    try:
        return call(), sent
    finally:
        monkeypatch.undo()


def test_a_timer_firing_reads_its_steps_once_and_no_receipt(eng, monkeypatch, settings):
    """The firing reads the instance's steps once, under the lock, and settles progress from them and
    the locked instance row (no second read of either); it reads no receipt, since the UPDATE that ends
    the wait proves that no execution of its operation ended it before. A retry of the operation moves
    nothing, so it reads the receipt, and answers what the first execution answered."""
    iid, row = _due_timer(eng)
    fired, sent = _statements_of(monkeypatch, lambda: _run(eng, row))
    assert fired == {"fired": "w"}
    assert len([s for s in sent if "LEFT JOIN workflow_steps s" in s]) == 1, sent
    assert [s for s in sent if s.startswith("SELECT") and "FROM workflow_instances WHERE id =" in s] == []
    assert [s for s in sent if "FOR UPDATE OF w" in s] == []  # the receipt's read
    assert [s for s in sent if "workflow_all_activations" in s] == []  # the step named it
    again = _reclaim(eng, settings, row)
    answer, sent = _statements_of(monkeypatch, lambda: _run(eng, again))
    assert answer == {"fired": "w"} and len([s for s in sent if "FOR UPDATE OF w" in s]) == 1
    assert _tasks(eng, iid) == 1


def test_a_timer_firing_resolves_its_wait_closes_its_step_and_reads_the_steps_in_one_statement(
    eng, monkeypatch
):
    """The wait's UPDATE, its step's move to SUCCEEDED and the read of the instance's steps are ONE
    statement (``wait_fire_due``): a firing sends no ``step_close`` of its own (one statement fewer than
    before), and what it leaves is what the two statements left: the wait RESOLVED by the job's operation,
    the step and its activation SUCCEEDED (revision + 1), its ``step.succeeded`` event, the next task."""
    iid, row = _due_timer(eng)
    before = step(eng, NS, iid, "w")["step"]
    fired, sent = _statements_of(monkeypatch, lambda: _run(eng, row))
    assert fired == {"fired": "w"}
    waits = [s for s in sent if "UPDATE workflow_waits" in s]
    assert len(waits) == 1 and "LEFT JOIN workflow_steps s" in waits[0], waits
    assert "UPDATE workflow_steps SET state = 'SUCCEEDED'" in waits[0]
    assert [s for s in sent if s.startswith("UPDATE workflow_steps SET state = %(s)s")] == []  # no step_close
    assert len([s for s in sent if "LEFT JOIN workflow_steps s" in s]) == 1, sent
    assert _wait(eng, iid)[0] == "RESOLVED" and _tasks(eng, iid) == 1
    after = step(eng, NS, iid, "w")["step"]
    assert after["state"] == "SUCCEEDED" and int(after["revision"]) == int(before["revision"]) + 1
    with eng.connect() as conn:
        assert (
            conn.execute(
                text("SELECT act_state FROM workflow_steps WHERE instance_id = :i AND key = 'w'"), {"i": iid}
            ).scalar_one()
            == "SUCCEEDED"
        )
        last = conn.execute(
            text("SELECT type, body FROM workflow_events WHERE instance_id = :i ORDER BY seq DESC LIMIT 4"),
            {"i": iid},
        ).all()[::-1]
    assert [t for t, _ in last] == ["step.succeeded", "task.created", "step.activated", "workflow.running"]
    assert last[0][1]["step_key"] == "w" and last[0][1]["activation_id"] == before["activation_id"]


def test_a_wait_resolved_without_its_step_is_refused_and_leaves_both_as_they_were(eng):
    """The two moves of a firing go together: a due wait whose step still WAITS but whose activation is in
    no open state (``step_moves.OPEN``: a row an operator or a bug left inconsistent) is refused; the
    transaction rolls back (the ledger retries the job) and the wait stays WAITING."""
    iid, row = _due_timer(eng)
    with eng.begin() as conn:
        conn.execute(
            text("UPDATE workflow_steps SET act_state = 'FAILED' WHERE instance_id = :i AND key = 'w'"),
            {"i": iid},
        )
    with pytest.raises(TransitionRefused):
        _run(eng, row)
    assert _wait(eng, iid) == ("WAITING", None) and _tasks(eng, iid) == 0


def test_a_due_wait_whose_step_no_longer_waits_is_left_as_it_is(eng):
    """The UPDATE resolves the wait only while its step waits on it (``decide.wakes.timer_due``, in its
    guard): a due wait whose step moved on without it is not resolved, and the wake is skipped with the
    decision's reason."""
    iid, row = _due_timer(eng)
    with eng.begin() as conn:
        conn.execute(text("UPDATE workflow_steps SET state = 'CANCELLED' WHERE instance_id = :i"), {"i": iid})
    assert _run(eng, row) == Skip("the timer's activation is no longer current")
    assert _wait(eng, iid) == ("WAITING", None) and _tasks(eng, iid) == 0


TASK_TIMER_DOC = {
    **TIMER_DOC,
    "steps": [
        {"key": "a", "kind": "TASK", "queue": "wr.a"},
        {"key": "w", "kind": "TIMER", "delay_seconds": 30, "after": ["a"]},
        {"key": "t", "kind": "TASK", "queue": "wr.q", "after": ["w"]},
    ],
}
JOB_ARM = "remaining_ms FROM workflow_jobs"  # ``enqueue.JOB_ARM``'s text


def _watch(eng, iid: str):
    return scalar(
        eng,
        "SELECT run_at FROM workflow_jobs WHERE instance_id = :i AND type = 'task_timeout' AND status = 'pending'",
        i=iid,
    )


def test_a_timer_firing_arms_no_watch_when_the_pending_one_is_due_no_later(eng, monkeypatch):
    """The instance's lock answers when its pending watch is due (``instance_lock_job_fence``): the next
    task, due after it (task ``a``'s deadline), arms nothing (``job_arm``: one statement and a row lock
    on the watch less per firing), and the watch stays where it was."""
    iid = start(eng, NS, publish(eng, NS, TASK_TIMER_DOC), {})["id"]
    complete_task(eng, NS, claim_task(eng, NS, "wr.a"), {})
    watch = _watch(eng, iid)
    make_due(eng)
    [row] = [r for r in claim(eng, limit=5) if r["payload"].get("wake") == "timer"]
    fired, sent = _statements_of(monkeypatch, lambda: _run(eng, row))
    assert fired == {"fired": "w"}
    assert [s for s in sent if JOB_ARM in s] == []
    assert _watch(eng, iid) == watch and _tasks(eng, iid) == 2


def test_a_timer_firing_moves_the_watch_earlier_for_a_task_due_before_it(eng, monkeypatch):
    """A TIMER first: the pending watch is the workflow deadline's (600 s), the task the firing opens is
    due in 300 s: the watch is moved earlier, as before."""
    iid, row = _due_timer(eng)
    before = _watch(eng, iid)
    fired, sent = _statements_of(monkeypatch, lambda: _run(eng, row))
    assert fired == {"fired": "w"}
    assert len([s for s in sent if JOB_ARM in s]) == 1
    assert _watch(eng, iid) < before
