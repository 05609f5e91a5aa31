"""The console in headless Chromium against the Procfile's ``web`` (gunicorn, 2 gevent workers, no
LEDGERFLOW_SECRET_KEY set): 20 logins in a row; logout kills a copied cookie; a session that expires
while the status panel refreshes lands on the login page; the workflow page of a running, a failed, a
compensated and a NEEDS_REVIEW workflow; the forms (errors in place, input kept); search; a platform
operator crossing namespaces; live refresh pausing while a form is filled; axe-core at 1280 and 390 px
on every page with screenshots of each (``make screenshots`` writes them to docs/console/; that test
runs first, so the screenshots show the scenario before the other tests act on it).

Waits are for conditions with generous deadlines (the machine may be busy); nothing asserts a duration."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from app.auth import Scope, create_credential
from app.db import transaction
from tests.browser.conftest import PHONE, WIDE, _children, axe_violations, login, overflow
from tests.console_scenario import Scenario, pages, sql

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(scope="module")
def admin(browser: Browser, live_url: str, scenario: Scenario) -> Iterator[BrowserContext]:
    ctx = login(browser, live_url, scenario.tokens["admin"])
    yield ctx
    ctx.close()


def _credential(scopes: list[str], namespace: str, platform: bool = False) -> tuple[str, str]:
    with transaction() as conn:
        c = create_credential(
            conn, namespace=namespace, name="b-" + uuid.uuid4().hex[:8], scopes=scopes, platform=platform
        )
    return c.token, c.credential_id


def _check(page: Page, name: str, shots: Path | None, problems: list[str], phone: bool) -> None:
    found = axe_violations(page)
    problems += [f"{name} ({'390' if phone else '1280'} px): {v}" for v in found]
    if phone and overflow(page):
        problems.append(f"{name} (390 px): {overflow(page)} px wider than the screen")
    if shots is not None:
        page.screenshot(path=str(shots / f"{name}{'-phone' if phone else ''}.png"), full_page=True)


def test_axe_and_screenshots_of_every_page_at_1280_and_390(browser, live_url, scenario, shots):
    """Screenshots only when asked for (``make screenshots``): they cost more than the checks."""
    problems: list[str] = []
    errors: list[str] = []
    shots = shots if os.environ.get("LEDGERFLOW_SCREENSHOTS") else None
    anonymous = browser.new_context(viewport=WIDE)
    page = anonymous.new_page()
    page.goto(live_url + "/console/login")
    _check(page, "login", shots, problems, phone=False)
    anonymous.close()
    for viewport, phone in ((WIDE, False), (PHONE, True)):
        ctx = login(browser, live_url, scenario.tokens["admin"], viewport)
        page = ctx.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        for name, path in pages(scenario):
            page.goto(live_url + path)
            expect(page.locator("h1")).to_have_count(1)
            _check(page, name, shots, problems, phone)
        ctx.close()
    dark = login(browser, live_url, scenario.tokens["admin"], WIDE, color_scheme="dark")
    page = dark.new_page()
    for name, path in (
        ("workflow-failed-dark", f"/console/workflows/{scenario.wf['failed']}"),
        ("jobs-dark", "/console/jobs"),
    ):
        page.goto(live_url + path)
        _check(page, name, shots, problems, phone=False)
    dark.close()
    assert problems == []
    assert errors == []  # no CSP violation, no script error


def test_twenty_logins_in_a_row_all_succeed(browser, live_url, scenario, procfile_web):
    assert len(_children(procfile_web["pid"])) == 2  # the Procfile's two workers serve
    for _ in range(20):  # a new browser context each time: its own connections, spread over the workers
        ctx = login(browser, live_url, scenario.tokens["monitor"], then="/console/jobs/clusters", keep=True)
        expect(
            ctx.pages[0].get_by_role("heading", name="Failure clusters")
        ).to_be_visible()  # a second request
        ctx.close()
    for _ in range(20):  # and without keep-alive: every request on a new connection
        with httpx.Client(base_url=live_url, headers={"Connection": "close"}) as c:
            form = c.get("/console/login")
            token = CSRF_RE.search(form.text).group(1)
            r = c.post("/console/login", data={"token": scenario.tokens["monitor"], "csrf_token": token})
            assert r.status_code == 302 and r.headers["Location"] == "/console/"
            assert c.get("/console/jobs/clusters").status_code == 200


def test_logout_kills_a_captured_cookie(browser, live_url, scenario):
    ctx = login(browser, live_url, scenario.tokens["monitor"])
    captured = ctx.cookies()
    page = ctx.new_page()
    page.goto(live_url + "/console/jobs/clusters")
    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    ctx.close()
    thief = browser.new_context(viewport=WIDE)
    thief.add_cookies(captured)
    stolen = thief.new_page()
    stolen.goto(live_url + "/console/jobs/clusters")
    expect(stolen.get_by_role("heading", name="Log in")).to_be_visible()
    assert "/console/login" in stolen.url
    thief.close()


def test_a_session_that_expires_during_the_panel_refresh_lands_on_the_login_page(browser, live_url, scenario):
    token, cred = _credential([Scope.ENGINE_MONITOR], scenario.ns, platform=True)
    ctx = login(browser, live_url, token)
    page = ctx.new_page()
    page.goto(live_url + "/console/jobs?status=dead")
    with page.expect_response(lambda r: "/console/jobs/status-panel" in r.url and r.ok, timeout=60_000):
        pass  # htmx (vendored, under the CSP) refreshes the panel by itself
    sql(
        "UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE credential_id = :c",
        c=cred,
    )
    page.wait_for_url(re.compile(r"/console/login\?next="), timeout=60_000)
    expect(page.get_by_role("heading", name="Log in")).to_be_visible()
    assert page.locator("h1").count() == 1 and page.locator("header.top").count() == 1
    assert "status%3Ddead" in page.url or "status=dead" in page.url  # back to where it was after login
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Job ledger")).to_be_visible()
    assert "status=dead" in page.url
    ctx.close()


def test_the_workflow_page_answers_what_happened_and_why(admin, live_url, scenario):
    page = admin.new_page()
    wf = scenario.wf
    page.goto(live_url + f"/console/workflows/{wf['failed']}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("risk-check")
    why = page.get_by_role("region", name="Why")
    expect(why).to_contain_text("score service answered 503 twice")
    expect(why.get_by_role("link", name="score")).to_be_visible()
    expect(page.get_by_role("region", name="Input")).to_contain_text('"customer": "C-7"')
    expect(page.get_by_role("img", name="Timeline of the workflow")).to_be_visible()
    expect(page.get_by_role("img", name="Graph of the definition")).to_be_visible()
    events = page.locator("#events + table details").first
    expect(events).not_to_have_attribute("open", "")  # payloads folded
    page.goto(live_url + f"/console/workflows/{wf['running']}")
    steps = page.locator("#steps tbody tr")
    expect(steps).to_have_count(3)
    assert [steps.nth(i).locator("td").first.inner_text().split()[0] for i in range(3)] == [
        "approve",
        "cool_off",
        "ship",
    ]
    expect(steps.nth(1)).to_contain_text("fires in")
    assert "UTC" in steps.nth(1).locator("time").first.get_attribute("title")
    page.goto(live_url + f"/console/workflows/{wf['compensated']}")
    expect(page.get_by_role("region", name="Why")).to_contain_text("card declined")
    expect(page.locator(".facts")).to_contain_text("DONE")
    page.goto(live_url + f"/console/workflows/{wf['review']}")
    expect(page.get_by_role("region", name="Why")).to_contain_text("Needs review")
    expect(page.locator(".timeline-list")).to_contain_text("checked with the carrier, call 25")
    expect(page.locator(".timeline-list")).to_contain_text("ticket:124")
    page.get_by_role("link", name="Older entries →").click()
    expect(page.locator(".timeline-list")).to_contain_text("freeze while the receipt is checked")
    expect(page.get_by_role("form", name="Resolve a step in review")).to_be_visible()
    page.close()


def test_forms_show_errors_in_place_and_keep_the_input(admin, live_url, scenario):
    page = admin.new_page()
    page.goto(live_url + f"/console/workflows/start?definition_id={scenario.defs['order']}&version=v1")
    form = page.get_by_role("form", name="Start a workflow")
    form.get_by_label("Input JSON").fill('{"order_id": 7}')
    form.get_by_label("I confirm").check()
    form.get_by_role("button", name="Start").click()
    expect(form.locator(".field-error").first).to_be_visible()
    expect(form.get_by_label("Input JSON")).to_have_value('{"order_id": 7}')
    expect(page.locator("h1")).to_have_count(1)
    form.get_by_label("Input JSON").fill('{"order_id": "W-1", "amount": 5}')
    form.get_by_label("I confirm").check()
    form.get_by_role("button", name="Start").click()
    expect(page.locator(".flash")).to_contain_text("started")
    expect(page.get_by_role("heading", level=1)).to_contain_text("order-fulfilment")
    # a job retried from its page, a batch without a selection refused in place with the filter kept
    page.goto(live_url + f"/console/jobs/{scenario.dead_job}")
    retry = page.get_by_role("form", name="Retry")
    retry.get_by_label("Reason").fill("receiver fixed the route")
    retry.get_by_label("I confirm").check()
    retry.get_by_role("button", name="Retry job").click()
    expect(page.locator(".flash")).to_contain_text(f"Job {scenario.dead_job} retried")
    page.goto(live_url + "/console/jobs?status=dead,failed")
    batch = page.locator("fieldset.actions")
    batch.get_by_label("Reason").fill("noise")
    batch.get_by_label("I confirm").check()
    batch.get_by_role("button", name="Apply").click()
    expect(page.locator(".field-error")).to_contain_text("select at least one job")
    expect(page.get_by_label("Status", exact=True)).to_have_value("dead,failed")
    # a human task claimed, a malformed output refused in place, then completed: the workflow moves on
    page.goto(live_url + "/console/tasks")
    page.get_by_role("button", name="Claim next on approvals").click()
    expect(page.locator(".flash")).to_contain_text("Claimed task")
    done = page.get_by_role("form", name=re.compile("Complete task"))
    done.get_by_label("Output JSON").fill('{"approved": tru')
    done.get_by_role("button", name="Complete").click()
    expect(done.locator(".field-error")).to_contain_text("not valid JSON")
    expect(done.get_by_label("Output JSON")).to_have_value('{"approved": tru')
    done.get_by_label("Output JSON").fill('{"approved": true, "amount": 80.50}')
    done.get_by_role("button", name="Complete").click()
    expect(page.locator(".flash")).to_contain_text("completed")
    page.goto(live_url + f"/console/workflows/{scenario.wf['awaiting']}")
    expect(page.locator("#steps tbody tr").nth(1)).to_contain_text("fires in")
    # a signal to the waiting step
    page.goto(live_url + f"/console/workflows/{scenario.wf['signal']}/signal")
    sig = page.get_by_role("form", name="Send a signal")
    expect(sig.get_by_label("Correlation key")).to_have_value("B-2")
    sig.get_by_label("Payload JSON").fill('{"received": true}')
    sig.get_by_label("Reason", exact=True).fill("warehouse confirmed")
    sig.get_by_label("I confirm").check()
    sig.get_by_role("button", name="Send").click()
    expect(page.locator(".flash")).to_contain_text("accepted: CONSUMED")
    # a schedule paused with a reason; a subscription's secret rotated and shown once
    page.goto(live_url + f"/console/schedules/{scenario.schedule_id}")
    pause = page.get_by_role("form", name="Pause")
    pause.get_by_label("Reason").fill("warehouse closed for inventory")
    pause.get_by_label("I confirm").check()
    pause.get_by_role("button", name="Pause").click()
    expect(page.locator(".flash")).to_contain_text("Paused")
    expect(page.get_by_role("heading", level=1)).to_contain_text("paused")
    page.goto(live_url + f"/console/integrations/subscriptions/{scenario.subscription_id}")
    expect(page.locator("table").last).to_contain_text("HTTP 502")
    rotate = page.get_by_role("form", name="Rotate the secret")
    rotate.get_by_label("I confirm").check()
    rotate.get_by_role("button", name="Rotate").click()
    expect(page.get_by_role("status", name="New secret")).to_contain_text("whsec_")
    page.goto(live_url + f"/console/integrations/subscriptions/{scenario.subscription_id}")
    expect(page.get_by_role("status", name="New secret")).to_have_count(0)  # shown once
    page.close()


def test_control_needs_a_reason_a_confirmation_and_a_fresh_revision(admin, live_url, scenario):
    wid = scenario.wf["running"]
    page, stale = admin.new_page(), admin.new_page()
    page.goto(live_url + f"/console/workflows/{wid}")
    stale.goto(live_url + f"/console/workflows/{wid}")  # loaded now, submitted after the pause below
    control = page.get_by_role("form", name="Control")
    control.get_by_label("Operation").select_option("CANCEL")
    control.get_by_role("button", name="Apply").click()  # the browser refuses: reason and box are required
    expect(page.locator(".flash")).to_have_count(0)
    control.get_by_label("Operation").select_option("PAUSE")
    control.get_by_label("Reason").fill("maintenance window")
    control.get_by_label("I confirm").check()
    control.get_by_role("button", name="Apply").click()
    expect(page.locator(".flash")).to_contain_text("Pause applied")
    expect(page.locator("#wf-paused")).to_be_visible()
    old = stale.get_by_role("form", name="Control")
    old.get_by_label("Operation").select_option("CANCEL")
    old.get_by_label("Reason").fill("clicked on an old page")
    old.get_by_label("I confirm").check()
    with stale.expect_response(lambda r: r.url.endswith("/control")) as answer:
        old.get_by_role("button", name="Apply").click()
    assert answer.value.status == 409  # the conflict, in place, on the page as it is now
    expect(stale.get_by_role("form", name="Control").locator(".form-error")).to_be_visible()
    expect(stale.get_by_role("form", name="Control").get_by_label("Reason")).to_have_value(
        "clicked on an old page"
    )
    assert sql("SELECT state FROM workflow_instances WHERE id = :i", i=wid)[0][0] == "WAITING"
    control = page.get_by_role("form", name="Control")
    control.get_by_label("Operation").select_option("RESUME")
    control.get_by_label("Reason").fill("window over")
    control.get_by_label("I confirm").check()
    control.get_by_role("button", name="Apply").click()
    expect(page.locator(".flash")).to_contain_text("Resume applied")
    expect(page.locator("#wf-paused")).to_have_count(0)
    page.close()
    stale.close()


def test_search_by_id_from_the_header(admin, live_url, scenario):
    page = admin.new_page()
    page.goto(live_url + "/console/schedules")
    for term, heading in (
        (str(scenario.dead_job), f"Job {scenario.dead_job}"),
        (scenario.wf["compensated"], "payment"),
        (scenario.business_key, "order-fulfilment"),
        (scenario.trace_id, "Trace chain"),
    ):
        box = page.get_by_role("searchbox", name="Search by job id, workflow id, business key or trace id")
        box.fill(term)
        box.press("Enter")
        expect(page.get_by_role("heading", level=1)).to_contain_text(heading)
    page.close()


def test_a_platform_operator_crosses_namespaces_without_a_404(admin, live_url, scenario):
    page = admin.new_page()
    responses: list[int] = []
    page.on("response", lambda r: responses.append(r.status) if "/console/" in r.url else None)
    page.goto(live_url + f"/console/jobs?instance_id={scenario.wf['other']}")
    row = page.locator("tbody tr").first
    expect(row).to_contain_text(scenario.other_ns)  # the namespace column
    row.locator(f'a[href$="/console/workflows/{scenario.wf["other"]}"]').click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("other-tenant-flow")
    expect(page.get_by_text("actions on it need a credential of that namespace")).to_be_visible()
    page.goto(live_url + "/console/tasks")
    page.get_by_label("Namespace (platform operator)").select_option(scenario.other_ns)
    page.get_by_role("button", name="Switch").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(scenario.other_ns)
    expect(page.locator("tbody")).to_contain_text("b-queue")
    page.goto(live_url + f"/console/workflows?ns={scenario.other_ns}")
    page.locator("tbody a").first.click()
    expect(page.get_by_role("heading", level=1)).to_be_visible()
    assert 404 not in responses
    page.close()


def test_live_refresh_pauses_while_a_form_is_filled(admin, live_url, scenario):
    page = admin.new_page()
    page.goto(live_url + "/console/tasks")
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url) if r.headers.get("hx-request") == "true" else None)
    with page.expect_request(lambda r: r.headers.get("hx-request") == "true", timeout=60_000):
        pass  # the task list refreshes itself
    expect(page.locator("#tasks-live")).to_be_visible()
    page.get_by_label("Namespace (platform operator)").focus()  # the operator is choosing something
    seen.clear()
    page.wait_for_timeout(12_000)  # more than two refresh periods
    assert [u for u in seen if "/console/tasks" in u] == []
    page.close()


def test_skipped_steps_and_fan_out_progress_at_1280_and_390(browser, live_url, scenario):
    """A branch not taken says why on the workflow page (table, timeline) and its step page; a fan-out
    shows its progress; both widths (the axe and overflow checks of every page cover these pages too)."""
    wid = scenario.wf["branched"]
    for viewport in (WIDE, PHONE):
        ctx = login(browser, live_url, scenario.tokens["admin"], viewport)
        page = ctx.new_page()
        page.goto(live_url + f"/console/workflows/{wid}")
        skipped = page.locator("#steps tbody tr", has_text="manual_approval")
        expect(skipped).to_contain_text("SKIPPED")
        expect(skipped).to_contain_text("skipped: CONDITION_FALSE")
        expect(page.locator("#steps tbody tr", has_text="reserve_lines")).to_contain_text(
            "1/3 elements done, 2 running, 0 failed"
        )
        expect(page.locator("svg.timeline text.skipped")).to_contain_text("skipped: CONDITION_FALSE")
        page.goto(live_url + f"/console/workflows/{wid}/steps/manual_approval")
        expect(page.locator(".facts")).to_contain_text(
            "CONDITION_FALSE: condition is false: $.input.amount > 1000"
        )
        page.goto(live_url + f"/console/workflows/{wid}/steps/reserve_lines")
        expect(page.locator(".facts")).to_contain_text("3 element(s): 0 pending, 2 running, 1 done, 0 failed")
        expect(page.locator("#elements + table tbody tr")).to_have_count(3)  # each element, with its task
        ctx.close()


def test_event_history_reads_on_a_phone_and_json_blocks_copy(browser, live_url, scenario):
    """Issue 47, point 7: on a 390 px screen (no hover) an event row shows its step, error and exact UTC
    time as text; a JSON block folds and its copy button (the console's own script, under the CSP) puts
    the block's text on the clipboard."""
    ctx = login(
        browser,
        live_url,
        scenario.tokens["admin"],
        PHONE,
        permissions=["clipboard-read", "clipboard-write"],
    )
    page = ctx.new_page()
    page.goto(live_url + f"/console/workflows/{scenario.wf['failed']}")
    row = page.locator("#event-history tbody tr", has_text="task.failed")
    expect(row.locator('td[data-label="Step"]')).to_have_text("score")
    expect(row.locator('td[data-label="Error"]')).to_contain_text("score service answered 503 twice")
    at = row.locator('td[data-label="At (UTC)"] time')
    expect(at).to_be_visible()
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.\d{3}|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}", at.inner_text())
    expect(row.locator('td[data-label="After previous"]')).to_contain_text("+")
    block = page.get_by_role("region", name="Input").locator("details.json")
    expect(block).to_have_attribute("open", "")
    copy = block.get_by_role("button", name="Copy Input")
    expect(copy).to_be_visible()  # shown by console.js
    copy.click()
    expect(copy).to_have_text("Copied")
    assert '"customer": "C-7"' in page.evaluate("navigator.clipboard.readText()")
    block.locator("summary").click()
    expect(block).not_to_have_attribute("open", "")
    ctx.close()


def test_a_fold_the_operator_closed_stays_closed_when_the_live_page_refreshes(admin, live_url, scenario):
    page = admin.new_page()
    page.goto(live_url + f"/console/workflows/{scenario.wf['running']}")
    block = page.get_by_role("region", name="Input").locator("details.json")
    expect(block).to_have_attribute("open", "")
    block.locator("summary").click()
    expect(block).not_to_have_attribute("open", "")
    for _ in range(2):  # two refreshes of the live region (htmx, every few seconds)
        with page.expect_response(
            lambda r: (
                f"/console/workflows/{scenario.wf['running']}" in r.url
                and r.request.headers.get("hx-request") == "true"
            ),
            timeout=60_000,
        ):
            pass
    page.wait_for_function("document.getElementById('wf-live') !== null")
    expect(page.get_by_role("region", name="Input").locator("details.json")).not_to_have_attribute("open", "")
    page.get_by_role("region", name="Input").locator("summary").click()  # the swapped-in block has its button
    expect(page.get_by_role("region", name="Input").get_by_role("button", name="Copy Input")).to_be_visible()
    page.close()


def test_a_failed_undo_is_the_review_cause_and_a_failed_attempt_shows_its_trace_at_1280_and_390(
    browser, live_url, scenario
):
    """Issue 47: a workflow in review because its compensation failed says so, with the undo's error and
    the failure that began the stop (it showed the step failure alone); the compensated step's page lists
    the failed undo; a failed attempt shows the worker that ran it and its stack trace. Both widths (the
    axe and overflow checks of every page cover these pages too)."""
    for viewport in (WIDE, PHONE):
        ctx = login(browser, live_url, scenario.tokens["admin"], viewport)
        page = ctx.new_page()
        page.goto(live_url + f"/console/workflows/{scenario.wf['undo_failed']}")
        why = page.get_by_role("region", name="Why")
        expect(why).to_contain_text("Needs review: COMPENSATION_FAILED")
        expect(why).to_contain_text("the reservation service is read-only")
        expect(page.locator("#failure-origin")).to_contain_text("card expired")
        page.goto(live_url + f"/console/workflows/{scenario.wf['undo_failed']}/steps/reserve")
        expect(page.locator("#compensation + table")).to_contain_text("the reservation service is read-only")
        page.goto(live_url + f"/console/workflows/{scenario.wf['failed']}/steps/score")
        expect(page.locator("body")).to_contain_text("worker-7.internal")
        expect(page.locator("body")).to_contain_text("ScoreServiceError")
        ctx.close()
