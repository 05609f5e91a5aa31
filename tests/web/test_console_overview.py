"""The console's home (issue 47, point 6): a namespace's workflows by state and definition with links to
the filtered list, each definition's failure rate over the last hour and day, the oldest running, the
longest waiting and the open reviews; a credential limited to some queues sees only its workflows."""

from __future__ import annotations

import re

import pytest

from app.auth import ALL_SCOPES, Scope, create_credential
from app.db import transaction
from app.engine import summary
from tests.web.test_console import login
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ops, sql, unknown_outcome_job  # noqa: F401

ONE_TASK = {"steps": [{"key": "t", "kind": "TASK", "queue": "q1", "after": []}]}
SIGNAL = {
    "signals": [{"name": "go", "payload_version": "v1", "schema": {"type": "object"}}],
    "steps": [
        {
            "key": "w",
            "kind": "SIGNAL",
            "after": [],
            "signal": "go",
            "payload_version": "v1",
            "correlation": "$.input.k",
            "timeout_seconds": 300,
        }
    ],
}


@pytest.fixture
def scene(ops):  # noqa: F811
    """Definition ``pay`` (one TASK): 3 succeeded, 1 failed, 2 running (one of them an hour old, one in
    review); definition ``wait`` (one SIGNAL): 1 waiting."""
    pay, wait = ops.define(ONE_TASK), ops.define(SIGNAL)
    ids = {k: [] for k in ("ok", "failed", "running", "waiting")}
    for outcome in ("ok", "ok", "ok", "failed"):
        wid = ops.start(pay)
        [t] = ops.worker.claim_tasks(["q1"])
        if outcome == "ok":
            ops.worker.complete_task(t.id, t.epoch, {})
        else:
            ops.worker.fail_task(t.id, t.epoch, "card declined", retryable=False)
        ids[outcome].append(wid)
    for _ in range(2):
        ids["running"].append(ops.start(pay))
    sql(
        "UPDATE workflow_instances SET created_at = now() - interval '1 hour' WHERE id = :i",
        i=ids["running"][0],
    )
    unknown_outcome_job(ids["running"][1], "t")
    sql("UPDATE workflow_instances SET state = 'NEEDS_REVIEW' WHERE id = :i", i=ids["running"][1])
    ids["waiting"].append(ops.start(wait, {"k": "a"}))
    return pay, wait, ids


def _console(app, ns: str, scopes):
    with transaction() as conn:
        tok = create_credential(conn, namespace=ns, name="viewer", scopes=scopes).token
    c = app.test_client()
    login(c, tok)
    return c


def test_the_overview_is_home_and_says_what_runs_and_what_failed(app, ops, scene):  # noqa: F811
    pay, wait, ids = scene
    c = _console(app, ops.ns.name, sorted(ALL_SCOPES))
    home = c.get("/console/")
    assert home.status_code == 302 and home.headers["Location"].endswith("/console/overview")
    page = c.get("/console/overview").get_data(as_text=True)
    now = page.split('id="overview-now"')[1].split("</div>\n</section>")[0]
    counts = dict(re.findall(r'<span class="k">([^<]+)</span><span class="v"><a [^>]+>(\d+)</a>', now))
    assert counts == {"Running": "1", "Waiting": "1", "Cancelling": "0", "Needs review": "1"}
    table = page.split('id="overview-definitions"')[1].split("</table>")[0]
    pay_row = next(r for r in table.split("<tr>") if f"definition_id={pay}" in r)
    assert "1 (25.0%)" in pay_row  # 1 failed of 4 ended, in the hour and in the day
    assert f"/console/workflows?definition_id={pay}&amp;state=FAILED" in pay_row
    wait_row = next(r for r in table.split("<tr>") if f"definition_id={wait}" in r)
    assert "—" in wait_row  # nothing ended: no rate
    oldest = page.split('id="overview-oldest"')[1].split("</table>")[0]
    assert ids["running"][0][:8] in oldest
    assert ids["waiting"][0][:8] in page.split('id="overview-waiting"')[1].split("</table>")[0]
    assert ids["running"][1][:8] in page.split('id="overview-reviews"')[1].split("</table>")[0]


def test_a_queue_limited_credential_sees_only_its_workflows(app, ops, scene):  # noqa: F811
    pay, wait, _ = scene
    with transaction() as conn:
        ns_id = sql("SELECT id FROM namespaces WHERE name = :n", n=ops.ns.name)[0][0]
        mine = summary.namespace_summary(conn, ns_id, ("q1",))
        none = summary.namespace_summary(conn, ns_id, ("other",))
    assert {d["definition_id"] for d in mine["definitions"]} == {pay, wait}  # a SIGNAL step uses no queue
    assert none["definitions"] == [d for d in none["definitions"] if d["definition_id"] == wait]
    c = _console(app, ops.ns.name, [Scope.WORKFLOWS_READ])
    assert c.get("/console/overview").status_code == 200


def test_the_day_is_read_up_to_its_cap(ops, scene, monkeypatch):  # noqa: F811
    monkeypatch.setattr(summary, "RECENT_CAP", 2)
    with transaction() as conn:
        ns_id = sql("SELECT id FROM namespaces WHERE name = :n", n=ops.ns.name)[0][0]
        out = summary.namespace_summary(conn, ns_id)
    assert out["recent_capped"] and sum(sum(d["day"].values()) for d in out["definitions"]) == 2
