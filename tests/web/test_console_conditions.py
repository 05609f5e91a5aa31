"""The console shows a skipped step with its reason (workflow page, graph, step page) and a fan-out's
progress (issue 44), through the Flask test client on a live engine."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.auth import ALL_SCOPES, create_credential
from app.db import transaction
from tests.web.test_console import login
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ops  # noqa: F401

DOC = {
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
            "key": "lines",
            "kind": "TASK",
            "queue": "fan",
            "after": ["start"],
            "for_each": {"items": "$.input.lines", "max_parallel": 2},
        },
    ]
}


@pytest.fixture
def console(app, ops):  # noqa: F811
    with transaction() as conn:
        tok = create_credential(conn, namespace=ops.ns.name, name="console", scopes=sorted(ALL_SCOPES)).token
    c = app.test_client()
    login(c, tok)
    return c


def test_skipped_steps_and_fan_out_progress_are_shown(console, ops) -> None:  # noqa: F811
    wid = ops.start(ops.define(DOC), {"amount": 5, "lines": [1, 2, 3]})
    [task] = ops.client.claim_tasks(["q1"])
    ops.client.complete_task(task.id, task.epoch, {})
    [element] = ops.client.claim_tasks(["fan"])
    ops.client.complete_task(element.id, element.epoch, {"ok": 1})
    page = console.get(f"/console/workflows/{wid}").data.decode()
    assert "skipped: CONDITION_FALSE" in page
    assert "manual (TASK): SKIPPED (CONDITION_FALSE: condition is false: $.input.amount &gt; 1000)" in page
    assert "1/3 elements done, 2 running, 0 failed" in page
    assert 'class="skipped"' in page and "skipped: CONDITION_FALSE</text>" in page  # the timeline's row
    step = console.get(f"/console/workflows/{wid}/steps/manual").data.decode()
    assert "<dt>Skipped</dt><dd>CONDITION_FALSE: condition is false: $.input.amount &gt; 1000</dd>" in step
    assert "Last error" not in step
    fan = console.get(f"/console/workflows/{wid}/steps/lines").data.decode()
    assert "3 element(s): 0 pending, 2 running, 1 done, 0 failed (at most 2 at once)" in fan


def test_a_child_fan_outs_step_page_links_each_elements_child(console, ops) -> None:  # noqa: F811
    from app.db import get_engine
    from tests.engine.helpers import run_jobs

    child = ops.define({"steps": [{"key": "work", "kind": "TASK", "queue": "kid.page"}]})
    parent = ops.define(
        {
            "steps": [
                {
                    "key": "pages",
                    "kind": "SUBWORKFLOW",
                    "definition_id": child,
                    "version": "v1",
                    "for_each": {"items": "$.input.pages", "max_parallel": 2},
                }
            ]
        }
    )
    wid = ops.start(parent, {"pages": ["a", "b", "c"]})
    run_jobs(get_engine())  # the spawn starts the first two children
    with transaction() as conn:
        kids = (
            conn.execute(
                text(
                    "SELECT id FROM workflow_instances WHERE parent_instance_id = :i ORDER BY parent_element"
                ),
                {"i": wid},
            )
            .scalars()
            .all()
        )
    assert len(kids) == 2
    page = console.get(f"/console/workflows/{wid}").data.decode()
    assert "0/3 elements done, 2 running, 0 failed" in page
    step = console.get(f"/console/workflows/{wid}/steps/pages").data.decode()
    assert "3 element(s): 1 pending, 2 running, 0 done, 0 failed (at most 2 at once)" in step
    assert "Child workflow</th>" in step
    for kid in kids:
        assert f'href="/console/workflows/{kid}"' in step
