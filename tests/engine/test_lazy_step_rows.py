"""A step's row is inserted when the step is first activated (issue 27): a start stores no BLOCKED step
and no ``$root`` row, every reader still sees every declared step (the BLOCKED ones from the pinned
document, under the id their row gets), and the guarded insert lets one activation of a step through."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine import history, recovery, task_protocol
from app.engine.row_access import read_step, read_steps
from app.engine.transitions import TransitionRefused, step_moves
from app.errors import NotFound, StateConflict
from app.ids import new_id
from tests.engine.helpers import claim_task, publish, start, step

NS = "ns-" + new_id()[:8]

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "t", "kind": "TASK", "queue": "lazy-q", "timeout_seconds": 60},
        {"key": "wait", "kind": "TIMER", "delay_seconds": 30, "after": ["t"]},
        {"key": "u", "kind": "TASK", "queue": "lazy-q", "timeout_seconds": 60, "after": ["wait"]},
    ],
}


def _stored(eng, iid: str) -> dict[str, str]:
    with eng.connect() as conn:
        rows = conn.execute(
            text("SELECT key, state FROM workflow_steps WHERE instance_id = :i ORDER BY key"), {"i": iid}
        ).all()
    return {r.key: r.state for r in rows}


def test_a_start_stores_no_blocked_step_and_every_reader_still_sees_every_declared_step(eng):
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    # only the activated step has a row: no BLOCKED rows, no $root
    assert _stored(eng, iid) == {"t": "ACTIVE"}
    with eng.connect() as conn:
        steps = read_steps(conn, iid)
        assert [(s["key"], s["kind"], s["state"], s["revision"]) for s in steps] == [
            ("t", "TASK", "ACTIVE", 2),
            ("u", "TASK", "BLOCKED", 1),
            ("wait", "TIMER", "BLOCKED", 1),
        ]
        wait = read_step(conn, iid, "wait")
        assert wait is not None and wait["after"] == ["t"] and wait["activation_id"] is None
        assert read_step(conn, iid, "nope") is None
        assert read_steps(conn, new_id()) == []
        # the history of a declared step not yet activated is empty (not a 404); an unknown step is a 404
        inst = {"id": iid, "namespace_id": NS}
        assert history.activations(conn, inst, "wait", 10, None) == {"items": []}
        assert history.rounds(conn, inst, "u", 10, None)["items"] == []
        with pytest.raises(NotFound):
            history.activations(conn, inst, "nope", 10, None)
    view = step(eng, NS, iid, "wait")
    assert view["step"]["state"] == "BLOCKED" and view["step"]["id"] == wait["id"]
    # operator recovery of a BLOCKED step is refused as before (nothing to resolve)
    with pytest.raises(StateConflict), transaction(eng) as conn:
        recovery.recover(
            conn, iid, {"step_key": "wait", "action": "SUCCEED_STEP", "output": {}, "reason": "x"}
        )
    # the TIMER's row, inserted at its activation, has the id its BLOCKED step showed
    task = claim_task(eng, NS, "lazy-q")
    with transaction(eng) as conn:
        task_protocol.complete(conn, NS, task["id"], task["epoch"], {})
    assert _stored(eng, iid) == {"t": "SUCCEEDED", "wait": "WAITING"}
    with eng.connect() as conn:
        activated = read_step(conn, iid, "wait")
    assert activated is not None
    assert (
        activated["id"] == wait["id"] and activated["revision"] == 2 and activated["activation_sequence"] == 1
    )


def test_two_transactions_activating_the_same_step_let_exactly_one_through(eng):
    """The instance lock serializes activations; the guarded insert is the last line: without the lock,
    the second insert waits for the first transaction and is refused as a move from a non-BLOCKED state."""
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    with eng.connect() as conn:
        blocked = read_step(conn, iid, "wait")
    assert blocked is not None and blocked["state"] == "BLOCKED"

    def activate(conn) -> str:
        act = step_moves.insert_activation(conn, blocked, {"delay_seconds": 30})
        step_moves.activate(conn, iid, blocked, "WAITING", act)
        return act.id

    outcome: dict[str, object] = {}
    first = eng.connect()
    first.begin()
    first_act = activate(first)

    def second() -> None:
        try:
            with transaction(eng) as conn:
                outcome["activation"] = activate(conn)
        except TransitionRefused as exc:
            outcome["refused"] = exc

    other = threading.Thread(target=second)
    other.start()
    other.join(0.5)
    assert other.is_alive()  # it waits on the first transaction's row
    first.commit()
    first.close()
    other.join(10)
    assert "activation" not in outcome
    assert isinstance(outcome["refused"], TransitionRefused)
    assert outcome["refused"].allowed == ("BLOCKED",)
    with eng.connect() as conn:
        rows = conn.execute(
            text("SELECT activation_id, state FROM workflow_steps WHERE instance_id = :i AND key = 'wait'"),
            {"i": iid},
        ).all()
    assert [(r.activation_id, r.state) for r in rows] == [(first_act, "WAITING")]


def test_a_blocked_row_an_older_release_stored_is_activated_in_place(eng):
    """During a deploy a process of the previous release may still start workflows with BLOCKED rows
    (and a ``$root``). The step is activated by updating that row (its id kept: the task references it),
    and readers never list the ``$root``."""
    iid = start(eng, NS, publish(eng, NS, DOC), {})["id"]
    legacy_id = new_id()
    with transaction(eng) as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_steps (id, instance_id, key, kind, state, after) VALUES "
                "(:id, :i, 'wait', 'TIMER', 'BLOCKED', ARRAY['t']), (:root, :i, '$root', 'ROOT', 'SUCCEEDED', '{}')"
            ),
            {"id": legacy_id, "root": new_id(), "i": iid},
        )
    with eng.connect() as conn:
        assert [s["key"] for s in read_steps(conn, iid)] == ["t", "u", "wait"]
    task = claim_task(eng, NS, "lazy-q")
    with transaction(eng) as conn:
        task_protocol.complete(conn, NS, task["id"], task["epoch"], {})
    with eng.connect() as conn:
        wait = read_step(conn, iid, "wait")
    assert wait is not None and (wait["id"], wait["state"], wait["activation_sequence"]) == (
        legacy_id,
        "WAITING",
        1,
    )
