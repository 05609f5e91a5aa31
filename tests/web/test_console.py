"""The operator console through the Flask test client (real PostgreSQL): login, session cookie flags,
CSRF on every form, the CSP, scope-based hiding and server-side 403, and the actions' audit rows.
The same flows in a real browser are in tests/browser/."""

from __future__ import annotations

import re
import uuid

import pytest
from sqlalchemy import text

from app.auth import Scope
from tests.web.conftest import row

MONITOR, OPERATE = Scope.ENGINE_MONITOR, Scope.ENGINE_OPERATE
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


def _csrf(page: bytes) -> str:
    m = CSRF_RE.search(page.decode())
    assert m, "no CSRF token on the page"
    return m.group(1)


def login(client, tok: str):
    page = client.get("/console/login")
    return client.post("/console/login", data={"token": tok, "csrf_token": _csrf(page.data), "next": ""})


@pytest.fixture
def console(app, clean):
    return app.test_client()


def test_pages_need_a_login_and_a_bad_token_is_refused(console, token):
    r = console.get("/console/jobs")
    assert r.status_code == 302 and "/console/login" in r.headers["Location"]
    r = login(console, "lf_not-a-token")
    assert r.status_code == 401 and b"unknown or revoked" in r.data


def test_login_sets_a_strict_httponly_cookie_and_csp(console, token):
    r = login(console, token(MONITOR))
    assert r.status_code == 302 and r.headers["Location"].endswith("/console/")
    cookie = [h for h in r.headers.getlist("Set-Cookie") if h.startswith("ledgerflow_console=")][0]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    page = console.get("/console/jobs")
    assert page.status_code == 200
    csp = page.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert b"<script>" not in page.data and b" on" + b"click=" not in page.data


def test_cookie_is_secure_over_https(console, token):
    page = console.get("/console/login", base_url="https://localhost")
    r = console.post(
        "/console/login",
        data={"token": token(MONITOR), "csrf_token": _csrf(page.data)},
        base_url="https://localhost",
        headers={"Referer": "https://localhost/console/login"},
    )
    assert r.status_code == 302
    cookie = [h for h in r.headers.getlist("Set-Cookie") if h.startswith("ledgerflow_console=")][0]
    assert "Secure" in cookie


def test_session_keeps_no_token_and_a_revoked_credential_is_logged_out(console, token, clean):
    tok = token(MONITOR)
    login(console, tok)
    cookie = console.get_cookie("ledgerflow_console", path="/console")
    assert cookie is not None and tok not in cookie.value
    with clean.begin() as conn:
        conn.execute(text("UPDATE credentials SET revoked_at = now()"))
    assert console.get("/console/jobs").status_code == 302


def test_post_without_csrf_token_is_refused(console, token, make_job, clean):
    login(console, token(MONITOR, OPERATE))
    job = make_job("dead", attempts=5, last_error="boom")
    r = console.post(f"/console/jobs/{job}/retry", data={"reason": "x", "confirm": "yes"})
    assert r.status_code == 400 and b"CSRF" in r.data
    assert row(clean, job)["status"] == "dead"


def test_monitor_sees_no_action_and_gets_403_posting_anyway(console, token, make_job):
    login(console, token(MONITOR))
    job = make_job("dead", attempts=5, last_error="boom")
    page = console.get(f"/console/jobs/{job}")
    assert page.status_code == 200 and b"Retry job" not in page.data and b"Skip job" not in page.data
    listing = console.get("/console/jobs")
    assert b"Batch action" not in listing.data
    r = console.post(
        f"/console/jobs/{job}/retry", data={"reason": "x", "confirm": "yes", "csrf_token": _csrf(page.data)}
    )
    assert r.status_code == 403 and b"workflow:engine:operate" in r.data
    assert console.get("/console/workflows").status_code == 403  # not even readable: no workflows:read
    assert b"Workflows" not in listing.data  # and not in the navigation


def test_retry_needs_reason_and_confirmation_and_is_audited(console, token, make_job, clean):
    login(console, token(MONITOR, OPERATE))
    job = make_job("dead", attempts=5, last_error="boom")
    page = console.get(f"/console/jobs/{job}")
    csrf = _csrf(page.data)
    r = console.post(f"/console/jobs/{job}/retry", data={"reason": "fixed", "csrf_token": csrf})
    assert r.status_code == 400 and b"confirm" in r.data
    r = console.post(f"/console/jobs/{job}/retry", data={"reason": " ", "confirm": "yes", "csrf_token": csrf})
    assert r.status_code == 400 and b"reason" in r.data
    r = console.post(
        f"/console/jobs/{job}/retry", data={"reason": "fixed", "confirm": "yes", "csrf_token": csrf}
    )
    assert r.status_code == 302
    assert row(clean, job)["status"] == "pending" and row(clean, job)["generation"] == 2
    with clean.connect() as conn:
        audit = conn.execute(text("SELECT action, reason FROM operation_audit")).all()
    assert [(a.action, a.reason) for a in audit] == [("job.retry", "fixed")]


def test_filters_are_validated_by_the_api_schema(console, token, make_job):
    login(console, token(MONITOR))
    make_job("dead", type="delay_wake", last_error="alpha")
    make_job("pending", type="event_dispatch")
    r = console.get("/console/jobs?status=dead")
    assert r.status_code == 200 and b"alpha" in r.data and b"event_dispatch</td>" not in r.data
    bad = console.get("/console/jobs?status=nonsense")
    assert bad.status_code == 400 and b"allowed values" in bad.data


def test_batch_all_matching_and_replay_preview(console, token, make_job, clean):
    login(console, token(MONITOR, OPERATE))
    ids = [make_job("dead", attempts=5, last_error=f"timeout after {i} ms") for i in range(3)]
    make_job("pending")
    preview = console.get("/console/jobs/replay?statuses=dead&preview=1")
    assert preview.status_code == 200 and b"Preview: 3 job(s) match" in preview.data
    page = console.get("/console/jobs?status=dead")
    r = console.post(
        "/console/jobs/batch",
        data={
            "action": "skip",
            "scope": "all",
            "filter_qs": "status=dead",
            "reason": "noise",
            "confirm": "yes",
            "csrf_token": _csrf(page.data),
        },
    )
    assert r.status_code == 302
    assert [row(clean, i)["status"] for i in ids] == ["canceled"] * 3


def test_status_panel_fragment_and_charts_render(console, token, make_job):
    login(console, token(MONITOR))
    make_job("dead", attempts=5, last_error="boom")
    frag = console.get("/console/jobs/status-panel")
    assert frag.status_code == 200 and b'id="status-panel"' in frag.data and b"<html" not in frag.data
    charts = console.get("/console/charts")
    assert charts.status_code == 200 and charts.data.count(b"<svg") == 6


def test_engine_health_drain_is_previewed_and_audited(console, token, make_job, clean):
    login(console, token(MONITOR, OPERATE))
    stuck = make_job("running", attempts=1, lease_in=-5)
    page = console.get("/console/health")
    assert page.status_code == 200 and f">{stuck}</a>".encode() in page.data  # the preview lists it
    r = console.post(
        "/console/health/drain",
        data={"reason": "node died", "confirm": "yes", "csrf_token": _csrf(page.data)},
    )
    assert r.status_code == 302
    assert row(clean, stuck)["status"] == "pending"
    with clean.connect() as conn:
        a = conn.execute(text("SELECT action, reason, before, after FROM operation_audit")).one()
    assert a.action == "engine.drain" and a.reason == "node died"
    assert a.before["stuck_ids"] == [str(stuck)] and a.after["reclaimed_ids"] == [str(stuck)]
    page = console.get("/console/health")  # the run shows up in the drain counters
    last = re.search(r'id="last-drain">([^<]+)<', page.data.decode()).group(1)
    assert last.startswith("ended ") and "reclaimed 1 to pending and 0 dead" in last


def test_logout_ends_the_session(console, token):
    login(console, token(MONITOR))
    page = console.get("/console/jobs")
    r = console.post("/console/logout", data={"csrf_token": _csrf(page.data)})
    assert r.status_code == 302
    assert console.get("/console/jobs").status_code == 302


def _node_with_job(clean, make_job, *, heartbeat_age: int) -> tuple[str, int]:
    node = "node-" + uuid.uuid4().hex[:8]
    job = make_job("running", attempts=1, lease_in=50)
    with clean.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_worker_nodes (node_id, hostname, pid, roles, pools, slot_capacity, "
                "slots_in_use, status, heartbeat_at) VALUES (:n, 'h', 1, '{worker}', '{workflow-ledger}', 4, 1, "
                "'active', now() - make_interval(secs => :age))"
            ),
            {"n": node, "age": heartbeat_age},
        )
        conn.execute(  # the job's open attempt names the node
            text("UPDATE workflow_jobs SET worker_id = :n WHERE id = :j"), {"n": node, "j": job}
        )
    return node, job


def test_reclaim_a_lost_nodes_jobs_is_previewed_audited_and_refused_for_a_live_node(
    console, token, make_job, clean
):
    login(console, token(MONITOR, OPERATE))
    lost, job = _node_with_job(clean, make_job, heartbeat_age=600)
    page = console.get(f"/console/health/nodes/{lost}")
    assert (
        page.status_code == 200 and f">{job}</a>".encode() in page.data and b"Reclaim this node" in page.data
    )
    r = console.post(
        f"/console/health/nodes/{lost}/reclaim",
        data={"reason": "host died", "confirm": "yes", "csrf_token": _csrf(page.data)},
    )
    assert r.status_code == 302
    assert row(clean, job)["status"] == "pending" and row(clean, job)["lease_token"] is None
    with clean.connect() as conn:
        a = conn.execute(text("SELECT action, target_id, after FROM operation_audit")).one()
    assert a.action == "engine.reclaim_node" and a.target_id == lost
    assert a.after["reclaimed"] == [{"id": str(job), "status": "pending"}]
    live, live_job = _node_with_job(clean, make_job, heartbeat_age=5)
    page = console.get(f"/console/health/nodes/{live}")
    assert b"Reclaim this node" not in page.data
    r = console.post(
        f"/console/health/nodes/{live}/reclaim",
        data={"reason": "oops", "confirm": "yes", "csrf_token": _csrf(page.data)},
    )
    assert r.status_code == 409 and row(clean, live_job)["status"] == "running"
