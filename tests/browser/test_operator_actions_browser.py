"""The console's operator actions of issue 47 in headless Chromium at 1280 and 390 px, each page checked
with axe-core (no serious or critical violation) and for sideways overflow on a phone: rerun a FAILED
workflow from its page (the new one links back), search by an 8-character id prefix from the header, a
batch preview of selected rows, and the failure groups page."""

from __future__ import annotations

import re

from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import PHONE, WIDE, axe_violations, login, overflow
from tests.console_scenario import Scenario


def _clean(page: Page, name: str, phone: bool, problems: list[str]) -> None:
    problems += [f"{name} ({'390' if phone else '1280'} px): {v}" for v in axe_violations(page)]
    if phone and overflow(page):
        problems.append(f"{name} (390 px): {overflow(page)} px wider than the screen")


def _open_filters(page: Page) -> None:
    """On a phone the filters fold away (open when some are set); on a wide screen they always show."""
    if (
        page.locator("details.filters-box[open]").count() == 0
        and page.locator("details.filters-box > summary").is_visible()
    ):
        page.locator("details.filters-box > summary").click()


def test_rerun_search_batch_preview_and_groups_at_1280_and_390(
    browser: Browser, live_url: str, scenario: Scenario
):
    problems: list[str] = []
    failed = scenario.wf["failed"]
    for viewport, phone in ((WIDE, False), (PHONE, True)):
        ctx = login(browser, live_url, scenario.tokens["admin"], viewport)
        page = ctx.new_page()
        # rerun from the failed workflow's page
        page.goto(f"{live_url}/console/workflows/{failed}")
        form = page.get_by_role("form", name="Rerun")
        expect(form).to_be_visible()
        _clean(page, "workflow-failed-rerun-form", phone, problems)
        form.get_by_label("Reason").fill("browser rerun")
        form.get_by_label("I confirm (a new workflow starts)").check()
        form.get_by_role("button", name="Rerun").click()
        expect(page.locator("#rerun-of")).to_contain_text("browser rerun")
        new_id = page.url.rstrip("/").rsplit("/", 1)[-1]
        assert new_id != failed
        _clean(page, "workflow-rerun", phone, problems)
        # the header's search box: an 8-character id prefix opens the workflow
        box = page.get_by_role("searchbox", name="Search by job id, workflow id, business key or trace id")
        box.fill(new_id[:8])
        box.press("Enter")
        expect(page.locator("#rerun-of")).to_be_visible()
        # select a row of the list and preview a cancel
        page.goto(f"{live_url}/console/workflows?id_prefix={new_id[:8]}")
        page.get_by_label(f"Select workflow {new_id[:8]}").check()
        batch = page.get_by_role("group", name="Act on workflows")
        batch.get_by_label("Reason").fill("browser preview")
        batch.get_by_role("button", name="Preview").click()
        expect(page.locator("#batch-summary")).to_contain_text("Nothing has changed yet")
        _clean(page, "workflow-batch-preview", phone, problems)
        page.goto(f"{live_url}/console/workflows/failure-groups")
        expect(page.locator("#groups")).to_be_visible()
        _clean(page, "failure-groups", phone, problems)
        ctx.close()
    assert problems == []


def test_the_workflow_list_filters_by_definition_name_and_shows_ended_and_duration_at_1280_and_390(
    browser: Browser, live_url: str, scenario: Scenario
):
    """The list's definition filter is chosen by name (a datalist of the namespace's names); each row
    shows when it ended as visible text (no hover) beside the relative time, and how long it ran, or
    for how long it has been running."""
    problems: list[str] = []
    failed, running = scenario.wf["failed"], scenario.wf["running"]
    for viewport, phone in ((WIDE, False), (PHONE, True)):
        ctx = login(browser, live_url, scenario.tokens["admin"], viewport)
        page = ctx.new_page()
        page.goto(f"{live_url}/console/workflows")
        _clean(page, "workflows", phone, problems)
        _open_filters(page)
        form = page.get_by_role("form", name="Filters")
        field = form.get_by_label("Definition (name)")
        assert field.get_attribute("list") == "definition-names"
        names = page.locator("#definition-names option").evaluate_all("os => os.map(o => o.value)")
        assert {"risk-check", "order-fulfilment"} <= set(names) and names == sorted(names)
        field.fill("risk-check")
        form.get_by_role("button", name="Filter").click()
        expect(page).to_have_url(re.compile(r"definition=risk-check"))
        row = page.locator("tr", has=page.locator(f'a[href$="/console/workflows/{failed}"]'))
        expect(row).to_have_count(1)
        expect(page.locator(f'a[href$="/console/workflows/{running}"]')).to_have_count(0)
        ended = row.locator('td[data-label="Ended"]')
        expect(ended).to_be_visible()
        expect(ended.locator("time")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$"))
        expect(ended.locator("small.ago")).to_have_text(re.compile(r"ago$|^now$"))
        took = row.locator('td[data-label="Duration"]')
        expect(took).to_have_text(re.compile(r"^\d+(\.\d)? (ms|s)$|^\d+ (min|h) \d+ (s|min)$"))
        if not phone:
            headers = page.locator("table.list thead th").all_inner_texts()
            assert headers[-3:] == ["Ended", "Duration", "Updated"], headers
        _clean(page, "workflows-by-definition-name", phone, problems)
        # the definition_id URL filter of before: the field shows the name; a running row runs on
        page.goto(f"{live_url}/console/workflows?definition_id={scenario.defs['order']}")
        _open_filters(page)
        expect(page.get_by_role("form", name="Filters").get_by_label("Definition (name)")).to_have_value(
            "order-fulfilment"
        )
        live = page.locator("tr", has=page.locator(f'a[href$="/console/workflows/{running}"]'))
        expect(live.locator('td[data-label="Duration"]')).to_contain_text("running for ")
        expect(live.locator('td[data-label="Ended"]')).to_have_text("—")
        # a name of no definition is refused in place
        page.goto(f"{live_url}/console/workflows?definition=no-such-flow")
        expect(page.get_by_text("no definition named 'no-such-flow' here")).to_be_visible()
        _clean(page, "workflows-unknown-definition", phone, problems)
        ctx.close()
    assert problems == []
