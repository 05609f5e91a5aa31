"""Issue 47, point 7 (and the links and names of point 8): the workflow page's event history reads without
unfolding anything (step, task, error, the exact UTC time as text, the time since the previous event);
JSON blocks fold and carry a copy button served by the console's own script (CSP: no inline script);
dead deliveries, rule executions, schedules and rules link what they name, by name."""

from __future__ import annotations

import html
import re

import pytest

from app.db import transaction
from app.integrations import subscriptions
from tests.console_scenario import Scenario, build, sql
from tests.web.test_console import login


@pytest.fixture(scope="module")
def scenario(app) -> Scenario:
    return build()


@pytest.fixture(scope="module")
def admin(app, scenario: Scenario):
    c = app.test_client()
    assert login(c, scenario.tokens["admin"]).status_code == 302
    return c


def _page(client, path: str) -> str:
    r = client.get(path)
    assert r.status_code == 200, (path, r.status_code)
    return html.unescape(r.get_data(as_text=True))


def _rows(page: str, table_id: str) -> list[str]:
    body = page.split(f'id="{table_id}"')[1].split("</table>")[0]
    return re.findall(r"<tr[ >].*?</tr>", body, flags=re.S)[1:]  # without the header row


def test_event_rows_show_step_task_error_and_times_as_text(admin, scenario):
    wid = scenario.wf["failed"]
    page = _page(admin, f"/console/workflows/{wid}")
    rows = _rows(page, "event-history")
    types = [re.search(r'data-label="Event">([\w.]+)', r).group(1) for r in rows]
    assert types[0] == "workflow.started" and "task.failed" in types and types[-1] == "workflow.failed"
    failed = rows[types.index("task.failed")]
    task_id = sql("SELECT id FROM workflow_tasks WHERE instance_id = :i", i=wid)[0][0]
    assert f'/console/workflows/{wid}/steps/score#attempts">score</a>' in failed
    assert task_id[:8] in failed  # the task, on the row
    assert "score service answered 503 twice" in failed.split('data-label="Error"')[1].split("</td>")[0]
    assert "score service answered 503 twice" in rows[-1]  # the workflow's own failure on its event
    # the exact UTC time is text of the cell (a phone has no hover), the date on the first row at least
    first_at = rows[0].split('data-label="At (UTC)"')[1].split("</td>")[0]
    assert re.search(r">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}</time>", first_at), first_at
    assert "title=" not in first_at
    # the time since the previous event: none on the first row, "+…" on every later one
    gaps = [r.split('data-label="After previous">')[1].split("</td>")[0] for r in rows]
    assert gaps[0] == "—" and all(
        re.fullmatch(r"\+[\d.]+ (ms|s|min \d+ s|h \d+ min)", g) for g in gaps[1:]
    ), gaps
    # the body is still there, folded
    assert '<details class="fold json"><summary>Body' in failed


def test_audit_entries_show_their_utc_time_as_text(admin, scenario):
    page = _page(admin, f"/console/workflows/{scenario.wf['review']}")
    audit = page.split('class="timeline-list"')[1].split("</ol>")[0]
    assert (
        len(re.findall(r"<time datetime=\"[^\"]+Z\">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}</time>", audit))
        >= 20
    )


def test_json_blocks_fold_and_carry_a_copy_button_served_by_the_console_script(admin, app, scenario):
    r = admin.get(f"/console/workflows/{scenario.wf['failed']}")
    page = r.get_data(as_text=True)
    inp = page.split('aria-label="Input"')[1].split("</section>")[0]
    # a short block starts open, a long one folded; both can be folded and both have the button
    assert '<details class="fold json" open><summary>Input <small>(3 lines)</small></summary>' in inp
    assert '<button type="button" class="copy" data-copy hidden aria-label="Copy Input">Copy</button>' in inp
    assert "<script>" not in page and "script-src 'self'" in r.headers["Content-Security-Policy"]
    js = admin.get("/console/static/console.js").get_data(as_text=True)
    assert "button[data-copy]" in js and "clipboard" in js


# --------------------------------------------------------------------------- point 8: links and names
def test_a_dead_delivery_links_its_subscription_and_the_events_workflow(admin, scenario):
    wid = scenario.wf["failed"]
    sub = _page(admin, f"/console/integrations/subscriptions/{scenario.subscription_id}")
    row = next(r for r in re.findall(r"<tr>.*?</tr>", sub, flags=re.S) if "HTTP 502" in r)
    assert f'href="/console/workflows/{wid}"' in row and "of workflow" in row
    # the delivery's ledger job, dead: its page names the delivery's subscription and workflow
    with transaction() as conn:
        job_id = subscriptions.enqueue_delivery(conn, scenario.delivery_id, f"test:{wid}", delay_ms=3_600_000)
    sql(
        "UPDATE workflow_jobs SET status = 'dead', finished_at = now(), error_code = 'HTTP_502', "
        "last_error = 'HTTP 502 from the receiver' WHERE id = :j",
        j=job_id,
    )
    job = _page(admin, f"/console/jobs/{job_id}")
    fact = job.split('id="delivery"')[1].split("</dd>")[0]
    assert f'href="/console/integrations/subscriptions/{scenario.subscription_id}"' in fact
    assert f'href="/console/workflows/{wid}"' in fact and "workflow.failed" in fact
    assert "s3cret" not in fact  # the endpoint as the subscription pages show it: its query redacted


def test_rule_executions_link_the_started_workflow_and_rules_name_definitions(admin, scenario):
    wid, risk = scenario.wf["failed"], scenario.defs["risk"]
    rule = _page(admin, f"/console/integrations/rules/{scenario.rule_id}")
    done = next(r for r in re.findall(r"<tr>.*?</tr>", rule, flags=re.S) if "succeeded" in r)
    assert f'Started workflow <a href="/console/workflows/{wid}">' in done and "workflow_id" not in done
    facts = rule.split('class="facts"')[1].split("</dl>")[0]
    assert f'<a class="def" href="/console/definitions/{risk}">risk-check</a>' in facts
    assert f'<a class="def" href="/console/definitions/{risk}/versions/v1">risk-check v1</a>' in facts
    assert risk[:8] not in re.sub(r'href="[^"]+"', "", facts)  # a name, not the id
    listing = _page(admin, "/console/integrations")
    assert f'<a class="def" href="/console/definitions/{risk}/versions/v1">risk-check v1</a>' in listing


def test_schedules_name_the_definition_they_start(admin, scenario):
    order = scenario.defs["order"]
    listing = _page(admin, "/console/schedules")
    row = next(r for r in re.findall(r"<tr>.*?</tr>", listing, flags=re.S) if "nightly-orders" in r)
    assert f'<a class="def" href="/console/definitions/{order}/versions/v1">order-fulfilment v1</a>' in row
    one = _page(admin, f"/console/schedules/{scenario.schedule_id}")
    starts = one.split("<dt>Starts</dt>")[1].split("</dd>")[0]
    assert f'<a class="def" href="/console/definitions/{order}">order-fulfilment</a>' in starts
    assert order[:8] not in re.sub(r'href="[^"]+"', "", starts)


def test_a_later_page_of_events_measures_its_first_row_from_the_page_before(admin, scenario, monkeypatch):
    monkeypatch.setattr("web.console.workflows.EVENTS_PAGE", 3)
    wid = scenario.wf["failed"]
    first = _page(admin, f"/console/workflows/{wid}")
    assert len(_rows(first, "event-history")) == 3
    newer = re.search(r'href="(\?events=[^"#]+)#events">Newer events', first).group(1)
    rows = _rows(_page(admin, f"/console/workflows/{wid}{newer}"), "event-history")
    assert re.search(r'data-label="#" class="num">4<', rows[0])
    gap = rows[0].split('data-label="After previous">')[1].split("</td>")[0]
    assert re.fullmatch(r"\+[\d.]+ (ms|s|min \d+ s|h \d+ min)", gap), gap
    assert re.search(
        r">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}</time>", rows[0]
    )  # the page's first row has its date
