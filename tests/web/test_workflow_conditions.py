"""Conditions and SKIPPED through the HTTP API on a live server (issue 44): an exclusive branch in each
direction (the other branch SKIPPED with its event and audit entry, the join once), conditions on an
absent value, a step after a skipped one, and the 400 of a bad condition with its field path."""

from __future__ import annotations

import uuid

import pytest

from ledgerflow.client import Client, InvalidArgument
from tests.web.wf_live import Namespace, wf_ns, wf_server  # noqa: F401

BRANCH = {
    "version": "1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 300,
    "steps": [
        {"key": "start", "kind": "TASK", "queue": "q1"},
        {
            "key": "manual",
            "kind": "TASK",
            "queue": "q1",
            "after": ["start"],
            "condition": {">": ["$.input.amount", 1000]},
        },
        {
            "key": "auto",
            "kind": "TASK",
            "queue": "q1",
            "after": ["start"],
            "condition": {"<=": ["$.input.amount", 1000]},
        },
        {
            "key": "join",
            "kind": "TASK",
            "queue": "q1",
            "after": ["manual", "auto"],
            "input": {"manual": "$.steps.manual.output.by", "auto": "$.steps.auto.output.by"},
        },
    ],
    "output": {
        "manual": "$.steps.manual.output.by",
        "auto": "$.steps.auto.output.by",
        "joined": "$.steps.join.output",
    },
}


def _publish(client: Client, doc: dict) -> str:
    return client.ensure_definition("cond-" + uuid.uuid4().hex[:8], doc)["id"]


def _run_tasks(client: Client, wid: str, outputs: dict[str, object]) -> list[str]:
    """Claim and complete q1 tasks until the workflow ends; returns the step keys run, in order."""
    ran: list[str] = []
    for _ in range(50):
        if client.get_workflow(wid).state in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return ran
        for task in client.claim_tasks(["q1"], wait_seconds=1):
            ran.append(task.step_key)
            client.complete_task(
                task.id, task.epoch, outputs.get(task.step_key, {"by": task.step_key, "in": task.input})
            )
    raise AssertionError(f"workflow {wid} did not end; ran {ran}")


def _events(client: Client, wid: str) -> list[dict]:
    return client.request("GET", f"/v1/workflows/{wid}/events", params={"limit": "100"})["data"]["items"]


def _audit_token(ns: Namespace) -> str:
    from app.auth import Scope, create_credential
    from app.db import transaction

    with transaction() as conn:
        return create_credential(
            conn, namespace=ns.name, name="auditor", scopes=[Scope.WORKFLOWS_AUDIT_READ, Scope.WORKFLOWS_READ]
        ).token


@pytest.mark.parametrize(("amount", "ran", "skipped"), [(5000, "manual", "auto"), (10, "auto", "manual")])
def test_an_exclusive_branch_runs_one_side_and_the_join_once(wf_ns, amount, ran, skipped) -> None:  # noqa: F811
    client = wf_ns.client()
    wid = client.start_workflow(_publish(client, BRANCH), "1", {"amount": amount}).instance.id
    assert _run_tasks(client, wid, {}) == ["start", ran, "join"]
    wf = client.get_workflow(wid)
    assert wf.state == "SUCCEEDED"
    # the skipped branch's output is absent: its member is left out of the mappings
    assert wf.output == {ran: ran, "joined": {"by": "join", "in": {ran: ran}}}
    steps = {s["key"]: s for s in client.request("GET", f"/v1/workflows/{wid}/steps")["data"]["steps"]}
    assert steps[skipped]["state"] == "SKIPPED" and steps[skipped]["skip_reason"] == "CONDITION_FALSE"
    assert "activation_id" not in steps[skipped]
    assert {k: s["state"] for k, s in steps.items() if k != skipped} == dict.fromkeys(
        ("start", ran, "join"), "SUCCEEDED"
    )
    detail = client.request("GET", f"/v1/workflows/{wid}/steps/{skipped}")["data"]
    assert detail["skipped"]["code"] == "CONDITION_FALSE"
    assert "$.input.amount" in detail["skipped"]["message"] and "completed_at" in detail
    events = _events(client, wid)
    skips = [e for e in events if e["type"] == "step.skipped"]
    assert [e["body"]["step_key"] for e in skips] == [skipped] and skips[0]["body"][
        "reason"
    ] == "CONDITION_FALSE"
    activated = [e["body"]["step_key"] for e in events if e["type"] == "step.activated"]
    assert activated.count("join") == 1 and skipped not in activated
    auditor = Client(wf_ns.url, _audit_token(wf_ns))
    ops = auditor.request("GET", f"/v1/workflows/{wid}/operations", params={"limit": "100"})["data"]["items"]
    skip_ops = [o for o in ops if o["action"] == "workflow.step.skipped"]
    assert len(skip_ops) == 1 and skip_ops[0]["actor_id"] == "system:engine"
    op = auditor.request("GET", f"/v1/workflows/{wid}/operations/{skip_ops[0]['id']}")["data"]
    assert op["after"]["step_key"] == skipped and op["after"]["code"] == "CONDITION_FALSE"


ABSENT_DOC = {
    "version": "1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 300,
    "steps": [
        {"key": "charge", "kind": "TASK", "queue": "q1"},
        # optional: only with a coupon; a comparison with an absent value is false
        {
            "key": "coupon",
            "kind": "TASK",
            "queue": "q1",
            "after": ["charge"],
            "condition": {"and": [{"exists": "$.input.coupon"}, {">": ["$.input.coupon.percent", 0]}]},
        },
        {
            "key": "thank",
            "kind": "TASK",
            "queue": "q1",
            "after": ["coupon"],
        },  # only follows the optional step
        {
            "key": "ship",
            "kind": "TASK",
            "queue": "q1",
            "after": ["charge", "coupon"],
            "condition": {"!=": ["$.steps.coupon.output.blocked", True]},  # absent: != is false too
        },
        {
            "key": "notify",
            "kind": "TASK",
            "queue": "q1",
            "after": ["charge", "coupon"],
            "condition": {"not": {"==": ["$.steps.coupon.output.blocked", True]}},
        },
    ],
}


def test_conditions_on_absent_values_and_a_step_after_a_skipped_one(wf_ns) -> None:  # noqa: F811
    client = wf_ns.client()
    did = _publish(client, ABSENT_DOC)
    wid = client.start_workflow(did, "1", {"amount": 1}).instance.id
    assert sorted(_run_tasks(client, wid, {})) == ["charge", "notify"]
    steps = {s["key"]: s for s in client.request("GET", f"/v1/workflows/{wid}/steps")["data"]["steps"]}
    assert client.get_workflow(wid).state == "SUCCEEDED"
    assert {k: (s["state"], s.get("skip_reason")) for k, s in steps.items()} == {
        "charge": ("SUCCEEDED", None),
        "coupon": ("SKIPPED", "CONDITION_FALSE"),
        "thank": ("SKIPPED", "DEPENDENCIES_SKIPPED"),
        "ship": ("SKIPPED", "CONDITION_FALSE"),
        "notify": ("SUCCEEDED", None),
    }
    # with the value present, the optional step and what follows it run
    wid = client.start_workflow(did, "1", {"coupon": {"percent": 10}}).instance.id
    assert sorted(_run_tasks(client, wid, {"coupon": {"blocked": False}})) == [
        "charge",
        "coupon",
        "notify",
        "ship",
        "thank",
    ]
    assert client.get_workflow(wid).state == "SUCCEEDED"


def test_a_bad_condition_is_a_400_with_its_field_paths(wf_ns) -> None:  # noqa: F811
    client = wf_ns.client()
    doc = {
        **BRANCH,
        "steps": [
            *BRANCH["steps"][:3],
            {
                "key": "join",
                "kind": "TASK",
                "queue": "q1",
                "after": ["manual"],
                "condition": {
                    "or": [
                        {"<": ["$.input.amount", [1, 2]]},
                        {"like": ["$.input.a", "x%"]},
                        {"exists": "$.steps.auto.output"},
                    ]
                },
            },
        ],
    }
    with pytest.raises(InvalidArgument) as info:
        _publish(client, doc)
    fields = {e["field"]: e["message"] for e in info.value.errors}
    assert "does not compare a literal list" in fields["steps[3].condition.or[0].<[1]"]
    assert "unknown operator" in fields["steps[3].condition.or[1].like"]
    assert "not a (transitive) dependency" in fields["steps[3].condition.or[2].exists"]
