"""X-TASK ``POST /v1/tasks/complete`` with ``claim``: the completions, then a claim with the request's
Idempotency-Key (as ``POST /v1/tasks/claim`` with ``wait_seconds`` 0) in the same request. The claim
takes the task the completion just created; a resend answers the same results and the same tasks; the
same key with another claim is refused; a queue outside the credential's scope is refused before any
completion."""

from __future__ import annotations

import threading
import uuid

import httpx
from sqlalchemy import text

from tests.conftest import ROOT
from tests.ledger_helpers import wait_for
from tests.web.test_task_claim_receipts import _states
from tests.web.test_workflows_start import _raw
from tests.web.wf_live import wf_ns, wf_server  # noqa: F401
from web import create_app
from web.openapi import build_spec

DOC = {"version": "v1", "input_schema": {}, "deadline_seconds": 3600}


def _two_step(ns, queue: str, n: int = 1) -> list[str]:
    """``n`` workflows TASK a -> TASK b, both on ``queue``; their ids."""
    c = ns.client()
    d = c.create_definition("cc-" + uuid.uuid4().hex[:8])
    steps = [
        {"key": "a", "kind": "TASK", "queue": queue},
        {"key": "b", "kind": "TASK", "queue": queue, "after": ["a"]},
    ]
    c.publish_version(d["id"], {**DOC, "steps": steps})
    return [c.start_workflow(d["id"], "v1", {"i": i}).instance.id for i in range(n)]


def _complete(ns, key: str, items: list[dict], claim: dict | None, who: str = "worker") -> httpx.Response:
    body: dict = {"tasks": items}
    if claim is not None:
        body["claim"] = claim
    return _raw(ns, "POST", "/v1/tasks/complete", body, key=key, who=who)


def _task_state(engine, task_id: str) -> tuple[str, int]:
    """(state, epoch) of one task (``_states`` keys by instance: one task each, which a workflow whose
    completion created its second task no longer has)."""
    with engine.connect() as conn:
        row = conn.execute(
            text("SELECT state, epoch FROM workflow_tasks WHERE id = :i"), {"i": task_id}
        ).one()
    return (row.state, row.epoch)


def _claim_one(ns, queue: str) -> dict:
    r = _raw(
        ns, "POST", "/v1/tasks/claim", {"queues": [queue], "max_tasks": 1}, key=uuid.uuid4().hex, who="worker"
    )
    assert r.status_code == 200, r.text
    [t] = r.json()["data"]["tasks"]
    return t


def test_the_completion_claims_the_task_it_created_and_a_resend_answers_the_same(wf_ns, engine):  # noqa: F811
    [wid] = _two_step(wf_ns, "cc1")
    a = _claim_one(wf_ns, "cc1")
    assert a["step_key"] == "a"
    key = uuid.uuid4().hex
    items = [{"id": a["id"], "epoch": a["epoch"], "output": {"x": 1}}]
    first = _complete(wf_ns, key, items, {"queues": ["cc1"], "max_tasks": 4})
    assert first.status_code == 200, first.text
    data = first.json()["data"]
    assert [(r["id"], r["status"]) for r in data["results"]] == [(a["id"], 200)]
    [b] = data["claimed"]  # step b's task, created by that completion, claimed by the same request
    assert (b["workflow_id"], b["step_key"], b["epoch"]) == (wid, "b", 1)
    assert "lease_expires_at" in b
    assert _task_state(engine, b["id"]) == ("CLAIMED", 1)

    again = _complete(wf_ns, key, items, {"queues": ["cc1"], "max_tasks": 4})  # a lost answer, resent
    assert again.status_code == 200, again.text
    data2 = again.json()["data"]
    assert data2["results"][0]["replayed"] is True
    assert data2["claimed"] == data["claimed"]  # the same task at the same epoch, nothing claimed anew
    assert _task_state(engine, b["id"]) == ("CLAIMED", 1)

    other = _complete(wf_ns, key, items, {"queues": ["cc1"], "max_tasks": 2})
    assert other.status_code == 409 and other.json()["code"] == "IDEMPOTENCY_CONFLICT"

    done = _complete(
        wf_ns,
        uuid.uuid4().hex,
        [{"id": b["id"], "epoch": 1, "output": 2}],
        {"queues": ["cc1"], "max_tasks": 1},
    )
    assert done.status_code == 200 and done.json()["data"]["claimed"] == []  # nothing left: no wait
    assert wf_ns.client().get_workflow(wid).state == "SUCCEEDED"


def test_without_claim_the_answer_has_no_claimed(wf_ns):  # noqa: F811
    _two_step(wf_ns, "cc2")
    a = _claim_one(wf_ns, "cc2")
    r = _complete(wf_ns, uuid.uuid4().hex, [{"id": a["id"], "epoch": a["epoch"], "output": 1}], None)
    assert r.status_code == 200 and "claimed" not in r.json()["data"]
    assert _claim_one(wf_ns, "cc2")["step_key"] == "b"  # left for the next claim


def test_a_claim_outside_the_scope_is_refused_before_any_completion(wf_ns, engine):  # noqa: F811
    [wid] = _two_step(wf_ns, "q1")
    r = _raw(wf_ns, "POST", "/v1/tasks/claim", {"queues": ["q1"]}, key=uuid.uuid4().hex, who="worker_q1")
    [a] = r.json()["data"]["tasks"]
    items = [{"id": a["id"], "epoch": a["epoch"], "output": 1}]
    refused = _complete(
        wf_ns, uuid.uuid4().hex, items, {"queues": ["q1", "q2"], "max_tasks": 1}, who="worker_q1"
    )
    # W-ERR (seed 004): a queue outside the credential's scope is 404 NOT_FOUND, as POST /v1/tasks/claim
    assert (refused.status_code, refused.json()["code"]) == (404, "NOT_FOUND"), refused.text
    assert _states(engine, [wid])[wid] == ("CLAIMED", a["epoch"])  # a is not completed
    ok = _complete(wf_ns, uuid.uuid4().hex, items, {"queues": ["q1"], "max_tasks": 1}, who="worker_q1")
    assert ok.status_code == 200 and ok.json()["data"]["claimed"][0]["step_key"] == "b"


def test_the_documents_say_what_a_claim_outside_the_scope_answers():
    """The route's OpenAPI operation declares the 404 and 409 its claim answers, and its description and the
    reference's row say 404 (they said 403, which it never answered)."""
    app = create_app()
    with app.app_context():
        op = build_spec(app)["paths"]["/v1/tasks/complete"]["post"]
    assert {"404", "409"} <= set(op["responses"])
    assert "(404 for a queue outside the credential's scope)" in op["description"]
    [row] = [
        ln
        for ln in (ROOT / "docs/reference.md").read_text().splitlines()
        if ln.startswith("| `POST /v1/tasks/complete`")
    ]
    assert "a queue outside the credential's scope → 404 `NOT_FOUND` before any item is completed" in row
    assert "→ 403" not in row


def test_an_invalid_claim_is_400_naming_the_field(wf_ns):  # noqa: F811
    _two_step(wf_ns, "cc3")
    a = _claim_one(wf_ns, "cc3")
    items = [{"id": a["id"], "epoch": a["epoch"], "output": 1}]
    for claim, field in (
        ({"queues": ["cc3"], "max_tasks": 17}, "claim.max_tasks"),
        ({"queues": [], "max_tasks": 1}, "claim.queues"),
        ({"queues": ["cc3"], "wait_seconds": 5}, "claim.wait_seconds"),
    ):
        r = _complete(wf_ns, uuid.uuid4().hex, items, claim)
        assert r.status_code == 400, r.text
        assert field in {e["field"] for e in r.json()["errors"]}, r.text


def _writers(engine, task_ids: list[str]) -> dict[str, str]:
    """The transaction that last wrote each task row (``xmin``)."""
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT id, xmin::text AS x FROM workflow_tasks WHERE id = ANY(:i)"), {"i": task_ids}
        )
        return {r.id: r.x for r in rows}


def test_a_batch_that_applies_whole_is_one_transaction_and_one_refused_item_gives_each_its_own(
    wf_ns,  # noqa: F811
    engine,
):
    wids = _two_step(wf_ns, "cc5", n=3)
    firsts = [_claim_one(wf_ns, "cc5") for _ in wids]
    items = [{"id": t["id"], "epoch": t["epoch"], "output": i} for i, t in enumerate(firsts)]
    r = _complete(wf_ns, uuid.uuid4().hex, items, None)
    assert r.status_code == 200, r.text
    assert [x["status"] for x in r.json()["data"]["results"]] == [200, 200, 200]
    assert len(set(_writers(engine, [t["id"] for t in firsts]).values())) == 1  # one commit for the three

    seconds = [_claim_one(wf_ns, "cc5") for _ in wids]  # the b steps, created by those completions
    assert sorted(t["step_key"] for t in seconds) == ["b", "b", "b"]
    stale = seconds[1]
    path = f"/v1/tasks/{stale['id']}/release"
    released = _raw(wf_ns, "POST", path, {"epoch": stale["epoch"]}, key=uuid.uuid4().hex, who="worker")
    assert released.status_code == 200, released.text
    items = [{"id": t["id"], "epoch": t["epoch"], "output": "b"} for t in seconds]
    r = _complete(wf_ns, uuid.uuid4().hex, items, None)
    assert [x["status"] for x in r.json()["data"]["results"]] == [200, 409, 200]  # the others stand
    applied = _writers(engine, [seconds[0]["id"], seconds[2]["id"]])
    assert len(set(applied.values())) == 2  # each in its own transaction once one item was refused
    states = {t["workflow_id"]: wf_ns.client().get_workflow(t["workflow_id"]).state for t in seconds}
    assert [states[t["workflow_id"]] for t in seconds] == ["SUCCEEDED", "RUNNING", "SUCCEEDED"]


def test_the_completion_and_its_claim_are_one_transaction(wf_ns, engine):  # noqa: F811
    _two_step(wf_ns, "cc6")
    a = _claim_one(wf_ns, "cc6")
    items = [{"id": a["id"], "epoch": a["epoch"], "output": 1}]
    r = _complete(wf_ns, uuid.uuid4().hex, items, {"queues": ["cc6"], "max_tasks": 1})
    assert r.status_code == 200, r.text
    [b] = r.json()["data"]["claimed"]
    writers = _writers(engine, [a["id"], b["id"]])
    assert writers[a["id"]] == writers[b["id"]]  # a completed, b created and claimed: one commit


_LOCK_WAITS = text(
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' "
    "AND NOT COALESCE(CAST(:pid AS int) = ANY(pg_blocking_pids(pid)), false)"
)


def _lock_waits(engine, n: int, *, not_on: int | None = None) -> None:
    """Until ``n`` backends wait for a lock (none of them for one that backend ``not_on`` holds)."""

    def waiting() -> bool:
        with engine.connect() as conn:
            return conn.execute(_LOCK_WAITS, {"pid": not_on}).scalar_one() >= n

    wait_for(waiting, timeout=30)


def test_two_batches_that_deadlock_are_each_completed_item_by_item(wf_ns, engine):  # noqa: F811
    """Two batches lock two instances in opposite orders: PostgreSQL ends one of the two transactions
    (deadlock_detected), which then completes its items one by one; both answer every item 200."""
    c = wf_ns.client()
    d = c.create_definition("dl-" + uuid.uuid4().hex[:8])
    steps = [{"key": "a1", "kind": "TASK", "queue": "cc7"}, {"key": "a2", "kind": "TASK", "queue": "cc7"}]
    c.publish_version(d["id"], {**DOC, "steps": steps})
    x, y = (c.start_workflow(d["id"], "v1", {"i": i}).instance.id for i in range(2))
    tasks = [_claim_one(wf_ns, "cc7") for _ in range(4)]
    by = {(t["workflow_id"], t["step_key"]): t for t in tasks}

    def item(t: dict) -> dict:
        return {"id": t["id"], "epoch": t["epoch"], "output": t["step_key"]}

    first = [item(by[(x, "a1")]), item(by[(y, "a1")])]  # locks x, then y
    second = [item(by[(y, "a2")]), item(by[(x, "a2")])]  # locks y, then x
    answers: dict[str, httpx.Response] = {}
    holders = [engine.connect() for _ in range(2)]
    try:
        pids = []
        for conn, wid in zip(holders, (x, y), strict=True):  # x and y held, so both batches queue up
            conn.begin()
            conn.execute(text("SELECT 1 FROM workflow_instances WHERE id = :i FOR UPDATE"), {"i": wid})
            pids.append(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())

        def send(name: str, items: list[dict]) -> None:
            answers[name] = _complete(wf_ns, uuid.uuid4().hex, items, None)

        batches = [
            threading.Thread(target=send, args=args) for args in (("first", first), ("second", second))
        ]
        batches[0].start()
        _lock_waits(engine, 1)  # the first batch waits for x
        batches[1].start()
        _lock_waits(engine, 2)  # the second waits for y
        holders[0].rollback()  # the first locks x, then waits for y behind the second
        _lock_waits(engine, 2, not_on=pids[0])
        holders[1].rollback()  # the second gets y, then waits for x, which the first holds: a deadlock
        for t in batches:
            t.join(60)
    finally:
        for conn in holders:
            conn.close()
    for name in ("first", "second"):
        r = answers[name]
        assert r.status_code == 200, r.text
        assert [a["status"] for a in r.json()["data"]["results"]] == [200, 200], r.text
    commits = sorted(
        len(set(_writers(engine, [i["id"] for i in batch]).values())) for batch in (first, second)
    )
    assert commits == [1, 2]  # one batch committed whole; the other, ended by the deadlock, item by item
    assert {c.get_workflow(w).state for w in (x, y)} == {"SUCCEEDED"}
