"""A fan-out over child workflows in headless Chromium against the Procfile's ``web`` (issue 44): a
SUBWORKFLOW step with ``for_each`` over three order lines (at most two children at once), one child done
and two running. At 1280 and 390 px: the workflow page's steps table and graph show the fan-out's
progress, the step page counts its elements and lists each child, an element's link opens that child's
workflow page (which names its parent), and axe finds no serious or critical violation; then the
remaining children end and the same pages show the fan-out done.

The workflows are built as tests/console_scenario.py builds the TASK fan-out (the domain functions of
the engine, tasks claimed and completed through the task protocol), with the real ledger pool that runs
the parent's spawn and join jobs started in-process until the children it must start exist. Waits are
for states with generous deadlines (the machine may be busy); nothing asserts a duration."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, Page, expect

from app.ledger.states import Pool
from tests.browser.conftest import PHONE, WIDE, axe_violations, login, overflow
from tests.console_scenario import Scenario, _define, _start, _work, run_pool, sql

LINES = [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}]
TIMEOUT = 120.0  # seconds for the in-process ledger pool to reach a state on a busy machine


@dataclass
class ChildFanOut:
    parent: str  # the parent workflow's id
    queue: str  # the children's task queue (this module's own)
    done_element: int  # the element whose child ended first
    done_child: str  # and that child's id


def _children(parent: str) -> list[tuple[int, str, str]]:
    """(element, child id, state) of the parent's fan-out children, in element order."""
    rows = sql(
        "SELECT parent_element, id, state FROM workflow_instances WHERE parent_instance_id = :i "
        "ORDER BY parent_element",
        i=parent,
    )
    return [(r[0], r[1], r[2]) for r in rows]


def _ended(parent: str) -> int:
    return sum(1 for _, _, s in _children(parent) if s in ("SUCCEEDED", "FAILED", "CANCELLED"))


@pytest.fixture(scope="module")
def child_fan_out(scenario: Scenario) -> ChildFanOut:
    admin = scenario.principals["admin"]
    queue = "ship.line." + uuid.uuid4().hex[:6]
    child = _define(
        admin,
        "ship-line",
        {
            "steps": [{"key": "ship", "kind": "TASK", "queue": queue, "input": {"sku": "$.input.sku"}}],
            "output": "$.steps.ship.output",
        },
    )
    parent_def = _define(
        admin,
        "order-lines-children",
        {
            "steps": [
                {
                    "key": "ship_lines",
                    "kind": "SUBWORKFLOW",
                    "definition_id": child,
                    "version": "v1",
                    "for_each": {"items": "$.input.lines", "max_parallel": 2},
                    "input": {"sku": "$.item.sku"},
                }
            ],
            "output": {"shipped": "$.steps.ship_lines.output"},
        },
    )
    parent = _start(admin, parent_def, {"lines": LINES})
    # the parent's spawn job starts the first two children (max_parallel)
    run_pool(Pool.ADVANCE, lambda: len(_children(parent)) == 2, timeout=TIMEOUT)
    task = _work(admin, queue, output={"shipped": True})
    [(done_child,)] = sql("SELECT instance_id FROM workflow_tasks WHERE id = :t", t=task)
    # the ended child's join job starts the third element's child
    run_pool(
        Pool.ADVANCE,
        lambda: len(_children(parent)) == 3 and _ended(parent) == 1,
        timeout=TIMEOUT,
    )
    done_element = next(e for e, c, _ in _children(parent) if c == done_child)
    return ChildFanOut(parent, queue, done_element, done_child)


def _axe(page: Page, name: str, viewport: dict[str, int], problems: list[str]) -> None:
    width = viewport["width"]
    problems += [f"{name} ({width} px): {v}" for v in axe_violations(page)]
    if viewport is PHONE and overflow(page):
        problems.append(f"{name} (390 px): {overflow(page)} px wider than the screen")


def _check_pages(
    browser: Browser,
    live_url: str,
    token: str,
    fan: ChildFanOut,
    *,
    done: int,
    running: int,
    step_state: str,
) -> list[str]:
    """Walk the parent's page, its fan-out step's page and one child's page at both widths, checking
    the progress shown (``done`` and ``running`` elements of 3, none failed; the step in
    ``step_state``); the axe problems found."""
    pending = len(LINES) - done - running
    problems: list[str] = []
    for viewport in (WIDE, PHONE):
        ctx = login(browser, live_url, token, viewport)
        ctx.set_default_timeout(60_000)
        page = ctx.new_page()
        page.goto(live_url + f"/console/workflows/{fan.parent}")
        expect(page.locator("#steps tbody tr", has_text="ship_lines")).to_contain_text(
            f"{done}/3 elements done, {running} running, 0 failed"
        )
        node = page.locator("svg.graph g", has=page.locator("title", has_text="ship_lines (SUBWORKFLOW)"))
        expect(node.locator("title")).to_contain_text(f"({done}/3 done, {running} running, 0 failed)")
        expect(node.locator("text.node-label")).to_have_text("ship_lines")
        expect(node.locator("rect.node")).to_have_class(re.compile(rf"\b{step_state}\b"))
        _axe(page, "workflow with a child fan-out", viewport, problems)

        page.goto(live_url + f"/console/workflows/{fan.parent}/steps/ship_lines")
        expect(page.locator(".facts")).to_contain_text(
            f"3 element(s): {pending} pending, {running} running, {done} done, 0 failed (at most 2 at once)"
        )
        expect(page.locator("#elements")).to_contain_text("3 started of 3")
        rows = page.locator("#elements + table tbody tr")
        expect(rows).to_have_count(3)
        for element, child, state in _children(fan.parent):
            row = rows.nth(element)
            expect(row.locator("td").first).to_have_text(str(element))
            expect(row).to_contain_text(state)
            expect(row.get_by_role("link")).to_have_attribute("href", f"/console/workflows/{child}")
        _axe(page, "step page of a child fan-out", viewport, problems)

        # the short id in the link shows whole on keyboard focus; a mouse click (from the short form:
        # it once grew under the pointer on mousedown, and the click went nowhere) opens the child
        link = rows.nth(fan.done_element).get_by_role("link")
        short_id = link.locator(".id.short")
        link.focus()
        expect(short_id).to_have_css("max-width", "none")
        link.blur()
        expect(short_id).not_to_have_css("max-width", "none")
        link.click()
        page.wait_for_url(f"**/console/workflows/{fan.done_child}")
        expect(page.locator("#wf-state")).to_have_text("SUCCEEDED")
        facts = page.locator(".facts")
        expect(facts).to_contain_text("ship_lines")  # the parent and the step that started it
        expect(facts.get_by_role("link", name=fan.parent)).to_have_attribute(
            "href", f"/console/workflows/{fan.parent}"
        )
        _axe(page, "child workflow of a fan-out", viewport, problems)
        ctx.close()
    return problems


def _parent_state(parent: str) -> str:
    return sql("SELECT state FROM workflow_instances WHERE id = :i", i=parent)[0][0]


def test_a_child_fan_out_in_progress_at_1280_and_390(browser, live_url, scenario, child_fan_out):
    """One child done, two running, none pending: the counts on the workflow page (steps table and
    graph) and the step page, a link per element to its child, the done child's page one click away."""
    problems = _check_pages(
        browser, live_url, scenario.tokens["admin"], child_fan_out, done=1, running=2, step_state="ACTIVE"
    )
    assert problems == []


def test_a_child_fan_out_done_at_1280_and_390(browser, live_url, scenario, child_fan_out):
    """The two running children end (their tasks completed): the parent succeeds with one output per
    element, and the same pages show three elements done."""
    admin = scenario.principals["admin"]
    fan = child_fan_out
    for _ in range(len(LINES) - _ended(fan.parent)):
        _work(admin, fan.queue, output={"shipped": True})
    run_pool(Pool.ADVANCE, lambda: _parent_state(fan.parent) == "SUCCEEDED", timeout=TIMEOUT)
    [(output,)] = sql("SELECT output FROM workflow_instances WHERE id = :i", i=fan.parent)
    assert output == {"shipped": [{"shipped": True}] * len(LINES)}
    assert [s for _, _, s in _children(fan.parent)] == ["SUCCEEDED"] * len(LINES)
    problems = _check_pages(
        browser, live_url, scenario.tokens["admin"], fan, done=3, running=0, step_state="SUCCEEDED"
    )
    assert problems == []
