"""A tested path through a real PgBouncer in transaction mode: Debian's ``pgbouncer`` (1.18,
which cannot hold prepared statements and refuses the ``options`` startup parameter) started by the
test on a free port with a generated config, LEDGERFLOW_DB_TRANSACTION_POOLING on, and then all four
Procfile processes of the fault suite's short scenario pointed at it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import make_url

from chaos import pgbouncer
from chaos.__main__ import table
from chaos.scenarios import QUICK, run

ROOT = Path(__file__).resolve().parents[2]
POOLING = {"LEDGERFLOW_DB_TRANSACTION_POOLING": "on"}


@pytest.fixture(scope="module")
def through_pgbouncer():
    if pgbouncer.binary() is None:
        pytest.skip("Debian's pgbouncer is not installed: apt-get install -y pgbouncer (.ci/run installs it)")
    with pgbouncer.running(os.environ["LEDGERFLOW_SERVER_DATABASE_URL"]) as url:
        yield url


def _test_db_through(server: str) -> str:
    return (
        make_url(server)
        .set(database=make_url(os.environ["DATABASE_URL"]).database)
        .render_as_string(hide_password=False)
    )


def _python(code: str, url: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": url, **env},
    )


# 20 transactions on 5 connections of the app's engine: each statement run more often than psycopg's
# prepare threshold (5), each transaction on whichever server connection PgBouncer picks
ENGINE_PROBE = """
from concurrent.futures import ThreadPoolExecutor
from sqlalchemy import text
from app.db import get_engine, transaction
def one(i):
    with transaction() as conn:
        return conn.execute(text("SELECT current_setting('statement_timeout'), current_setting('TimeZone'), "
                                 "current_setting('idle_in_transaction_session_timeout'), :i"), {"i": i}).one()
with ThreadPoolExecutor(5) as pool:
    rows = list(pool.map(one, range(100)))
print(sorted({tuple(r[:3]) for r in rows}))
"""


def test_the_apps_connections_work_through_pgbouncer_only_with_transaction_pooling_on(through_pgbouncer):
    url = _test_db_through(through_pgbouncer)
    refused = _python(ENGINE_PROBE, url)
    assert refused.returncode != 0 and "unsupported startup parameter: options" in refused.stderr
    ok = _python(ENGINE_PROBE, url, **POOLING)
    assert ok.returncode == 0, ok.stderr
    # the session settings hold inside every transaction (SET LOCAL), whichever server connection ran it
    assert ok.stdout.strip() == "[('30s', 'UTC', '1min')]", ok.stdout


# Not left to the threads' timing (8 threads may happen to keep their server connections): connection a
# runs a statement past psycopg's prepare threshold, each transaction on the server connection PgBouncer
# hands out last (LIFO, its default), where the statement is prepared; b then holds that server connection
# in an open transaction, so a's next transaction runs on another one, where it was never prepared.
MOVED_PROBE = """
from sqlalchemy import text
from app.db import get_engine
eng = get_engine()
q = text("SELECT current_setting('TimeZone'), :i")
with eng.connect() as a, eng.connect() as b:
    for i in range(8):
        with a.begin():
            a.execute(q, {"i": i}).one()
    with b.begin():
        b.execute(text("SELECT 1")).one()
        with a.begin():
            a.execute(q, {"i": 99}).one()
print("moved")
"""


def test_prepared_statements_break_through_pgbouncer_1_18_and_the_setting_turns_them_off(through_pgbouncer):
    url = _test_db_through(through_pgbouncer)
    prepared = _python(MOVED_PROBE, url, **POOLING, LEDGERFLOW_PREPARED_STATEMENTS="on")
    assert prepared.returncode != 0 and "prepared statement" in prepared.stderr, prepared.stderr[-2000:]
    off = _python(MOVED_PROBE, url, **POOLING)  # transaction pooling turns them off by default
    assert off.returncode == 0 and off.stdout.strip() == "moved", off.stderr[-2000:]


# the API's routes through PgBouncer (publish, start, the step views read in REPEATABLE READ, /metrics read
# only): what a transaction sets first must not be taken by the session settings of transaction pooling
WEB_PROBE = """
import json, uuid
from web import create_app
from app.auth import create_credential, Scope
from app.db import transaction
doc = json.load(open("docs/examples/first_definition.json"))
app = create_app()
c = app.test_client()
with transaction() as conn:
    tok = create_credential(conn, namespace="pgb-" + uuid.uuid4().hex[:6], name="p", platform=True, scopes=[
        Scope.DEFINITIONS_READ, Scope.DEFINITIONS_PUBLISH, Scope.WORKFLOWS_READ, Scope.WORKFLOWS_START,
        Scope.ENGINE_MONITOR]).token
h = {"Authorization": f"Bearer {tok}"}
def post(path, body):
    r = c.post(path, json=body, headers={**h, "Idempotency-Key": uuid.uuid4().hex})
    assert r.status_code in (200, 201), (path, r.status_code, r.get_data(as_text=True))
    return r.get_json()["data"]
d = post("/v1/workflow-definitions", {"name": "p"})["definition"]
post(f"/v1/workflow-definitions/{d['id']}/versions", doc)
w = post("/v1/workflows", {"definition_id": d["id"], "version": "v1", "input": {"name": "x"}})["instance"]
for _ in range(10):
    for path in (f"/v1/workflows/{w['id']}/steps", f"/v1/workflows/{w['id']}/steps/wait", f"/v1/workflows/{w['id']}"):
        r = c.get(path, headers=h)
        assert r.status_code == 200, (path, r.get_data(as_text=True))
m = c.get("/metrics", headers=h).get_data(as_text=True)
errors = [l for l in m.splitlines() if l.startswith("ledgerflow_ledger_scrape_errors{")]
print("metrics scrape errors:", errors)
assert errors and all(l.endswith(" 0.0") for l in errors), errors
print("web probe ok")
"""


def test_the_api_works_through_pgbouncer(through_pgbouncer):
    ok = _python(WEB_PROBE, _test_db_through(through_pgbouncer), **POOLING, LEDGERFLOW_METRICS="1")
    assert ok.returncode == 0 and "web probe ok" in ok.stdout, (ok.stdout + ok.stderr)[-3000:]


def test_the_quick_fault_run_through_pgbouncer_keeps_every_invariant(through_pgbouncer):
    server = os.environ["LEDGERFLOW_SERVER_DATABASE_URL"]
    result = run("mixed", QUICK, server, timeout=120, process_server_url=through_pgbouncer, settings=POOLING)
    report = table([result])
    assert result.error is None, report
    assert result.faults >= 5, report
    assert len(result.invariants) >= 12, report
    assert result.violations == 0, report
    assert result.jobs > 0 and result.workflows > 0, report
    # and the processes' work really went through PgBouncer: its own statistics of the run's database
    admin = make_url(through_pgbouncer).set(drivername="postgresql", database="pgbouncer")
    with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
        cur = conn.execute("SHOW STATS")
        names = [d.name for d in cur.description]
        stats = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
    transactions = sum(s["total_xact_count"] for s in stats if s["database"].startswith("lf_chaos_"))
    # at least a transaction per job (its effect) and per workflow (its start): a fixed figure (it was 1000)
    # counted the pools' idle passes too, as many as the run's seconds, and failed once the work got faster
    assert transactions >= result.jobs + result.workflows, stats
