"""Operator actions on workflows through the API (issue 47): rerun from the start and from a middle step,
a batch cancel with preview over a filter, search by id prefix and business-key prefix, failure groups."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text

from app.db import get_engine
from ledgerflow.client import ApiError
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import Ops, ops  # noqa: F401

CHAIN = {
    "steps": [
        {"key": "a", "kind": "TASK", "queue": "q1"},
        {"key": "b", "kind": "TASK", "queue": "q1", "after": ["a"]},
        {"key": "c", "kind": "TASK", "queue": "q1", "after": ["b"]},
    ]
}


def _run_until_c_fails(ops: Ops, wid: str) -> None:  # noqa: F811
    """a and b succeed, c fails (not retryable): the workflow is FAILED."""
    for key in ("a", "b"):
        [t] = ops.worker.claim_tasks(["q1"])
        assert (t.workflow_id, t.step_key) == (wid, key)
        ops.worker.complete_task(t.id, t.epoch, {"from": key})
    [t] = ops.worker.claim_tasks(["q1"])
    assert t.step_key == "c"
    ops.worker.fail_task(t.id, t.epoch, "card declined", retryable=False)
    assert ops.client.get_workflow(wid).state == "FAILED"


def _rerun(ops: Ops, wid: str, **body) -> dict:  # noqa: F811
    return ops.client.request("POST", f"/v1/workflows/{wid}/rerun", body={"reason": "bug fixed", **body})[
        "data"
    ]


def _steps(ops: Ops, wid: str) -> dict[str, dict]:  # noqa: F811
    return {s["key"]: s for s in ops.client.request("GET", f"/v1/workflows/{wid}/steps")["data"]["steps"]}


def test_rerun_from_a_middle_step_copies_before_and_reruns_after(ops: Ops):  # noqa: F811
    wid = ops.start(ops.define(CHAIN))
    _run_until_c_fails(ops, wid)
    done = _rerun(ops, wid, from_step="b")
    new = done["instance"]["id"]
    assert new != wid and done["rerun_of"] == wid and done["copied_steps"] == ["a"]
    steps = _steps(ops, new)
    assert steps["a"]["state"] == "SUCCEEDED" and steps["a"]["copied_from"] == wid
    assert steps["b"]["state"] == "ACTIVE" and "copied_from" not in steps["b"]
    assert steps["c"]["state"] == "BLOCKED"
    a = ops.client.request("GET", f"/v1/workflows/{new}/steps/a")["data"]
    assert a["output"] == {"from": "a"}  # the old output, copied
    # b and c run again (b's task sees a's copied output through the mappings as any step would)
    for key in ("b", "c"):
        [t] = ops.worker.claim_tasks(["q1"])
        assert (t.workflow_id, t.step_key) == (new, key)
        ops.worker.complete_task(t.id, t.epoch, {"again": key})
    assert ops.worker.claim_tasks(["q1"]) == []  # a never ran again
    assert ops.client.get_workflow(new).state == "SUCCEEDED"
    # the old one stays as it ended; the link both ways
    old_view = ops.client.request("GET", f"/v1/workflows/{wid}")["data"]
    assert old_view["state"] == "FAILED"
    assert [r["id"] for r in old_view["reruns"]] == [new] and old_view["reruns"][0]["reason"] == "bug fixed"
    new_view = ops.client.request("GET", f"/v1/workflows/{new}")["data"]
    assert new_view["rerun_of"]["id"] == wid and new_view["rerun_of"]["from_step"] == "b"
    # the audit of both, with the reason
    for inst, action in ((wid, "workflow.rerun_started"), (new, "workflow.rerun")):
        items = ops.client.request("GET", f"/v1/workflows/{inst}/operations")["data"]["items"]
        [op] = [o for o in items if o["action"] == action]
        detail = ops.client.request("GET", f"/v1/workflows/{inst}/operations/{op['id']}")["data"]
        assert detail["reason"] == "bug fixed"
        assert (detail["after"].get("rerun_id") or detail["after"]["instance"]["id"]) == new


def test_rerun_from_the_start_runs_every_step(ops: Ops):  # noqa: F811
    wid = ops.start(ops.define(CHAIN))
    _run_until_c_fails(ops, wid)
    done = _rerun(ops, wid)
    new = done["instance"]["id"]
    assert done["copied_steps"] == [] and done["from_step"] is None
    steps = _steps(ops, new)
    assert steps["a"]["state"] == "ACTIVE" and not any("copied_from" in s for s in steps.values())
    [t] = ops.worker.claim_tasks(["q1"])
    assert (t.workflow_id, t.step_key) == (new, "a")
    assert ops.client.request("GET", f"/v1/workflows/{new}")["data"]["rerun_of"]["from_step"] is None


def test_rerun_refusals(ops: Ops):  # noqa: F811
    wid = ops.start(ops.define(CHAIN))
    with pytest.raises(ApiError) as e:  # a running workflow is not rerun
        _rerun(ops, wid)
    assert e.value.status == 409 and "FAILED or CANCELLED" in str(e.value)
    [t] = ops.worker.claim_tasks(["q1"])
    ops.worker.fail_task(t.id, t.epoch, "boom", retryable=False)  # a fails: nothing succeeded
    with pytest.raises(ApiError) as e:  # from c: its ancestor a did not succeed
        _rerun(ops, wid, from_step="c")
    assert e.value.status == 409 and "'a'" in str(e.value)
    with pytest.raises(ApiError) as e:
        _rerun(ops, wid, from_step="nope")
    assert e.value.status == 409
    with pytest.raises(ApiError) as e:
        _rerun(ops, wid, version="v9")
    assert e.value.status == 404


def _start_many(ops: Ops, def_id: str, n: int, key: str) -> list[str]:  # noqa: F811
    return [
        ops.client.start_workflow(def_id, "v1", {}, business_key=f"{key}-{i}").instance.id for i in range(n)
    ]


def test_batch_cancel_with_preview_over_a_filter_of_200(ops: Ops):  # noqa: F811
    def_id = ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]})
    ids = _start_many(ops, def_id, 200, "Batch")
    other = ops.start(ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]}))
    body = {"action": "CANCEL", "filter": {"definition_id": def_id}, "reason": "bad deploy"}
    preview = ops.client.request("POST", "/v1/workflows/batch", body={**body, "preview": True})["data"]
    assert preview["preview"] is True and preview["operation_id"] is None
    assert (
        preview["matched"] == 200
        and preview["submitted"] == 200
        and sorted(preview["submitted_ids"]) == sorted(ids)
    )
    assert all(ops.client.get_workflow(i).state == "WAITING" for i in ids[:5])  # nothing changed
    done = ops.client.request("POST", "/v1/workflows/batch", body=body)["data"]
    assert done["submitted"] == 200 and done["skipped_for_state"] == 0 and done["not_found"] == 0
    assert {i["state"] for i in done["items"]} <= {"CANCELLED", "CANCELLING"}
    assert ops.client.get_workflow(other).state == "WAITING"
    with get_engine().connect() as conn:  # each workflow's own audit row, and the batch's
        n = conn.execute(
            text(
                "SELECT count(*) FROM operation_audit WHERE action = 'workflow.control.cancel' AND workflow_id = ANY(:ids)"
            ),
            {"ids": ids},
        ).scalar_one()
        assert n == 200
    again = ops.client.request("POST", "/v1/workflows/batch", body={**body, "preview": True})["data"]
    assert again["submitted"] == 0 and again["skipped_for_state"] == 200  # already cancelled


def test_batch_answers_each_item(ops: Ops):  # noqa: F811
    def_id = ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]})
    ids = _start_many(ops, def_id, 3, "item")
    body = {"action": "PAUSE", "ids": [*ids, uuid.uuid4().hex], "reason": "look"}
    done = ops.client.request("POST", "/v1/workflows/batch", body=body)["data"]
    assert done["submitted"] == 3 and done["not_found"] == 1 and all(i["paused"] for i in done["items"])
    again = ops.client.request("POST", "/v1/workflows/batch", body=body)["data"]  # a new key: all refused
    assert again["submitted"] == 0 and again["skipped_for_state"] == 3
    assert {s["reason"] for s in again["skipped"] if s["status"]} == {"the workflow is already paused"}
    resumed = ops.client.request("POST", "/v1/workflows/batch", body={**body, "action": "RESUME"})["data"]
    assert resumed["submitted"] == 3


def test_search_by_id_prefix_and_business_key_prefix_in_another_case(ops: Ops):  # noqa: F811
    def_id = ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]})
    ids = _start_many(ops, def_id, 3, "Order-ABC")
    found = ops.client.request("GET", "/v1/workflows", params={"id_prefix": ids[1][:8]})["data"]["items"]
    assert [i["id"] for i in found] == [ids[1]]
    found = ops.client.request("GET", "/v1/workflows", params={"id_prefix": ids[1][:8].upper()})["data"][
        "items"
    ]
    assert [i["id"] for i in found] == [ids[1]]
    found = ops.client.request("GET", "/v1/workflows", params={"business_key_prefix": "order-abc"})["data"]
    assert sorted(i["id"] for i in found["items"]) == sorted(ids)
    found = ops.client.request("GET", "/v1/workflows", params={"business_key_prefix": "ORDER-abc-2"})["data"]
    assert [i["id"] for i in found["items"]] == [ids[2]]
    with pytest.raises(ApiError) as e:
        ops.client.request("GET", "/v1/workflows", params={"id_prefix": "abc"})
    assert e.value.status == 400


def test_failure_groups_of_300_failed_workflows_of_3_causes(ops: Ops):  # noqa: F811
    def_id = ops.define({"steps": [{"key": "pay", "kind": "TASK", "queue": "q1"}]})
    causes = ["card 4111 declined for order {n}", "gateway timeout after {n} ms", "no stock for sku-{n}"]
    ids = _start_many(ops, def_id, 300, "g")
    failed = 0
    while failed < 300:
        for t in ops.worker.claim_tasks(["q1"], max_tasks=16):
            cause = causes[failed % 3].format(n=1000 + failed)
            ops.worker.fail_task(t.id, t.epoch, cause, retryable=False)
            failed += 1
    got = ops.client.request("GET", "/v1/workflows/failure-groups")["data"]
    assert got["group_count"] == 3
    assert sorted(g["count"] for g in got["groups"]) == [100, 100, 100]
    for g in got["groups"]:
        assert g["definition_id"] == def_id and g["step_key"] == "pay" and g["error_code"] == "TASK_FAILED"
        assert "<n>" in g["message_group"] and g["first_seen"] <= g["last_seen"]
        members = ops.client.request("GET", "/v1/workflows", params={**g["filter"], "limit": 100})["data"]
        assert len(members["items"]) == 100 and set(i["id"] for i in members["items"]) <= set(ids)
    # rerun this group: the batch RERUN with the group's filter (preview)
    g = got["groups"][0]
    body = {"action": "RERUN", "filter": g["rerun_filter"], "reason": "fixed", "preview": True}
    preview = ops.client.request("POST", "/v1/workflows/batch", body=body)["data"]
    assert preview["matched"] == 100 and preview["submitted"] == 100


def test_a_failure_with_its_stack_trace_and_worker_identity_is_read_back(ops: Ops):  # noqa: F811
    from ledgerflow.worker import TaskWorker, bounded_stack, identity

    wid = ops.start(ops.define({"steps": [{"key": "pay", "kind": "TASK", "queue": "q1"}]}))

    def pay(task):
        raise KeyError("card 4111")

    worker = TaskWorker(ops.worker, functions={"q1": pay}, wait_seconds=0)
    assert worker.run_once(0) == 1
    rounds = ops.client.request("GET", f"/v1/workflows/{wid}/steps/pay/rounds")["data"]["items"]
    [attempt] = rounds
    me = identity()
    assert attempt["worker"] == me and me["pid"] > 0 and me["sdk"].startswith("ledgerflow-python/")
    failure = attempt["failure"]
    assert failure["type"] == "KeyError" and failure["message"] == "KeyError: 'card 4111'"
    assert "Traceback (most recent call last)" in failure["stack"] and "in pay" in failure["stack"]
    assert failure["worker"] == me
    try:  # the bound: a long trace keeps its head and its end
        raise ValueError("x" * 20_000 + " the end")
    except ValueError as exc:
        text = bounded_stack(exc)
    assert len(text) <= 16 * 1024 and text.startswith("Traceback") and "characters left out" in text
    assert text.endswith(" the end\n")


def test_a_claim_names_its_worker_on_the_attempt(ops: Ops):  # noqa: F811
    wid = ops.start(ops.define({"steps": [{"key": "t", "kind": "TASK", "queue": "q1"}]}))
    who = {"host": "box-7", "pid": 4242, "sdk": "ledgerflow-go/0.3"}
    [t] = ops.worker.claim_tasks(["q1"], worker=who)
    [attempt] = ops.client.request("GET", f"/v1/workflows/{wid}/steps/t/rounds")["data"]["items"]
    assert attempt["worker"] == who and "failure" not in attempt
    with pytest.raises(ApiError) as e:  # bounded
        ops.worker.claim_tasks(["q1"], worker={**who, "host": "x" * 300})
    assert e.value.status == 400


def test_a_rerun_on_another_version_never_compensates_a_copied_step(ops: Ops):  # noqa: F811
    def_id = ops.define(CHAIN)
    wid = ops.start(def_id)
    _run_until_c_fails(ops, wid)
    v2 = {
        "version": "v2",
        "input_schema": {},
        "deadline_seconds": 600,
        "steps": [
            {"key": "a", "kind": "TASK", "queue": "q1", "compensation": {"queue": "undo"}},
            {"key": "b", "kind": "TASK", "queue": "q1", "after": ["a"], "compensation": {"queue": "undo"}},
            {"key": "c", "kind": "TASK", "queue": "q1", "after": ["b"]},
        ],
    }
    ops.client.publish_version(def_id, v2)
    done = _rerun(ops, wid, from_step="b", version="v2")
    new = done["instance"]["id"]
    assert done["instance"]["version"] == "v2" and done["copied_steps"] == ["a"]
    [t] = ops.worker.claim_tasks(["q1"])
    assert (t.workflow_id, t.step_key) == (new, "b")
    ops.worker.fail_task(t.id, t.epoch, "still broken", retryable=False)
    # b failed, a was copied: nothing of this run to compensate, so it ends FAILED at once
    assert ops.client.get_workflow(new).state == "FAILED"
    # a rerun of a workflow that compensated nothing, from c on v1: a and b copied
    again = _rerun(ops, wid, from_step="c")
    assert again["copied_steps"] == ["a", "b"]


def test_a_batch_over_a_time_filter_audits_its_filter(ops: Ops):  # noqa: F811
    def_id = ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]})
    ids = _start_many(ops, def_id, 2, "time")
    body = {
        "action": "RESUME",
        "filter": {"definition_id": def_id, "created_after": "2020-01-01T00:00:00Z"},
        "reason": "nothing is paused",
    }
    done = ops.client.request("POST", "/v1/workflows/batch", body=body)["data"]
    assert done["matched"] == 2 and done["skipped_for_state"] == 2 and done["submitted"] == 0
    assert sorted(s["id"] for s in done["skipped"]) == sorted(ids)
    with get_engine().connect() as conn:
        before = conn.execute(
            text(
                "SELECT before FROM operation_audit WHERE action = 'workflows.batch_resume' AND target_id = :o"
            ),
            {"o": done["operation_id"]},
        ).scalar_one()
    assert before["filter"]["definition_id"] == def_id and before["filter"]["created_after"].startswith(
        "2020-01-01"
    )
