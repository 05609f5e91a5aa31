"""Console actions of issue 47 through the Flask test client on the live engine: rerun from a FAILED
workflow's page, a batch cancel previewed then applied, the search box by an 8-character id prefix and a
business-key prefix in another case, the failure groups page, and a failed attempt's stack trace."""

from __future__ import annotations

import re

import pytest

from app.auth import ALL_SCOPES, create_credential
from app.db import transaction
from ledgerflow.worker import TaskWorker
from tests.web.test_console import _csrf, login
from tests.web.test_workflow_ops import CHAIN, _run_until_c_fails
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import Ops, ops  # noqa: F401

TIMER = {"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 3600}]}


@pytest.fixture
def console(app, ops):  # noqa: F811
    with transaction() as conn:
        tok = create_credential(conn, namespace=ops.ns.name, name="console", scopes=sorted(ALL_SCOPES)).token
    c = app.test_client()
    login(c, tok)
    return c


def test_rerun_from_the_workflow_page(console, ops: Ops):  # noqa: F811
    wid = ops.start(ops.define(CHAIN))
    _run_until_c_fails(ops, wid)
    page = console.get(f"/console/workflows/{wid}")
    assert page.status_code == 200 and b'aria-label="Rerun"' in page.data
    form = {"from_step": "c", "reason": "fixed the bug", "csrf_token": _csrf(page.data)}
    refused = console.post(f"/console/workflows/{wid}/rerun", data=form)  # no confirmation
    assert refused.status_code == 400
    r = console.post(f"/console/workflows/{wid}/rerun", data={**form, "confirm": "yes"})
    assert r.status_code == 302
    new = r.headers["Location"].rsplit("/", 1)[-1]
    assert new != wid
    page = console.get(f"/console/workflows/{new}").data.decode()
    assert 'id="rerun-of"' in page and wid[:8] in page and "fixed the bug" in page
    assert page.count('class="copied"') == 2  # a and b were copied
    old = console.get(f"/console/workflows/{wid}").data.decode()
    assert 'id="reruns"' in old and new in old
    step = console.get(f"/console/workflows/{new}/steps/a").data.decode()
    assert "its output was copied from workflow" in step


def test_batch_cancel_preview_then_apply_and_search(console, ops: Ops):  # noqa: F811
    def_id = ops.define(TIMER)
    ids = [
        ops.client.start_workflow(def_id, "v1", {}, business_key=f"Invoice-{i}").instance.id for i in range(4)
    ]
    page = console.get(f"/console/workflows?definition_id={def_id}")
    assert page.status_code == 200 and b'name="ids"' in page.data
    base = {
        "action": "cancel",
        "scope": "all",
        "filter_qs": f"definition_id={def_id}",
        "reason": "bad deploy",
    }
    preview = console.post(
        "/console/workflows/batch", data={**base, "do": "preview", "csrf_token": _csrf(page.data)}
    )
    assert preview.status_code == 200
    text = preview.data.decode()
    assert "4 matched" in text and "Nothing has changed yet" in text
    assert all(ops.client.get_workflow(i).state == "WAITING" for i in ids)
    applied = console.post(
        "/console/workflows/batch",
        data={**base, "do": "apply", "confirm": "yes", "csrf_token": _csrf(preview.data)},
    )
    assert applied.status_code == 302
    assert {ops.client.get_workflow(i).state for i in ids} <= {"CANCELLED", "CANCELLING"}
    # the search box: an 8-character id prefix opens the workflow, a key prefix in another case lists them
    hit = console.get(f"/console/search?q={ids[2][:8]}")
    assert hit.status_code == 302 and hit.headers["Location"].endswith(f"/console/workflows/{ids[2]}")
    listed = console.get("/console/search?q=invoice-").data.decode()
    assert all(i in listed for i in ids)


def test_failure_groups_page_and_a_failed_attempts_trace(console, ops: Ops):  # noqa: F811
    def_id = ops.define({"steps": [{"key": "pay", "kind": "TASK", "queue": "q1"}]})
    wids = [ops.start(def_id) for _ in range(3)]

    def pay(task):
        raise RuntimeError(f"card declined for order {task.workflow_id[:12]}")

    TaskWorker(ops.worker, functions={"q1": pay}, wait_seconds=0, concurrency=3).run_once(0)
    assert all(ops.client.get_workflow(w).state == "FAILED" for w in wids)  # no retry policy: one attempt
    groups = console.get("/console/workflows/failure-groups").data.decode()
    assert "card declined for order" in groups and "Rerun this group" in groups
    assert re.search(r'class="num"><a href="[^"]+">3</a>', groups)
    step = console.get(f"/console/workflows/{wids[0]}/steps/pay").data.decode()
    assert "Stack trace: RuntimeError" in step and "Traceback (most recent call last)" in step
    page = console.get(f"/console/workflows/{wids[0]}").data.decode()
    assert "Stack trace: RuntimeError" in page  # the failure banner shows the failing attempt's trace
