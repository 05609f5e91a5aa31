"""The runtime status rollup (L-STATUS): final minutes are rolled once by a drain sweep, and the last
hour's figures (rolled minutes + the live rest) equal the exact ones for counts, failures and average
duration, with P95 / P99 within the histogram's stated error, while the live part reads only the
attempts that are not rolled."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from actors.maintenance import run_drain
from app.db import transaction
from app.ledger import histogram, rollup, status
from app.ledger.drain import drain
from tests.ledger_helpers import add_job, claim_one, scalar, settle, settlement

LAG = 11 * 60  # the default execution timeout + 1 min

# ``n`` attempts of job ``:job`` started evenly between ``:oldest`` and ``:newest`` seconds ago, with
# queue waits spread from 1 ms to ~100 s (log-uniform), one in 7 failed, durations on most
_ATTEMPTS = text(
    """
INSERT INTO workflow_job_executions (job_id, generation, attempt, status, lease_token, due_at, started_at,
    finished_at, duration_ms)
SELECT :job, 1, :first + g, CAST(CASE WHEN g % 7 = 0 THEN 'failed' ELSE 'succeeded' END AS workflow_attempt_status),
       gen_random_uuid(),
       s.at - make_interval(secs => power(10, ((g * 37) % 1000) / 200.0) / 1000),
       s.at, s.at, CASE WHEN g % 10 <> 0 THEN (g * 13) % 5000 END
FROM generate_series(0, :n - 1) g,
     LATERAL (SELECT now() - make_interval(secs => :oldest - (:oldest - :newest) * g::float8 / :n)) AS s(at)
"""
)


def _attempts(db, job: int, n: int, *, oldest: float, newest: float, first: int = 1) -> None:
    with transaction(db) as conn:
        conn.execute(_ATTEMPTS, {"job": job, "n": n, "oldest": oldest, "newest": newest, "first": first})


def _roll_all(db, lag: float = LAG) -> int:
    """Run the sweep until it has nothing left to roll; the rows it wrote."""
    total = 0
    for _ in range(20):
        with transaction(db) as conn:
            n = rollup.roll_up(conn, 1000, lag_seconds=lag)
        total += n
        if n == 0:
            return total
    raise AssertionError("the rollup did not catch up")


def _status(db) -> dict[str, Any]:
    with db.connect() as conn, conn.begin():
        return status.runtime_status(conn)


def _series(db) -> dict[str, Any]:
    with db.connect() as conn, conn.begin():
        return status.hour_series(conn)


def _minutes(db) -> list[tuple]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT * FROM workflow_attempt_minutes ORDER BY 1, 2"))]


def _within_histogram_error(reported: float | None, exact: float | None) -> bool:
    """The histogram's bound in seconds (figures are rounded to 1 ms)."""
    assert reported is not None and exact is not None
    return exact - 0.001 <= reported <= histogram.RELATIVE_ERROR * exact + 0.002


def test_the_sweep_rolls_final_minutes_once(db):
    advance, outbound = add_job(db, "delay_wake"), add_job(db, "webhook_delivery")
    _attempts(db, advance, 300, oldest=50 * 60, newest=20 * 60)
    _attempts(db, outbound, 100, oldest=40 * 60, newest=30 * 60)
    _attempts(db, advance, 30, oldest=50, newest=10, first=1000)  # in the last minute: not final yet
    with transaction(db) as conn:
        # bounded per call: 5 minutes, a row per ledger queue each
        assert rollup.roll_up(conn, 1000, lag_seconds=LAG, max_minutes=5) == 10
    _roll_all(db)
    rows = _minutes(db)
    assert {r[1] for r in rows} == {"workflow-ledger", "workflow-ledger-outbound"}
    assert sum(r[2] for r in rows) == 400  # every attempt of a minute that ended a minute ago, no younger one
    assert scalar(
        db,
        "SELECT max(minute) < now() - interval '2 minutes'"  # ended a minute ago, at least
        " AND max(minute) >= date_trunc('minute', now()) - interval '3 minutes' FROM workflow_attempt_minutes",
    )
    # each rolled minute holds exactly that minute's attempts of its queue
    exact = scalar(
        db,
        """SELECT count(*) FROM workflow_attempt_minutes m WHERE (m.attempts, m.failed, m.duration_n) <> (
               SELECT count(*), count(*) FILTER (WHERE e.status = 'failed'), count(e.duration_ms)
               FROM workflow_job_executions e JOIN workflow_jobs j ON j.id = e.job_id
               WHERE CAST(j.queue AS text) = m.queue AND e.started_at >= m.minute
                 AND e.started_at < m.minute + interval '1 minute')
             OR m.attempts <> (SELECT sum(h) FROM unnest(m.wait_hist) h)
             OR cardinality(m.wait_hist) <> :buckets""",
        buckets=histogram.BUCKETS,
    )
    assert exact == 0
    # idempotent: nothing more to roll; a minute rolled again is written once, identically
    assert _roll_all(db) == 0 and _minutes(db) == rows
    with transaction(db) as conn:
        conn.execute(
            text(
                "DELETE FROM workflow_attempt_minutes WHERE minute = (SELECT max(minute) FROM workflow_attempt_minutes)"
            )
        )
    assert _roll_all(db) >= 1 and _minutes(db) == rows
    with transaction(db) as conn:  # the same span twice (two racing sweeps): ON CONFLICT DO NOTHING
        assert rollup.roll_minutes(conn, rows[0][0], rows[-1][0]) == 0
    assert _minutes(db) == rows


def test_rolled_minutes_older_than_two_hours_go(db):
    with transaction(db) as conn:
        conn.execute(
            text(
                "INSERT INTO workflow_attempt_minutes SELECT date_trunc('minute', now()) - make_interval(mins => m),"
                " 'workflow-ledger', 1, 0, 0, 0, CAST(:h AS int[])"
                " FROM generate_series(100, 180) m WHERE m NOT BETWEEN 111 AND 129"
            ),
            {"h": histogram.of_waits([5.0])},
        )
    with transaction(db) as conn:  # the minutes 130..180 ago (nothing to roll with max_minutes=0)
        assert rollup.roll_up(conn, 1000, lag_seconds=LAG, max_minutes=0) == 51
    assert scalar(db, "SELECT count(*) FROM workflow_attempt_minutes") == 11
    assert scalar(db, "SELECT min(minute) >= now() - interval '120 minutes' FROM workflow_attempt_minutes")


def test_figures_with_rolled_minutes_match_the_exact_ones(db):
    advance, outbound = add_job(db, "delay_wake"), add_job(db, "webhook_delivery")
    # attempts over the whole hour (head, rolled middle, live tail) and an older one outside it
    _attempts(db, advance, 1500, oldest=59.5 * 60, newest=30)
    _attempts(db, outbound, 700, oldest=45 * 60, newest=13 * 60)
    _attempts(db, outbound, 5, oldest=3 * 3600, newest=2.5 * 3600, first=5000)
    exact, exact_series = _status(db), _series(db)  # nothing rolled: percentile_cont over the hour
    assert exact["attempts_1h"] == 2200
    _roll_all(db)
    assert (
        scalar(db, "SELECT count(*) FROM workflow_attempt_minutes WHERE minute >= now() - interval '1 hour'")
        > 30
    )
    rolled, rolled_series = _status(db), _series(db)
    for key in (
        "attempts_1h",
        "failed_attempts_1h",
        "failure_rate_1h",
        "avg_duration_ms_1h",
        "duration_samples_1h",
    ):
        assert rolled[key] == exact[key], key
    for key in ("queue_wait_p95_seconds", "queue_wait_p99_seconds"):
        assert _within_histogram_error(rolled[key], exact[key]), (key, rolled[key], exact[key])
    assert rolled["queue_wait_p95_seconds"] != exact["queue_wait_p95_seconds"]  # read from the histogram
    # the series: the same totals per pool; every bucket with attempts has percentiles
    for queue, buckets in rolled_series["pools"].items():
        exact_buckets = exact_series["pools"][queue]
        for key in ("attempts", "failed"):
            assert sum(b[key] for b in buckets) == sum(b[key] for b in exact_buckets), (queue, key)
        assert all((b["p95"] is None) == (b["attempts"] == 0) for b in buckets)
    # a bucket of rolled minutes (35..30 min ago) holds five whole minutes, counted by their start: with
    # the advance pool's attempts spread evenly, as many as the exact bucket (within rounding)
    mid_exact, mid = exact_series["pools"]["workflow-ledger"][5], rolled_series["pools"]["workflow-ledger"][5]
    assert (
        mid_exact["attempts"] == pytest.approx(1500 * 5 / 59, abs=2)
        and abs(mid["attempts"] - mid_exact["attempts"]) <= 2
    )


def _plan_nodes(plan: dict) -> list[dict]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(_plan_nodes(child))
    return nodes


def test_the_live_part_reads_only_the_attempts_not_rolled(db):
    job = add_job(db, "delay_wake")
    _attempts(db, job, 30_000, oldest=50 * 60, newest=15 * 60)
    _attempts(db, job, 20, oldest=50, newest=10, first=100_000)  # the last minute: not rolled yet
    _roll_all(db)
    with transaction(db) as conn:
        conn.execute(text("ANALYZE workflow_job_executions"))
    with db.connect() as conn, conn.begin():
        win = rollup.window(conn)
        assert win.rolled
        (plan,) = conn.execute(
            text("EXPLAIN (ANALYZE, FORMAT JSON) " + status._LIVE_BUCKETS.text), win.live_params()
        ).scalar()
        # the attempts are partitioned by day (migration 0031): a scan of each partition read
        scans = [
            n
            for n in _plan_nodes(plan["Plan"])
            if str(n.get("Relation Name", "")).startswith("workflow_job_executions")
        ]
        # a partition created ahead by the drain is empty (never analyzed): a scan of it reads no row
        assert scans and all(
            n["Node Type"] in ("Index Scan", "Bitmap Heap Scan")
            or (n["Actual Rows"] == 0 and n.get("Rows Removed by Filter", 0) == 0)
            for n in scans
        ), json.dumps(plan)
        # only the 20 recent attempts are read (the head before the first rolled minute is empty)
        assert sum(n["Actual Rows"] * n.get("Actual Loops", 1) for n in scans) == 20
        last_claim = json.dumps(
            conn.execute(text("EXPLAIN (FORMAT JSON) " + status._LAST_CLAIM.text)).scalar()
        )
        # the legacy partition's index of before, or a day partition's (``<partition>_started``)
        assert '"Scan Direction": "Backward"' in last_claim and (
            "ix_workflow_job_executions_started" in last_claim or "_started" in last_claim
        )
    s = _status(db)
    assert s["attempts_1h"] == 30_020 and s["last_claim_at"] is not None


def test_the_drain_runs_the_rollup_sweep(db, settings):
    job = add_job(db, "delay_wake")
    _attempts(db, job, 50, oldest=57 * 60, newest=52 * 60)
    _attempts(db, job, 50, oldest=30 * 60, newest=25 * 60, first=1000)
    drain(db, settings)  # the plain ledger drain has no rollup
    assert scalar(db, "SELECT count(*) FROM workflow_attempt_minutes") == 0
    report = run_drain()  # one call: the oldest 10 minutes of the hour, two queues
    assert report.swept["status_rollup"] == 2 * rollup.MINUTES_PER_CALL
    assert scalar(db, "SELECT sum(attempts) FROM workflow_attempt_minutes") == 50
    for _ in range(5):  # the next runs catch up to a minute ago
        run_drain()
    assert scalar(db, "SELECT sum(attempts) FROM workflow_attempt_minutes") == 100
    assert scalar(
        db,
        "SELECT max(minute) < now() - interval '2 minutes'"  # ended a minute ago, at least
        " AND max(minute) >= date_trunc('minute', now()) - interval '3 minutes' FROM workflow_attempt_minutes",
    )
    assert _status(db)["attempts_1h"] == 100


def test_the_lag_follows_the_execution_timeout(settings):
    assert rollup.lag_seconds(settings) == 11 * 60
    assert rollup.lag_seconds(replace(settings, execution_timeout_ms=40 * 60_000)) == 41 * 60


def test_the_sql_bucket_is_the_python_bucket(db):
    waits = [-3.0, 0.0, 0.2, 1.0, 1.0001, 1.5, 2.0, 2.5, 7.77, 1000.0, 12_345.6, 3_600_000.0, 1e12]
    waits += [histogram.upper_bound_ms(k) * f for k in range(1, histogram.BUCKETS, 7) for f in (0.999, 1.001)]
    sql = text(
        f"SELECT {histogram.bucket_sql('w')} FROM unnest(CAST(:w AS float8[])) WITH ORDINALITY AS t(w, i) ORDER BY i"
    )
    with db.connect() as conn:
        got = list(conn.execute(sql, {"w": waits}).scalars())
    assert got == [histogram.bucket_of(w) for w in waits]


def test_a_running_attempt_holds_its_minute_back(db):
    """Minutes are rolled once their attempts are final: not from the minute of the oldest attempt
    still running (found through the running jobs) on, until it ends or its minute ended ``lag`` ago."""
    job = add_job(db, "delay_wake")
    running = claim_one(db)  # attempt 1 of the job, running
    _attempts(db, job, 100, oldest=9 * 60, newest=90, first=10)
    with transaction(db) as conn:  # the running attempt (open on its job row) started 5 minutes ago
        conn.execute(
            text(
                "UPDATE workflow_jobs SET attempt_started_at = now() - interval '5 minutes',"
                " run_at = now() - interval '5 minutes 2 seconds' WHERE id = :j"
            ),
            {"j": job},
        )
    _roll_all(db)
    held = scalar(
        db,
        "SELECT (SELECT date_trunc('minute', attempt_started_at) FROM workflow_jobs WHERE id = :j)"
        " - max(minute) FROM workflow_attempt_minutes",
        j=job,
    )
    assert held == timedelta(minutes=1)  # rolled up to the minute before the running attempt's
    assert _status(db)["attempts_1h"] == 101  # the rest is live
    # the attempt fails; its minute is rolled by the next sweep with it as a failure
    settle(db, [settlement(running, "dead", error="boom")])
    _roll_all(db)
    failed_in_its_minute = """SELECT count(*) FILTER (WHERE e.status = 'failed') FROM workflow_job_executions e
        WHERE date_trunc('minute', e.started_at) = (SELECT date_trunc('minute', started_at)
                                                    FROM workflow_job_executions WHERE attempt = 1)"""
    rolled_failed = scalar(
        db,
        "SELECT failed FROM workflow_attempt_minutes WHERE queue = 'workflow-ledger' AND minute ="
        " (SELECT date_trunc('minute', started_at) FROM workflow_job_executions WHERE attempt = 1)",
    )
    assert rolled_failed == scalar(db, failed_in_its_minute) >= 1
    s = _status(db)
    assert s["attempts_1h"] == 101 and s["failed_attempts_1h"] == 15 + 1  # 15 crafted + the dead one


def test_an_attempt_running_past_the_lag_is_rolled_as_it_stands(db):
    """A job with a longer execution timeout than the default holds the rollup back by ``lag`` at
    most; then its minute is rolled with the attempt counted, not yet failed nor timed."""
    add_job(db, "delay_wake", execution_timeout_ms=3_600_000)
    claim_one(db)
    with transaction(db) as conn:
        conn.execute(text("UPDATE workflow_jobs SET attempt_started_at = now() - interval '20 minutes'"))
    _roll_all(db)
    assert scalar(db, "SELECT sum(attempts) FROM workflow_attempt_minutes") == 1
    assert scalar(db, "SELECT sum(duration_n) + sum(failed) FROM workflow_attempt_minutes") == 0
    assert scalar(db, "SELECT max(minute) < now() - interval '12 minutes' FROM workflow_attempt_minutes")
