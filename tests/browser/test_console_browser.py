"""The console in headless Chromium: log in, filter the job list, retry a dead job with a reason and
see it succeed, preview a replay, pause and resume a workflow (and see a stale revision's conflict),
complete a human task and see the workflow move on, a monitor-only credential sees no action and gets
403 posting anyway, a forged CSRF token is refused. Each page is screenshot at 1280 px and 390 px."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import text

from app.auth import ALL_SCOPES, Scope, create_credential
from app.db import get_engine, transaction
from app.ids import new_id
from app.ledger import handlers
from app.ledger.enqueue import enqueue
from app.ledger.outcome import PermanentError
from app.ledger.pool import LedgerPool
from app.ledger.states import Pool
from ledgerflow.client import Client

sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is missing: make install"
)
Browser, BrowserContext, Page, expect = (
    sync_api.Browser,
    sync_api.BrowserContext,
    sync_api.Page,
    sync_api.expect,
)
WIDE, PHONE = {"width": 1280, "height": 900}, {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def namespace() -> str:
    return "console-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def tokens(namespace: str) -> dict[str, str]:
    with transaction() as conn:
        return {
            # platform-wide operators (--platform): the ledger's crafted jobs here have no instance
            "admin": create_credential(conn, namespace=namespace, name="admin", scopes=sorted(ALL_SCOPES),
                                       platform=True).token,
            "monitor": create_credential(conn, namespace=namespace, name="monitor",
                                         scopes=[Scope.ENGINE_MONITOR], platform=True).token,
        }  # fmt: skip


def _login(browser: Browser, url: str, token: str, viewport: dict[str, int] = WIDE) -> BrowserContext:
    ctx = browser.new_context(viewport=viewport)
    page = ctx.new_page()
    page.goto(url + "/console/login")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    page.close()
    return ctx


@pytest.fixture(scope="module")
def admin(browser: Browser, live_url: str, tokens: dict[str, str]) -> Iterator[BrowserContext]:
    ctx = _login(browser, live_url, tokens["admin"])
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def phone(browser: Browser, live_url: str, tokens: dict[str, str]) -> Iterator[BrowserContext]:
    ctx = _login(browser, live_url, tokens["admin"], PHONE)
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def snap(phone: BrowserContext, shots: Path) -> Callable[[Page, str], None]:
    """Screenshot a page at 1280 px and the same URL at phone width."""

    def _snap(page: Page, name: str) -> None:
        page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
        small = phone.new_page()
        small.goto(page.url)
        small.screenshot(path=str(shots / f"{name}-phone.png"), full_page=True)
        small.close()

    return _snap


def _run_pool(done: Callable[[], bool], timeout: float = 30.0) -> None:
    from app.settings import get_settings

    fast = replace(get_settings(), poll_seconds=0.1, renew_seconds=0.5, lease_seconds=5.0)
    pool = LedgerPool(Pool.OUTBOUND, settings=fast, engine=get_engine(), worker_id=new_id())
    pool.start()
    try:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "the pool did not finish in time"
            pool.nudge()
            time.sleep(0.05)
    finally:
        pool.stop(timeout=10)


def _status(job_id: int) -> str:
    with get_engine().connect() as conn:
        return conn.execute(
            text("SELECT status FROM workflow_jobs WHERE id = :i"), {"i": job_id}
        ).scalar_one()


@pytest.fixture(scope="module")
def dead_job() -> Iterator[int]:
    """An event_dispatch job that died for real (its handler refused it once) and succeeds when retried."""
    calls: list[int] = []

    def handler(ctx) -> dict:  # noqa: ANN001
        calls.append(1)
        if len(calls) == 1:
            raise PermanentError("receiver returned 410 Gone for order 42")
        return {"delivered": True}

    saved = handlers.registered()
    handlers.register("event_dispatch", handler, replace=True)
    with transaction() as conn:
        job = enqueue(conn, "event_dispatch", {"event": "order.created", "order": 42}, max_attempts=3)
    _run_pool(lambda: _status(job.id) == "dead")
    yield job.id
    handlers._handlers.clear()  # noqa: SLF001
    handlers._handlers.update(saved)  # noqa: SLF001


def test_login_filter_and_retry_a_dead_job_until_it_succeeds(admin, live_url, dead_job, snap):
    page = admin.new_page()
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if m.type == "error" else None)
    page.goto(live_url + "/console/jobs")
    expect(page.locator("#status-panel")).to_contain_text("Dead")
    with page.expect_response(lambda r: "/console/jobs/status-panel" in r.url and r.ok, timeout=10_000):
        pass  # htmx (vendored, under the CSP) refreshes the panel by itself
    assert violations == []  # no CSP violation, no script error
    page.get_by_label("Status", exact=True).fill("dead")
    page.get_by_role("button", name="Filter").click()
    assert "status=dead" in page.url  # the filters live in the URL
    row = page.get_by_role("link", name=str(dead_job), exact=True)
    expect(row).to_be_visible()
    snap(page, "jobs")
    row.click()
    expect(page.get_by_role("heading", name=f"Job {dead_job}")).to_contain_text("dead")
    expect(page.locator("body")).to_contain_text("410 Gone")
    snap(page, "job-dead")
    form = page.locator("form", has=page.get_by_role("button", name="Retry job"))
    form.get_by_label("Reason").fill("receiver fixed the route")
    form.get_by_label("I confirm").check()
    form.get_by_role("button", name="Retry job").click()
    expect(page.locator(".flash")).to_contain_text(f"Job {dead_job} retried")
    _run_pool(lambda: _status(dead_job) == "succeeded")
    page.reload()
    expect(page.get_by_role("heading", name=f"Job {dead_job}")).to_contain_text("succeeded")
    expect(page.locator("table").nth(0)).to_contain_text("failed")  # generation 1's attempt is still listed
    snap(page, "job-retried")
    page.goto(live_url + "/console/charts")
    expect(page.locator("svg.chart").first).to_be_visible()
    snap(page, "charts")
    page.goto(live_url + "/console/health")
    expect(page.get_by_role("heading", name="Worker nodes")).to_be_visible()
    snap(page, "health")
    page.close()


def test_replay_preview_from_a_failure_cluster(admin, live_url, snap):
    with transaction() as conn:
        ids = [enqueue(conn, "webhook_delivery", {"n": i}).id for i in range(3)]
        conn.execute(
            text("UPDATE workflow_jobs SET status = 'dead', attempts = 5, last_error = 'connect timeout after '"
                 " || id || ' ms', finished_at = now() WHERE id = ANY(:ids)"),
            {"ids": ids},
        )  # fmt: skip
    page = admin.new_page()
    page.goto(live_url + "/console/jobs/clusters")
    cluster = page.locator("tr", has_text="webhook_delivery")
    expect(cluster).to_contain_text("connect timeout after")
    snap(page, "clusters")
    cluster.get_by_role("link", name="Replay this cluster…").click()
    expect(page.get_by_role("heading", name="Preview: 3 job(s) match")).to_be_visible()
    snap(page, "replay-preview")
    assert [_status(i) for i in ids] == ["dead"] * 3  # a preview changes nothing
    page.close()


@pytest.fixture(scope="module")
def wf(live_url: str, tokens: dict[str, str]) -> Client:
    return Client(live_url, tokens["admin"])


def _start(wf: Client, steps: list[dict]) -> str:
    d = wf.create_definition("console-" + uuid.uuid4().hex[:8])
    wf.publish_version(
        d["id"], {"version": "v1", "input_schema": {}, "deadline_seconds": 600, "steps": steps}
    )
    return wf.start_workflow(d["id"], "v1", {"order": 42}).instance.id


def test_pause_and_resume_a_workflow_and_see_a_stale_revision(admin, live_url, wf, snap):
    wid = _start(wf, [{"key": "approve", "kind": "TASK", "queue": "pause-q", "after": []}])
    page = admin.new_page()
    page.goto(live_url + "/console/workflows")
    page.get_by_role("link", name=wid[:12] + "…").click()
    snap(page, "workflow")
    stale = admin.new_page()
    stale.goto(page.url)  # loaded now, submitted after the pause below
    control = page.get_by_role("form", name="Control")
    control.get_by_label("Operation").select_option("PAUSE")
    control.get_by_label("Reason").fill("maintenance window")
    control.get_by_role("button", name="Apply").click()
    expect(page.locator(".flash")).to_contain_text("Pause applied")
    expect(page.locator("#wf-paused")).to_be_visible()
    expect(page.locator(".timeline")).to_contain_text("workflow.control.pause")
    s = stale.get_by_role("form", name="Control")
    s.get_by_label("Operation").select_option("CANCEL")
    s.get_by_label("Reason").fill("clicked on an old page")
    s.get_by_role("button", name="Apply").click()
    expect(stale.locator("h1")).to_contain_text("409")
    snap(stale, "workflow-conflict")
    stale.close()
    control = page.get_by_role("form", name="Control")
    control.get_by_label("Operation").select_option("RESUME")
    control.get_by_label("Reason").fill("window over")
    control.get_by_role("button", name="Apply").click()
    expect(page.locator(".flash")).to_contain_text("Resume applied")
    expect(page.locator("#wf-paused")).to_have_count(0)
    assert wf.get_workflow(wid).state in ("RUNNING", "WAITING")
    page.close()


def test_complete_a_human_task_and_the_workflow_moves_on(admin, live_url, wf, snap):
    wid = _start(wf, [
        {"key": "review", "kind": "TASK", "queue": "humans", "after": []},
        {"key": "ship", "kind": "TASK", "queue": "humans", "after": ["review"]},
    ])  # fmt: skip
    page = admin.new_page()
    page.goto(live_url + "/console/tasks")
    page.get_by_role("button", name="Claim next on humans").click()
    expect(page.locator(".flash")).to_contain_text("Claimed task")
    form = page.get_by_role("form", name="Complete task")
    form.get_by_label("Output JSON").fill('{"approved": true, "amount": 12.50}')
    snap(page, "tasks")
    form.get_by_role("button", name="Complete").click()
    expect(page.locator(".flash")).to_contain_text("completed")
    page.goto(live_url + f"/console/workflows/{wid}")
    steps = page.locator("table").first
    expect(steps.locator("tr", has_text="review")).to_contain_text("SUCCEEDED")
    expect(steps.locator("tr", has_text="ship")).to_contain_text("ACTIVE")
    snap(page, "workflow-moved-on")
    page.close()


def test_monitor_only_sees_no_action_and_is_refused_when_posting(browser, live_url, tokens, dead_job, shots):
    anonymous = browser.new_page(viewport=WIDE)
    anonymous.goto(live_url + "/console/jobs")  # not logged in: the login page
    expect(anonymous.get_by_label("API token")).to_be_visible()
    anonymous.screenshot(path=str(shots / "login.png"))
    anonymous.close()
    ctx = _login(browser, live_url, tokens["monitor"])
    page = ctx.new_page()
    page.goto(live_url + f"/console/jobs/{dead_job}")
    expect(page.get_by_role("heading", name=f"Job {dead_job}")).to_be_visible()
    assert page.get_by_role("button", name="Retry job").count() == 0
    assert page.get_by_role("button", name="Skip job").count() == 0
    assert page.get_by_role("link", name="Workflows").count() == 0
    page.goto(live_url + "/console/jobs")
    assert page.get_by_text("Batch action").count() == 0
    token = page.locator('input[name="csrf_token"]').first.input_value()
    r = ctx.request.post(live_url + f"/console/jobs/{dead_job}/retry",
                         form={"reason": "sneaky", "confirm": "yes", "csrf_token": token})  # fmt: skip
    assert r.status == 403 and "workflow:engine:operate" in r.text()
    assert ctx.request.get(live_url + "/console/workflows").status == 403
    ctx.close()


def test_a_forged_csrf_token_is_refused(admin, live_url):
    with transaction() as conn:
        job = enqueue(conn, "webhook_delivery", {"n": "csrf"}).id
        conn.execute(text("UPDATE workflow_jobs SET status = 'dead', attempts = 5 WHERE id = :i"), {"i": job})
    page = admin.new_page()
    page.goto(live_url + f"/console/jobs/{job}")
    form = page.locator("form", has=page.get_by_role("button", name="Retry job"))
    form.locator('input[name="csrf_token"]').evaluate("el => el.value = 'forged'")
    form.get_by_label("Reason").fill("should not happen")
    form.get_by_label("I confirm").check()
    form.get_by_role("button", name="Retry job").click()
    expect(page.locator("h1")).to_contain_text("400")
    expect(page.locator(".error")).to_contain_text("CSRF")
    assert _status(job) == "dead"
    page.close()
