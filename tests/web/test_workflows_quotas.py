"""W-ERR on the workflow API: 429 QUEUE_FULL / APPLICATION_FULL with Retry-After (quotas lowered by
configuration; stored receipts still replay first), and 503 UNAVAILABLE with Retry-After (never a 500)
when the database is unreachable."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import text

from ledgerflow.client import QuotaExceeded
from tests.web.test_workflows_start import _raw
from tests.web.wf_live import make_namespace, wf_ns, wf_server  # noqa: F401


def _definition(client, steps: list[dict]) -> str:
    d = client.create_definition("quota-" + uuid.uuid4().hex[:8])
    client.publish_version(
        d["id"], {"version": "v1", "input_schema": {}, "deadline_seconds": 3600, "steps": steps}
    )
    return d["id"]


def _start(ns, def_id: str, key: str):
    return _raw(ns, "POST", "/v1/workflows", {"definition_id": def_id, "version": "v1", "input": {}}, key=key)


def _assert_429(r, code: str) -> None:
    assert r.status_code == 429, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.headers["Retry-After"] == "30"
    body = r.json()
    assert body["code"] == code and body["status"] == 429 and body["request_id"]


def test_queue_full_is_429_with_retry_after(wf_ns, monkeypatch, engine):  # noqa: F811
    monkeypatch.setenv("LEDGERFLOW_QUEUE_PENDING_LIMIT", "1")
    c = wf_ns.client()
    def_id = _definition(c, [{"key": "t", "kind": "TASK", "queue": "q1"}])
    first = _start(wf_ns, def_id, "k1")
    assert first.status_code == 201
    _assert_429(_start(wf_ns, def_id, "k2"), "QUEUE_FULL")
    # nothing was created by the refused start; the stored receipt of k1 still replays
    assert [i.id for i in c.list_workflows(definition_id=def_id).items] == [
        first.json()["data"]["instance"]["id"]
    ]
    replay = _start(wf_ns, def_id, "k1")
    assert replay.status_code == 200 and replay.json()["data"]["deduplicated"] is True
    # the SDK raises a typed error carrying the code and Retry-After (it does not retry a 429)
    with pytest.raises(QuotaExceeded) as e:
        c.start_workflow(def_id, "v1", {}, idempotency_key="k3")
    assert e.value.code == "QUEUE_FULL" and e.value.status == 429 and e.value.retry_after == 30
    # a claimed task whose lease expired is pending again (it is back in its queue)
    w = wf_ns.client("worker")
    [claimed] = w.claim_tasks(["q1"])
    assert claimed.workflow_id == first.json()["data"]["instance"]["id"]
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE workflow_tasks SET lease_expires_at = now() - interval '1 ms' WHERE id = :i"),
            {"i": claimed.id},
        )
    _assert_429(_start(wf_ns, def_id, "k2"), "QUEUE_FULL")
    # a live claim is no longer pending: the queue has room again, and the same key now succeeds
    [again] = w.claim_tasks(["q1"])
    assert again.id == claimed.id and again.epoch == claimed.epoch + 1
    assert _start(wf_ns, def_id, "k2").status_code == 201
    # other queues and other namespaces are not affected
    other_def = _definition(c, [{"key": "t", "kind": "TASK", "queue": "q2"}])
    assert _start(wf_ns, other_def, "k4").status_code == 201
    other = make_namespace(wf_ns.url)
    assert (
        _start(
            other, _definition(other.client(), [{"key": "t", "kind": "TASK", "queue": "q1"}]), "x"
        ).status_code
        == 201
    )


def test_application_full_counts_unfinished_instances_and_open_tasks(wf_ns, monkeypatch):  # noqa: F811
    monkeypatch.setenv("LEDGERFLOW_APPLICATION_WORK_LIMIT", "4")
    c = wf_ns.client()
    two_tasks = _definition(
        c, [{"key": "a", "kind": "TASK", "queue": "qa"}, {"key": "b", "kind": "TASK", "queue": "qb"}]
    )
    timer_only = _definition(c, [{"key": "w", "kind": "TIMER", "delay_seconds": 3600}])
    first = _start(wf_ns, two_tasks, "a1")  # 1 instance + 2 open tasks = 3 units
    assert first.status_code == 201
    assert _start(wf_ns, timer_only, "a2").status_code == 201  # + 1 instance = 4 units: full
    _assert_429(_start(wf_ns, timer_only, "a3"), "APPLICATION_FULL")
    _assert_429(_start(wf_ns, two_tasks, "a4"), "APPLICATION_FULL")
    # stored receipts replay before the quota is looked at
    replay = _start(wf_ns, two_tasks, "a1")
    assert replay.status_code == 200 and replay.json()["data"]["deduplicated"] is True
    assert replay.json()["data"]["instance"] == first.json()["data"]["instance"]
    # a claimed task is still unfinished work; a completed one is not
    w = wf_ns.client("worker")
    [t] = w.claim_tasks(["qa"])
    _assert_429(_start(wf_ns, timer_only, "a3"), "APPLICATION_FULL")
    w.complete_task(t.id, t.epoch, {"ok": True})
    assert _start(wf_ns, timer_only, "a3").status_code == 201
    # the application is the credential's namespace: another namespace has its own quota
    other = make_namespace(wf_ns.url)
    assert (
        _start(
            other, _definition(other.client(), [{"key": "w", "kind": "TIMER", "delay_seconds": 60}]), "b"
        ).status_code
        == 201
    )


# -- 503 UNAVAILABLE -------------------------------------------------------------------------------
@pytest.fixture
def dead_database(monkeypatch):
    """Authentication still reaches the database; every route's own queries go to a closed port."""
    from sqlalchemy import create_engine

    import app.db
    import web.tasks
    import web.workflows

    dead = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none", connect_args={"connect_timeout": 1})
    for mod in (web.workflows, web.tasks, app.db):
        monkeypatch.setattr(mod, "get_engine", lambda url=None: dead)
    yield
    dead.dispose()


def test_workflow_routes_answer_503_when_the_database_is_unreachable(app, token, dead_database):
    h = {
        "Authorization": "Bearer "
        + token("workflows:read", "workflows:start", "tasks:submit", "tasks:work", namespace="dead")
    }
    client = app.test_client()
    wid = uuid.uuid4().hex
    body = json.dumps({"definition_id": uuid.uuid4().hex, "version": "v1", "input": {}})
    responses = [
        client.get("/v1/workflows", headers=h),
        client.get(f"/v1/workflows/{wid}", headers=h),
        client.get(f"/v1/workflows/{wid}/steps", headers=h),
        client.get(f"/v1/workflows/{wid}/steps/a", headers=h),
        client.post(
            "/v1/workflows", headers={**h, "Idempotency-Key": "k"}, data=body, content_type="application/json"
        ),
        client.get(f"/v1/tasks/{wid}", headers=h),
        client.post(
            "/v1/tasks/claim",
            headers={**h, "Idempotency-Key": "c"},
            data=json.dumps({"queues": ["q"]}),
            content_type="application/json",
        ),
    ]
    for r in responses:
        assert r.status_code == 503, (r.request.path, r.status_code, r.data)
        assert r.headers["content-type"].startswith("application/problem+json")
        assert r.headers["Retry-After"] == "5"
        p = r.get_json(force=True)
        assert p["code"] == "UNAVAILABLE" and p["status"] == 503 and p["request_id"]
        assert b"psycopg" not in r.data and b"127.0.0.1" not in r.data and b"Traceback" not in r.data
