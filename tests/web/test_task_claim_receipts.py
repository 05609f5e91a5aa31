"""X-TASK + W-API-2: a claim's receipt is kept on the tasks it claimed (``workflow_tasks.claim_key``),
not in an ``idempotency_receipts`` row: a claim resent with the same Idempotency-Key answers the same
tasks at the same epochs (also after one was completed), a key reused with another body is refused, a
claim that found nothing marks nothing; a resent batch completion answers the same results, also
without a receipt row."""

from __future__ import annotations

import threading
import uuid

import httpx
from sqlalchemy import text

from tests.web.test_workflows_start import _raw
from tests.web.wf_live import wf_ns, wf_server  # noqa: F401

TASK_DOC = {"version": "v1", "input_schema": {}, "deadline_seconds": 3600, "steps": []}


def _start_tasks(ns, n: int, queue: str) -> list[str]:
    """``n`` workflows whose one TASK step waits on ``queue``; their ids."""
    c = ns.client()
    d = c.create_definition("claim-" + uuid.uuid4().hex[:8])
    c.publish_version(d["id"], {**TASK_DOC, "steps": [{"key": "t", "kind": "TASK", "queue": queue}]})
    return [c.start_workflow(d["id"], "v1", {"i": i}).instance.id for i in range(n)]


def _claim(ns, key: str, queue: str, max_tasks: int, wait: int = 0) -> httpx.Response:
    body = {"queues": [queue], "wait_seconds": wait, "max_tasks": max_tasks}
    return _raw(ns, "POST", "/v1/tasks/claim", body, key=key, who="worker")


def _receipts(engine, route: str) -> int:
    with engine.connect() as conn:
        return conn.execute(
            text("SELECT count(*) FROM idempotency_receipts WHERE route = :r"), {"r": route}
        ).scalar_one()


def _states(engine, ids: list[str]) -> dict[str, tuple[str, int]]:
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT instance_id, state, epoch FROM workflow_tasks WHERE instance_id = ANY(:i)"),
            {"i": ids},
        )
        return {r.instance_id: (r.state, r.epoch) for r in rows}


def test_a_resent_claim_answers_the_same_tasks_and_writes_no_receipt(wf_ns, engine):  # noqa: F811
    ids = _start_tasks(wf_ns, 3, "cq")
    key = uuid.uuid4().hex
    first = _claim(wf_ns, key, "cq", 2)
    assert first.status_code == 200, first.text
    tasks = first.json()["data"]["tasks"]
    assert len(tasks) == 2 and "Idempotent-Replayed" not in first.headers
    again = _claim(wf_ns, key, "cq", 2)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["data"]["tasks"] == tasks  # the same tasks, epochs and leases, in the same order
    assert again.json()["request_id"] != first.json()["request_id"]
    # the resend claimed nothing: the third task is still pending, and another key claims it
    claimed = {t["workflow_id"] for t in tasks}
    assert _states(engine, ids) == {i: ("CLAIMED", 1) if i in claimed else ("PENDING", 0) for i in ids}
    [third] = _claim(wf_ns, uuid.uuid4().hex, "cq", 2).json()["data"]["tasks"]
    assert third["workflow_id"] not in claimed
    # a task of the claim completed meanwhile: the resend still answers it, at the epoch that claim gave
    done = tasks[0]
    w = wf_ns.client("worker")
    w.complete_task(done["id"], done["epoch"], {"ok": True})
    later = _claim(wf_ns, key, "cq", 2)
    assert later.status_code == 200 and later.headers["Idempotent-Replayed"] == "true"
    expected = [{k: v for k, v in done.items() if k != "lease_expires_at"}, tasks[1]]
    assert later.json()["data"]["tasks"] == expected  # an ended claim shows no lease
    assert _receipts(engine, "POST /v1/tasks/claim") == 0
    # the SDK's claim (its own key) also writes no receipt row
    w.claim_tasks(["cq"])
    assert _receipts(engine, "POST /v1/tasks/claim") == 0


def test_a_claim_key_reused_with_another_body_is_refused_and_claims_nothing(wf_ns, engine):  # noqa: F811
    ids = _start_tasks(wf_ns, 2, "cr")
    key = uuid.uuid4().hex
    assert len(_claim(wf_ns, key, "cr", 1).json()["data"]["tasks"]) == 1
    for other in ({"max_tasks": 2}, {"wait_seconds": 1}, {"queues": ["cr", "other"]}):
        body = {"queues": ["cr"], "wait_seconds": 0, "max_tasks": 1, **other}
        r = _raw(wf_ns, "POST", "/v1/tasks/claim", body, key=key, who="worker")
        assert r.status_code == 409 and r.json()["code"] == "IDEMPOTENCY_CONFLICT", (other, r.text)
    assert sorted(_states(engine, ids).values()) == [("CLAIMED", 1), ("PENDING", 0)]


def test_a_claim_that_found_nothing_marks_nothing(wf_ns, engine):  # noqa: F811
    """An empty answer is no receipt (nothing was claimed): the same key claims when a task comes."""
    key = uuid.uuid4().hex
    empty = _claim(wf_ns, key, "ce", 1)
    assert empty.status_code == 200 and empty.json()["data"]["tasks"] == []
    [wid] = _start_tasks(wf_ns, 1, "ce")
    [task] = _claim(wf_ns, key, "ce", 1).json()["data"]["tasks"]
    assert task["workflow_id"] == wid and task["epoch"] == 1


def test_a_task_claimed_again_is_no_longer_answered_to_the_first_key(wf_ns, engine):  # noqa: F811
    [wid] = _start_tasks(wf_ns, 1, "cx")
    first_key = uuid.uuid4().hex
    [task] = _claim(wf_ns, first_key, "cx", 1).json()["data"]["tasks"]
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 ms' WHERE id = :i"),
            {"i": task["id"]},
        )
    [again] = _claim(wf_ns, uuid.uuid4().hex, "cx", 1).json()["data"]["tasks"]
    assert again["id"] == task["id"] and again["epoch"] == 2
    # the first claim's epoch is over: its key marks no task now (and there is nothing else to claim)
    r = _claim(wf_ns, first_key, "cx", 1)
    assert r.status_code == 200 and r.json()["data"]["tasks"] == []
    assert _states(engine, [wid]) == {wid: ("CLAIMED", 2)}


def test_concurrent_claims_with_one_key_claim_once(wf_ns, engine):  # noqa: F811
    """Eight requests with one key at once (a client resending while the first is in flight): the key's
    lock orders them, so one claims and the others answer its tasks."""
    ids = _start_tasks(wf_ns, 6, "cc")
    key = uuid.uuid4().hex
    answers: list[httpx.Response] = []
    go = threading.Barrier(8)

    def call() -> None:
        go.wait(10)
        answers.append(_claim(wf_ns, key, "cc", 2))

    threads = [threading.Thread(target=call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert [r.status_code for r in answers] == [200] * 8
    bodies = [r.json()["data"]["tasks"] for r in answers]
    assert all(b == bodies[0] for b in bodies) and len(bodies[0]) == 2
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in answers) == 7
    assert sorted(s for s, _ in _states(engine, ids).values()) == ["CLAIMED"] * 2 + ["PENDING"] * 4


def test_the_sdk_resends_a_claim_whose_answer_was_lost_and_gets_the_same_tasks(wf_ns, engine):  # noqa: F811
    """The first answer is lost on the way back (the server claimed); the SDK resends with the same key
    and gets those tasks, not others: nothing stays claimed unseen until its lease runs out."""
    ids = _start_tasks(wf_ns, 3, "cl")

    class LoseFirstClaimAnswer(httpx.HTTPTransport):
        lost = 0

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            resp = super().handle_request(request)
            if request.url.path == "/v1/tasks/claim" and not self.lost:
                self.lost += 1
                resp.read()
                raise httpx.ReadError("connection reset", request=request)
            return resp

    transport = LoseFirstClaimAnswer()
    w = wf_ns.client("worker", transport=transport, backoff=0.01)
    got = w.claim_tasks(["cl"], max_tasks=2)
    assert transport.lost == 1 and len(got) == 2
    states = _states(engine, ids)
    assert sorted(states.values()) == [("CLAIMED", 1), ("CLAIMED", 1), ("PENDING", 0)]
    assert {t.workflow_id for t in got} == {i for i, (s, _) in states.items() if s == "CLAIMED"}


def test_a_resent_batch_completion_answers_the_same_and_writes_no_receipt(wf_ns, engine):  # noqa: F811
    _start_tasks(wf_ns, 2, "cb")
    tasks = _claim(wf_ns, uuid.uuid4().hex, "cb", 2).json()["data"]["tasks"]
    body = {"tasks": [{"id": t["id"], "epoch": t["epoch"], "output": {"n": 1}} for t in tasks]}
    key = uuid.uuid4().hex
    first = _raw(wf_ns, "POST", "/v1/tasks/complete", body, key=key, who="worker")
    again = _raw(wf_ns, "POST", "/v1/tasks/complete", body, key=key, who="worker")
    assert first.status_code == again.status_code == 200
    r1, r2 = first.json()["data"]["results"], again.json()["data"]["results"]
    assert [r["status"] for r in r1] == [r["status"] for r in r2] == [200, 200]
    assert [r["task"] for r in r1] == [r["task"] for r in r2]
    assert all(r["task"]["state"] == "COMPLETED" for r in r2) and all(r["replayed"] for r in r2)
    # another output for an applied completion is refused, per task
    other = {"tasks": [{**body["tasks"][0], "output": {"n": 2}}]}
    [refused] = _raw(wf_ns, "POST", "/v1/tasks/complete", other, key=key, who="worker").json()["data"][
        "results"
    ]
    assert refused["status"] == 409 and refused["error"]["code"] == "STATE_CONFLICT"
    assert _receipts(engine, "POST /v1/tasks/complete") == 0


def test_a_resent_single_completion_answers_the_same_and_writes_no_receipt(wf_ns, engine):  # noqa: F811
    """``POST /v1/tasks/{id}/complete``: the completed task (state, epoch, output) is the receipt."""
    [wid] = _start_tasks(wf_ns, 1, "cs")
    [task] = _claim(wf_ns, uuid.uuid4().hex, "cs", 1).json()["data"]["tasks"]
    path, key = f"/v1/tasks/{task['id']}/complete", uuid.uuid4().hex
    body = {"epoch": task["epoch"], "output": {"n": 9007199254740993}}
    first = _raw(wf_ns, "POST", path, body, key=key, who="worker")
    again = _raw(wf_ns, "POST", path, body, key=key, who="worker")
    assert first.status_code == again.status_code == 200, again.text
    assert "Idempotent-Replayed" not in first.headers and again.headers["Idempotent-Replayed"] == "true"
    assert again.json()["data"] == first.json()["data"]
    assert first.json()["data"]["task"]["state"] == "COMPLETED"
    # the same key with another output, or another epoch, is that key used for another request (W-ERR, the
    # seed: "same key, changed request"); another key with another output is a result for an ended claim;
    # neither changes anything
    for changed in ({**body, "output": {"n": 2}}, {**body, "epoch": task["epoch"] + 1}):
        other = _raw(wf_ns, "POST", path, changed, key=key, who="worker")
        assert other.status_code == 409 and other.json()["code"] == "IDEMPOTENCY_CONFLICT", other.text
    late = _raw(wf_ns, "POST", path, {**body, "output": {"n": 2}}, key=uuid.uuid4().hex, who="worker")
    assert late.status_code == 409 and late.json()["code"] == "STATE_CONFLICT", late.text
    # the key of a completion is not the key of a failure (another route): a failure with it is refused as
    # a result for an ended claim
    failed = {"epoch": task["epoch"], "error": {"message": "x", "retryable": False}}
    wrong = _raw(wf_ns, "POST", f"/v1/tasks/{task['id']}/fail", failed, key=key, who="worker")
    assert wrong.status_code == 409 and wrong.json()["code"] == "STATE_CONFLICT", wrong.text
    assert wf_ns.client().get_workflow(wid).state == "SUCCEEDED"
    with engine.connect() as conn:  # kept once, on the step's activation (task_moves.TASK_OUTPUT)
        output = conn.execute(
            text(
                "SELECT t.output IS NULL, s.act_output::text FROM workflow_tasks t "
                "JOIN workflow_steps s ON s.activation_id = t.activation_id WHERE t.id = :i"
            ),
            {"i": task["id"]},
        ).one()
    assert tuple(output) == (True, '{"n": 9007199254740993}')
    assert _receipts(engine, f"POST {path}") == 0


def test_a_resent_failure_answers_the_same_and_runs_the_retry_policy_once(wf_ns, engine):  # noqa: F811
    c = wf_ns.client()
    d = c.create_definition("fail-" + uuid.uuid4().hex[:8])
    step = {"key": "t", "kind": "TASK", "queue": "cf", "retry": {"max_attempts": 3, "backoff_seconds": 0}}
    c.publish_version(d["id"], {**TASK_DOC, "steps": [step]})
    wid = c.start_workflow(d["id"], "v1", {}).instance.id
    [task] = _claim(wf_ns, uuid.uuid4().hex, "cf", 1).json()["data"]["tasks"]
    path, key = f"/v1/tasks/{task['id']}/fail", uuid.uuid4().hex
    body = {"epoch": task["epoch"], "error": {"message": "flaky", "retryable": True}}
    first = _raw(wf_ns, "POST", path, body, key=key, who="worker")
    again = _raw(wf_ns, "POST", path, body, key=key, who="worker")
    assert first.status_code == again.status_code == 200, again.text
    assert again.headers["Idempotent-Replayed"] == "true" and again.json()["data"] == first.json()["data"]
    changed = {**body, "error": {"message": "other", "retryable": True}}
    other = _raw(wf_ns, "POST", path, changed, key=key, who="worker")
    assert other.status_code == 409 and other.json()["code"] == "IDEMPOTENCY_CONFLICT", other.text
    late = _raw(wf_ns, "POST", path, changed, key=uuid.uuid4().hex, who="worker")
    assert late.status_code == 409 and late.json()["code"] == "STATE_CONFLICT", late.text
    with engine.connect() as conn:
        attempts = conn.execute(
            text("SELECT attempt, state FROM workflow_tasks WHERE instance_id = :i ORDER BY attempt"),
            {"i": wid},
        ).all()
    assert [tuple(a) for a in attempts] == [(1, "FAILED"), (2, "PENDING")]  # one retry, not two
    assert _receipts(engine, f"POST {path}") == 0
