"""The console's operator actions of issue 47 in headless Chromium at 1280 and 390 px, each page checked
with axe-core (no serious or critical violation) and for sideways overflow on a phone: rerun a FAILED
workflow from its page (the new one links back), search by an 8-character id prefix from the header, a
batch preview of selected rows, and the failure groups page."""

from __future__ import annotations

from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import PHONE, WIDE, axe_violations, login, overflow
from tests.console_scenario import Scenario


def _clean(page: Page, name: str, phone: bool, problems: list[str]) -> None:
    problems += [f"{name} ({'390' if phone else '1280'} px): {v}" for v in axe_violations(page)]
    if phone and overflow(page):
        problems.append(f"{name} (390 px): {overflow(page)} px wider than the screen")


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
