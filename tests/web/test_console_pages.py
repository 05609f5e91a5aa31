"""The console's second version through the Flask test client on a scenario that ran for real
(tests/console_scenario.py): every page renders; the workflow page explains a running, a failed, a
compensated and a NEEDS_REVIEW workflow; sessions end on the server at logout; an expired session gives
htmx an ``HX-Redirect``; refused forms show their errors in place with the input kept; search; a
platform-wide operator across namespaces; totals and previous / next paging. The same in a real
browser under the Procfile's gunicorn: tests/browser/."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from app.db import transaction
from app.integrations import automation
from app.ledger.enqueue import enqueue
from tests.console_scenario import Scenario, build, pages, sql
from tests.web.test_console import _csrf, login
from web.console.common import duration
from web.console.workflows import timing

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scenario(app) -> Scenario:
    return build()


def _client(app, token: str) -> FlaskClient:
    c = app.test_client()
    r = login(c, token)
    assert r.status_code == 302, r.data[:300]
    return c


@pytest.fixture(scope="module")
def admin(app, scenario: Scenario) -> FlaskClient:
    return _client(app, scenario.tokens["admin"])


def _text(r) -> str:
    return re.sub(r"\s+", " ", html.unescape(r.data.decode()))


def test_every_page_renders(admin, scenario):
    for _name, path in pages(scenario):
        r = admin.get(path)
        assert r.status_code == 200, (path, r.status_code, _text(r)[:2000])
        body = r.data.decode()
        assert body.count("<h1") == 1, path
        assert 'rel="icon"' in body


def test_the_workflow_page_says_what_happened_and_why(admin, scenario):
    wf = scenario.wf
    failed = _text(admin.get(f"/console/workflows/{wf['failed']}"))
    assert "risk-check" in failed and "v1" in failed
    assert "score service answered 503 twice" in failed and "from step" in failed and ">score</a>" in failed
    assert '"customer": "C-7"' in failed  # the input, pretty-printed
    assert "<svg" in failed and "Timeline" in failed and "graph" in failed

    running = _text(admin.get(f"/console/workflows/{wf['running']}"))
    keys = re.findall(r'/steps/(\w+)">\1</a>', running)
    assert keys == ["approve", "cool_off", "ship"]  # the graph's order, not the alphabet
    row = re.search(r'/steps/cool_off">cool_off</a>.*?</tr>', running).group(0)
    assert re.search(r"fires <time datetime=\S+Z\" title=\"[^\"]+ UTC\">in (59 min|1 h)</time>", row), row
    assert "order-fulfilment" in running and scenario.business_key in running

    comp = _text(admin.get(f"/console/workflows/{wf['compensated']}"))
    assert "card declined: insufficient funds" in comp and ">charge</a>" in comp
    assert "Compensation" in comp and "DONE" in comp

    review = _text(admin.get(f"/console/workflows/{wf['review']}"))
    assert "Needs review" in review and "Resolve a step in review" in review
    assert "checked with the carrier, call 25" in review and "ticket:124" in review
    assert "by admin" in review  # the actor's name, not its credential id
    older = re.search(r'href="(\?audit=[^"]+)"', review)
    assert older, "no link to older audit entries"
    page2 = _text(admin.get(f"/console/workflows/{wf['review']}" + older.group(1).replace("&amp;", "&")))
    assert "checked with the carrier, call 5" in page2 and "workflow.control.pause" in page2
    assert "freeze while the receipt is checked" in page2


def test_logout_ends_the_session_on_the_server(app, scenario):
    c = _client(app, scenario.tokens["monitor"])
    cookie = c.get_cookie("ledgerflow_console", path="/console")
    assert scenario.tokens["monitor"] not in cookie.value
    page = c.get("/console/jobs")
    assert page.status_code == 200
    copy = app.test_client()
    copy.set_cookie("ledgerflow_console", cookie.value, path="/console")
    assert copy.get("/console/jobs").status_code == 200  # a copy of the cookie works until logout
    assert c.post("/console/logout", data={"csrf_token": _csrf(page.data)}).status_code == 302
    r = copy.get("/console/jobs")
    assert r.status_code == 302 and "/console/login" in r.headers["Location"]


def test_an_expired_session_sends_htmx_to_the_login_page(app, scenario):
    c = _client(app, scenario.tokens["tenant"])
    sql(
        "UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE credential_id = :c",
        c=scenario.principals["tenant"].credential_id,
    )
    r = c.get(
        "/console/jobs/status-panel",
        headers={"HX-Request": "true", "HX-Current-URL": "http://localhost/console/jobs?status=dead"},
    )
    assert r.status_code == 401 and r.data == b""
    assert r.headers["HX-Redirect"] == "/console/login?next=/console/jobs?status%3Ddead"
    full = c.get("/console/jobs")
    assert full.status_code == 302 and "/console/login" in full.headers["Location"]


def test_refused_forms_keep_the_input_and_say_why_beside_the_field(admin, scenario):
    page = admin.get("/console/workflows/start")
    r = admin.post(
        "/console/workflows/start",
        data={
            "definition_id": scenario.defs["order"],
            "version": "v1",
            "input": '{"order_id": 7}',
            "confirm": "yes",
            "csrf_token": _csrf(page.data),
            "back": "/console/workflows/start",
        },
    )
    body = _text(r)
    assert r.status_code == 400
    assert 'aria-invalid="true"' in body and "field-error" in body
    assert '{"order_id": 7}' in body  # what was typed is still there
    ok = admin.post(
        "/console/workflows/start",
        data={
            "definition_id": scenario.defs["order"],
            "version": "v1",
            "input": '{"order_id": "Z-9", "amount": 3}',
            "business_key": "typed-in-the-console",
            "confirm": "yes",
            "csrf_token": _csrf(page.data),
        },
    )
    assert ok.status_code == 302 and "/console/workflows/" in ok.headers["Location"]
    assert (
        sql("SELECT count(*) FROM workflow_instances WHERE business_key = 'typed-in-the-console'")[0][0] == 1
    )
    bad_filter = admin.get("/console/jobs?status=nonsense&keyword=kept")
    assert bad_filter.status_code == 400 and 'value="kept"' in bad_filter.data.decode()
    assert bad_filter.data.decode().count("<h1") == 1 and "allowed values" in bad_filter.data.decode()
    listing = admin.get("/console/jobs?status=dead")
    batch = admin.post(
        "/console/jobs/batch",
        data={
            "action": "retry",
            "scope": "selected",
            "reason": "x",
            "confirm": "yes",
            "filter_qs": "status=dead",
            "csrf_token": _csrf(listing.data),
            "back": "/console/jobs?status=dead",
        },
    )
    assert batch.status_code == 400 and "select at least one job" in batch.data.decode()
    assert 'value="dead"' in batch.data.decode()  # the filter is kept


def test_a_nul_in_a_console_query_value_is_a_400_naming_it(admin, scenario):
    """The input layer (W-API-2) covers the console's query strings as it covers the API's: a NUL in the
    namespace switcher's ``ns`` or in the replay preview's ``error_pattern`` reached PostgreSQL and
    answered 500 before."""
    for path, field in (("/console/workflows?ns=a%00b", "ns"), ("/console/tasks?ns=a%00b", "ns"),
                        ("/console/jobs/replay?statuses=dead&preview=1&error_pattern=a%00b", "error_pattern")):  # fmt: skip
        r = admin.get(path)
        assert r.status_code == 400, (path, r.status_code)
        assert f"{field}: must not contain the NUL character" in _text(r), path


def test_a_replay_without_a_reason_is_refused_in_place(admin, scenario):
    """Every console action needs a reason: a replay form sent without one answered 500 (the blank field
    was dropped before the schema, which takes a missing reason for the API's optional one)."""
    page = admin.get("/console/jobs/replay?statuses=dead&preview=1")
    r = admin.post("/console/jobs/replay", data={
        "statuses": "dead", "limit": "5", "rate": "5", "reason": " ", "confirm": "yes",
        "csrf_token": _csrf(page.data), "back": "/console/jobs/replay?statuses=dead&preview=1",
    })  # fmt: skip
    assert r.status_code == 400, r.status_code
    assert "field-error" in r.data.decode() and r.data.decode().count("<h1") == 1


def test_cancel_needs_a_reason_and_a_confirmation(admin, scenario):
    wid = scenario.wf["signal"]
    page = admin.get(f"/console/workflows/{wid}")
    form = {
        "operation": "CANCEL",
        "expected_control_revision": "1",
        "reason": "customer withdrew",
        "csrf_token": _csrf(page.data),
    }
    r = admin.post(f"/console/workflows/{wid}/control", data=form)
    assert r.status_code == 400 and "tick the confirmation box" in r.data.decode()
    r = admin.post(f"/console/workflows/{wid}/control", data={**form, "reason": " ", "confirm": "yes"})
    assert r.status_code == 400
    assert sql("SELECT state FROM workflow_instances WHERE id = :i", i=wid)[0][0] == "WAITING"


def test_signal_and_schedule_forms(admin, scenario):
    wid = scenario.wf["signal"]
    page = admin.get(f"/console/workflows/{wid}/signal")
    assert "receipt" in page.data.decode() and 'value="B-2"' in page.data.decode()  # the wait's correlation
    r = admin.post(
        f"/console/workflows/{wid}/signal",
        data={
            "name": "done",
            "payload_version": "v1",
            "target_step_key": "receipt",
            "target_activation_sequence": "1",
            "correlation_key": "B-2",
            "payload": '{"received": true}',
            "reason": "warehouse confirmed",
            "evidence_ref": "wms:77",
            "confirm": "yes",
            "csrf_token": _csrf(page.data),
        },
    )
    assert r.status_code == 302, _text(r)[:1500]
    assert sql("SELECT state FROM workflow_signals WHERE instance_id = :i", i=wid)[0][0] == "CONSUMED"
    sch = admin.get(f"/console/schedules/{scenario.schedule_id}")
    assert (
        "nightly-orders" in sch.data.decode() and sch.data.decode().count("<li>") >= 5
    )  # next five fire times
    no_reason = admin.post(
        f"/console/schedules/{scenario.schedule_id}/pause",
        data={"confirm": "yes", "csrf_token": _csrf(sch.data)},
    )
    assert no_reason.status_code == 400 and "say why" in no_reason.data.decode()
    bad = admin.post(
        f"/console/schedules/{scenario.schedule_id}/edit",
        data={
            "rule": "cron",
            "cron": "every tuesday",
            "timezone": "UTC",
            "overlap": "skip",
            "version": "v1",
            "input": "{}",
            "confirm": "yes",
            "csrf_token": _csrf(sch.data),
        },
    )
    assert bad.status_code == 400 and 'value="every tuesday"' in bad.data.decode()


def test_rotating_a_secret_shows_it_once_and_never_in_the_cookie(admin, scenario):
    path = f"/console/integrations/subscriptions/{scenario.subscription_id}"
    page = admin.get(path)
    assert (
        "HTTP 502" in page.data.decode() and "s3cret" not in page.data.decode()
    )  # the URL's query is redacted
    pager = page.data.decode()
    # issue 47: the plural of delivery
    assert "deliverys" not in pager and re.search(r"\d+ (delivery|deliveries)\b", pager)
    r = admin.post(
        path + "/rotate", data={"grace_seconds": "60", "confirm": "yes", "csrf_token": _csrf(page.data)}
    )
    secret = re.search(r"whsec_[A-Za-z0-9+/=]+", r.data.decode())
    assert r.status_code == 200 and secret
    cookie = admin.get_cookie("ledgerflow_console", path="/console")
    assert secret.group(0) not in (cookie.value if cookie else "")
    assert secret.group(0) not in admin.get(path).data.decode()


def test_search_by_job_workflow_business_key_and_trace(admin, scenario):
    for term, where in (
        (str(scenario.dead_job), f"/console/jobs/{scenario.dead_job}"),
        (scenario.wf["failed"], f"/console/workflows/{scenario.wf['failed']}"),
        (scenario.business_key, f"/console/workflows/{scenario.wf['running']}"),
        (scenario.trace_id, f"/console/chain/{scenario.trace_id}"),
        (scenario.schedule_id, f"/console/schedules/{scenario.schedule_id}"),
    ):
        r = admin.get("/console/search", query_string={"q": term})
        assert r.status_code == 302 and r.headers["Location"].endswith(where), term
    none = admin.get("/console/search", query_string={"q": "no-such-thing"})
    assert none.status_code == 200 and "Nothing found" in none.data.decode()


def test_a_platform_operator_crosses_namespaces_without_dead_ends(app, admin, scenario):
    jobs = _text(admin.get(f"/console/jobs?instance_id={scenario.wf['other']}"))
    assert scenario.other_ns in jobs  # the namespace column
    assert f'/console/workflows/{scenario.wf["other"]}"' in jobs  # its workflow link works (below)
    other = admin.get(f"/console/workflows/{scenario.wf['other']}")
    assert (
        other.status_code == 200
        and "actions on it need a credential of that namespace" in other.data.decode()
    )
    assert "Control</h2>" not in other.data.decode()
    switched = _text(admin.get(f"/console/workflows?ns={scenario.other_ns}"))
    assert scenario.wf["other"] in switched and "other-tenant-flow" in switched
    tasks = _text(admin.get(f"/console/tasks?ns={scenario.other_ns}"))
    assert "b-queue" in tasks and "read-only" in tasks and "Claim next" not in tasks
    tenant = _client(app, scenario.tokens["tenant"])
    assert tenant.get(f"/console/workflows/{scenario.wf['other']}").status_code == 404
    assert tenant.get(f"/console/workflows?ns={scenario.other_ns}").status_code == 404
    assert 'name="ns"' not in tenant.get("/console/workflows").data.decode()  # no switcher


def test_totals_and_previous_next_paging(admin):
    marker = "paging-" + uuid.uuid4().hex[:8]
    with transaction() as conn:
        for i in range(55):
            enqueue(conn, "webhook_delivery", {"marker": marker, "n": i})
    first = _text(admin.get(f"/console/jobs?keyword={marker}"))
    assert "1–50 of 55 jobs" in first and "Previous" not in first
    nxt = re.search(r'rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = _text(admin.get("/console/jobs" + nxt))
    assert "51–55 of 55 jobs" in second and "page 2" in second, re.search(
        r"<caption>.*?</caption>", second
    ).group(0)
    prev = re.search(r'rel="prev" href="([^"]+)"', second).group(1).replace("&amp;", "&")
    assert "1–50 of 55 jobs" in _text(admin.get(prev if prev.startswith("/") else "/console/jobs" + prev))


def test_the_procfiles_web_refuses_production_without_a_session_key(tmp_path):
    """The Procfile's own ``web`` line: one line saying what to set, no traceback, no worker started."""
    line = next(ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith("web:"))
    env = {k: v for k, v in os.environ.items() if k != "LEDGERFLOW_SECRET_KEY"}
    env.update(
        LEDGERFLOW_ENV="production",
        LEDGERFLOW_CURSOR_SECRET="c" * 48,
        PORT="5999",
        LEDGERFLOW_BIND_HOST="127.0.0.1",
        PROMETHEUS_MULTIPROC_DIR=str(tmp_path),
        PATH=str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", ""),
    )
    out = subprocess.run(
        ["bash", "-c", "exec " + line.split(":", 1)[1]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    lines = [ln for ln in (out.stdout + out.stderr).splitlines() if "refusing to start" in ln]
    assert len(lines) == 1 and "LEDGERFLOW_SECRET_KEY" in lines[0]
    assert "Traceback" not in out.stderr and "Booting worker" not in out.stderr


def test_schedule_subscription_and_rule_actions_work_from_their_pages_and_audit_the_reason(
    app, admin, scenario
):
    """The actions of the schedule, subscription and rule pages, posted as their forms post them: each does
    what it says, and the reason typed is written to its audit row (enable / disable of a subscription or a
    rule took a reason, in the console and the API, and dropped it before)."""

    def post(page_path: str, action: str, **data: str) -> str:
        page = admin.get(page_path)
        r = admin.post(action, data={**data, "confirm": "yes", "csrf_token": _csrf(page.data)})
        assert r.status_code == 302, (action, _text(r)[:1500])
        return _text(admin.get(r.headers["Location"]))

    def reason(action: str, target: str) -> str | None:
        return sql("SELECT reason FROM operation_audit WHERE action = :a AND target_id = :t "
                   "ORDER BY created_at DESC LIMIT 1", a=action, t=target)[0][0]  # fmt: skip

    sub, sid = f"/console/integrations/subscriptions/{scenario.subscription_id}", scenario.subscription_id
    assert "Subscription disabled" in post(
        sub, sub + "/enabled", enabled="false", reason="receiver moves hosts"
    )
    assert reason("event_subscription.disable", sid) == "receiver moves hosts"
    assert "Subscription enabled" in post(sub, sub + "/enabled", enabled="true", reason="receiver moved")
    assert reason("event_subscription.enable", sid) == "receiver moved"
    shown = post(sub, f"{sub}/deliveries/{scenario.delivery_id}/redeliver", reason="route fixed")
    assert f"Delivery {scenario.delivery_id} queued again" in shown
    assert "Redelivery: " in post(sub, sub + "/redeliver", since="2020-01-01T00:00:00", rate="5")
    rule, rid = f"/console/integrations/rules/{scenario.rule_id}", scenario.rule_id
    assert "Rule disabled" in post(rule, rule + "/enabled", enabled="false", reason="starts too many")
    assert reason("automation_rule.disable", rid) == "starts too many"
    assert "Rule enabled" in post(rule, rule + "/enabled", enabled="true", reason="budget lowered")
    assert reason("automation_rule.enable", rid) == "budget lowered"
    api = app.test_client()
    for path, action, target in ((f"/v1/automation-rules/{rid}/disable", "automation_rule.disable", rid),
                                 (f"/v1/event-subscriptions/{sid}/disable", "event_subscription.disable", sid)):  # fmt: skip
        r = api.post(path, json={"reason": "said through the API"}, headers={
            "Authorization": f"Bearer {scenario.tokens['tenant']}", "Idempotency-Key": uuid.uuid4().hex})  # fmt: skip
        assert r.status_code == 200, r.json
        assert reason(action, target) == "said through the API"
    post(rule, rule + "/enabled", enabled="true", reason="back on")
    post(sub, sub + "/enabled", enabled="true", reason="back on")
    sch = f"/console/schedules/{scenario.schedule_id}"
    assert "Launched: a manual fire" in post(sch, sch + "/launch", reason="catch up after the outage")
    changed = post(sch, sch + "/edit", rule="interval", interval_seconds="7200", timezone="UTC", overlap="skip",
                   version="v1", input='{"order_id": "N-2", "amount": 2}')  # fmt: skip
    assert "Schedule nightly-orders changed" in changed and "every 7200 s" in changed


def test_a_rule_that_disabled_itself_says_why_on_its_pages(admin, scenario):
    """A rule past its rate budget, or whose author was revoked, disables itself with a reason (X-AUTO):
    the rule page and the integrations list show it, as they show a subscription's (they showed only
    "disabled" before)."""
    admin_p = scenario.principals["admin"]
    with transaction() as conn:
        rule = automation.create_rule(conn, admin_p, "req_console", {
            "name": "budget-" + uuid.uuid4().hex[:6], "event_type": "workflow.failed", "definition_id": None,
            "conditions": [], "action": {"kind": "start_workflow", "definition_id": scenario.defs["risk"],
                                         "version": "v1", "input": {"customer": "$.event.workflow_id"}},
        })  # fmt: skip
        automation.disable_rule(
            conn, admin_p.namespace_id, rule["id"], "disabled automatically: rate budget spent"
        )
    assert "rate budget spent" in _text(admin.get(f"/console/integrations/rules/{rule['id']}"))
    assert "rate budget spent" in _text(admin.get("/console/integrations"))


def _rows(body: str) -> dict[str, str]:
    """The workflow list's rows by workflow id (the row's text)."""
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    out = {}
    for row in rows:
        found = re.search(r'href="/console/workflows/([0-9a-f]{32})"', row)
        if found:
            out[found.group(1)] = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", row))).strip()
    return out


def test_the_workflow_list_filters_by_definition_name_and_shows_ended_and_duration(admin, app, scenario):
    """The definition filter takes a name (offered in a datalist of the namespace's names) or an id; the
    old ``definition_id`` URL filter keeps working and shows the name; a name of no definition of the
    namespace is refused in place. Every row shows when it ended (the exact UTC time as text, no hover
    needed) and how long it ran, or how long it has been running."""
    risk, order, wf = scenario.defs["risk"], scenario.defs["order"], scenario.wf
    by_name = admin.get("/console/workflows?definition=risk-check")
    assert by_name.status_code == 200
    body = by_name.data.decode()
    assert '<datalist id="definition-names">' in body
    assert '<option value="risk-check">' in body and '<option value="order-fulfilment">' in body
    assert '<option value="other-tenant-flow">' not in body  # another namespace's names are not offered
    assert 'name="definition" type="text" value="risk-check"' in body
    rows = _rows(body)
    assert wf["failed"] in rows and wf["running"] not in rows and wf["review"] not in rows
    assert f'name="filter_qs" value="definition_id={risk}"' in body  # "all matching" acts on the same set
    # the live refresh (htmx swaps the list alone) reads no names
    live = admin.get("/console/workflows?definition=risk-check", headers={"HX-Request": "true"})
    assert live.status_code == 200 and set(_rows(live.data.decode())) == set(rows)
    assert '<option value="risk-check">' not in live.data.decode()
    # an id in the same field, and the URL filter of before: the same rows, the field shows the name
    for path in (f"/console/workflows?definition={risk}", f"/console/workflows?definition_id={risk}"):
        again = admin.get(path)
        assert again.status_code == 200 and set(_rows(again.data.decode())) == set(rows), path
        assert 'name="definition" type="text" value="risk-check"' in again.data.decode()
    # refused in place: no such name here, a name and another definition's id, a name too long
    for query, said in (
        ("definition=no-such-flow", "no definition named 'no-such-flow' here"),
        ("definition=other-tenant-flow", "no definition named 'other-tenant-flow' here"),
        (f"definition=risk-check&definition_id={order}", "names another definition than definition_id"),
        ("definition=" + "x" * 200, "a definition name"),
        ("definition_id=nothex", "a 32-char lowercase hex id"),
    ):
        refused = admin.get(f"/console/workflows?{query}")
        assert refused.status_code == 400, query
        assert said in _text(refused) and 'aria-invalid="true"' in refused.data.decode(), query
        assert _rows(refused.data.decode()) == {}
    # a platform operator filters another namespace by its own names
    other = admin.get(f"/console/workflows?ns={scenario.other_ns}&definition=other-tenant-flow")
    assert other.status_code == 200 and wf["other"] in _rows(other.data.decode())

    # the Ended and Duration columns
    every = _rows(admin.get(f"/console/workflows?definition_id={risk}").data.decode())
    [(created, completed)] = sql(
        "SELECT created_at, completed_at FROM workflow_instances WHERE id = :i", i=wf["failed"]
    )
    ended = completed.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    took = (completed - created).total_seconds()
    assert ended in every[wf["failed"]] and "running for" not in every[wf["failed"]]
    assert duration(took) in every[wf["failed"]]
    running = _rows(admin.get(f"/console/workflows?definition_id={order}").data.decode())[wf["running"]]
    assert "running for " in running and "—" in running  # not ended


def test_a_rows_timing():
    now = datetime(2026, 12, 5, 12, 0, 0, tzinfo=UTC)
    done = {"state": "FAILED", "created_at": "2026-12-05T11:00:00Z", "completed_at": "2026-12-05T11:02:05.5Z"}
    assert timing(done, now) == {"ended": datetime(2026, 12, 5, 11, 2, 5, 500000, tzinfo=UTC),
                                 "duration_s": 125.5, "running": False}  # fmt: skip
    live = {"state": "WAITING", "created_at": "2026-12-05T11:59:00Z"}
    assert timing(live, now) == {"ended": None, "duration_s": 60.0, "running": True}
    assert timing({"state": "CANCELLED", "created_at": "2026-12-05T11:00:00Z"}, now)["duration_s"] is None
