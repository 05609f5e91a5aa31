"""Settlement (L-STATE, L-DATA-2): the batched guarded ``transitions.settle`` and the pool's
handler -> outcome -> settle path."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.db import transaction
from app.ledger import handlers, transitions
from app.ledger.outcome import (
    ExternalOutcomeUnknown,
    ManualRetryError,
    PermanentError,
    RetryableError,
    Skip,
    outcome_of,
)
from app.ledger.pool import LedgerPool
from app.ledger.states import Pool
from tests.ledger_helpers import (
    add_job,
    attempts,
    claim_one,
    job,
    seconds_until_run_at,
    settle,
    settlement,
    status_attempts,
    wait_for,
)


def _settle_outcome(engine, row, outcome, duration_ms=0, **kw):
    item = settlement(
        row,
        outcome.kind,
        result=outcome.result,
        error=outcome.error,
        error_code=outcome.error_code,
        duration_ms=duration_ms,
    )
    return settle(engine, [item], **kw)


def _make_due(engine, job_id):
    with transaction(engine) as conn:
        conn.execute(text("UPDATE workflow_jobs SET run_at = now() WHERE id = :id"), {"id": job_id})


def test_success_stores_the_result_and_closes_the_attempt(db):
    j = add_job(db, "delay_wake", {})
    row = claim_one(db)
    assert _settle_outcome(db, row, outcome_of({"ok": 1}), duration_ms=42) == {j: "succeeded"}
    jr = job(db, j)
    assert jr["status"] == "succeeded" and jr["result"] == {"ok": 1}
    assert jr["lease_token"] is None and jr["lease_until"] is None and jr["execution_deadline"] is None
    assert jr["finished_at"] is not None and jr["error_code"] is None
    (a,) = attempts(db, j)
    assert a["status"] == "succeeded" and a["response"] == {"ok": 1}
    assert a["duration_ms"] == 42 and a["finished_at"] >= a["started_at"] and a["error"] is None


def test_skip_settles_the_job_succeeded_and_the_attempt_skipped(db):
    j = add_job(db, "webhook_delivery", {})
    row = claim_one(db, "workflow-ledger-outbound")
    assert _settle_outcome(db, row, outcome_of(Skip("subscription disabled"))) == {j: "succeeded"}
    assert job(db, j)["status"] == "succeeded"
    (a,) = attempts(db, j)
    assert a["status"] == "skipped"
    assert a["response"] == {"skipped": True, "reason": "subscription disabled"}


def test_retry_backoff_is_30s_doubling_capped_at_15min_then_dead(db):
    """L-STATE-3: delay 30 s * 2^(n-1) after attempt n, one delay capped at 15 min; the budget
    spent -> dead. Checked on database time: run_at - settle time exactly, run_at - now() closely."""
    j = add_job(db, "delay_wake", {}, max_attempts=8)
    expected = [30, 60, 120, 240, 480, 900, 900]
    for n, delay in enumerate(expected, start=1):
        row = claim_one(db)
        assert row["attempts"] == n
        out = outcome_of(None, RuntimeError(f"attempt {n} failed"))
        assert _settle_outcome(db, row, out, duration_ms=n) == {j: "pending"}
        jr = job(db, j)
        assert jr["run_at"] - jr["updated_at"] == timedelta(seconds=delay), f"attempt {n}"
        assert seconds_until_run_at(db, j) == pytest.approx(delay, abs=1.0)
        assert jr["last_error"] == f"RuntimeError: attempt {n} failed"
        assert jr["error_code"] == "HANDLER_ERROR" and jr["finished_at"] is None
        assert not _claimable(db)  # not claimable before run_at
        _make_due(db, j)
    row = claim_one(db)
    assert row["attempts"] == 8
    assert _settle_outcome(db, row, outcome_of(None, RuntimeError("last"))) == {j: "dead"}
    jr = job(db, j)
    assert jr["status"] == "dead" and jr["finished_at"] is not None and jr["error_code"] == "HANDLER_ERROR"
    rows = attempts(db, j)
    assert [a["attempt"] for a in rows] == list(range(1, 9))
    assert all(a["status"] == "failed" and a["error"] and a["finished_at"] for a in rows)
    assert [a["duration_ms"] for a in rows[:7]] == list(range(1, 8))


@pytest.mark.parametrize(("retry_after", "delay"), [(None, 30), (10, 30), (120, 120), (3000, 900)])
def test_a_retry_after_never_stretches_one_delay_past_the_backoff_cap(db, retry_after, delay):
    """L-STATE-3 (and the source: 单次退避封顶 15 分钟): a single delay is capped at 15 min. A receiver's
    Retry-After (or a handler's ``retry_after``) lengthens the backoff up to that cap, never past it;
    before, a Retry-After of up to an hour was waited out in full."""
    j = add_job(db, "delay_wake", {}, max_attempts=3)
    row = claim_one(db)
    item = settlement(row, "retry", error="busy", error_code="HTTP_429", retry_after_s=retry_after)
    assert settle(db, [item]) == {j: "pending"}
    jr = job(db, j)
    assert jr["run_at"] - jr["updated_at"] == timedelta(seconds=delay)


def _claimable(engine) -> bool:
    with transaction(engine) as conn:
        return bool(
            conn.execute(
                text("SELECT 1 FROM workflow_jobs WHERE status = 'pending' AND run_at <= now()")
            ).first()
        )


def test_backoff_uses_the_configured_base_and_cap(db):
    j = add_job(db, "delay_wake", {}, max_attempts=10)
    got = []
    for _ in range(5):
        row = claim_one(db)
        _settle_outcome(db, row, outcome_of(None, RuntimeError()), base=0.5, cap=3)
        jr = job(db, j)
        got.append((jr["run_at"] - jr["updated_at"]).total_seconds())
        _make_due(db, j)
    assert got == [0.5, 1.0, 2.0, 3.0, 3.0]


def test_permanent_error_goes_dead_at_once(db):
    j = add_job(db, "delay_wake", {}, max_attempts=5)
    row = claim_one(db)
    assert _settle_outcome(db, row, outcome_of(None, PermanentError("bad input"))) == {j: "dead"}
    jr = job(db, j)
    assert (jr["status"], jr["error_code"], jr["attempts"]) == ("dead", "PERMANENT_ERROR", 1)
    assert jr["last_error"] == "PermanentError: bad input"
    assert attempts(db, j)[0]["error_code"] == "PERMANENT_ERROR"


def test_manual_retry_error_goes_failed(db):
    j = add_job(db, "delay_wake", {})
    row = claim_one(db)
    assert _settle_outcome(db, row, outcome_of(None, ManualRetryError("needs a person"))) == {j: "failed"}
    jr = job(db, j)
    assert (jr["status"], jr["error_code"]) == ("failed", "NEEDS_OPERATOR")
    assert attempts(db, j)[0]["status"] == "failed"


def test_external_outcome_unknown_keeps_the_marker_other_outcomes_clear_it(db):
    a, b = add_job(db, "webhook_delivery", {"n": 1}), add_job(db, "webhook_delivery", {"n": 2})
    rows = {r["id"]: r for r in [claim_one(db, "workflow-ledger-outbound") for _ in range(2)]}
    for r in rows.values():
        with transaction(db) as conn:
            assert transitions.set_effect_marker(
                conn, r["id"], r["generation"], str(r["lease_token"]), {"m": 1}
            )
    unknown = outcome_of(None, ExternalOutcomeUnknown("HTTP 502"))
    ok = outcome_of({"sent": True})
    items = [
        settlement(rows[a], unknown.kind, error=unknown.error, error_code=unknown.error_code),
        settlement(rows[b], ok.kind, result=ok.result),
    ]
    assert settle(db, items) == {a: "dead", b: "succeeded"}  # one batched statement, two outcomes
    assert job(db, a)["effect_marker"] == {"m": 1} and job(db, a)["error_code"] == "EXTERNAL_OUTCOME_UNKNOWN"
    assert job(db, b)["effect_marker"] is None


def test_finished_attempts_are_immutable_and_a_second_settle_changes_nothing(db):
    j = add_job(db, "delay_wake", {})
    row = claim_one(db)
    assert settle(db, [settlement(row, "succeeded", result={"v": 1}, duration_ms=5)]) == {j: "succeeded"}
    before = (job(db, j), attempts(db, j))
    # the same executor settling again (or with another outcome) is ignored
    assert settle(db, [settlement(row, "retry", error="late")]) == {}
    assert settle(db, [settlement(row, "failed", error="late")]) == {}
    assert (job(db, j), attempts(db, j)) == before
    # an operator cancel of the finished job bumps the generation but never rewrites the attempt
    with transaction(db) as conn:
        assert transitions.cancel_job(conn, j, "operator skip") is None  # succeeded is terminal
    with transaction(db) as conn:
        conn.execute(text("UPDATE workflow_jobs SET status = 'dead' WHERE id = :id"), {"id": j})
    with transaction(db) as conn:
        assert transitions.cancel_job(conn, j, "operator skip")["generation"] == 2
    assert attempts(db, j) == before[1]
    # and the database refuses any direct rewrite of a finished attempt
    with pytest.raises(DBAPIError, match="immutable"), transaction(db) as conn:
        conn.execute(
            text("UPDATE workflow_job_executions SET status = 'canceled' WHERE job_id = :id"), {"id": j}
        )


@pytest.fixture
def run_pool(db, fast_settings, handler_registry):
    pools: list[LedgerPool] = []

    def _run(pool=Pool.ADVANCE, **kw):
        p = LedgerPool(pool, settings=fast_settings, engine=db, worker_id="settle-test", **kw)
        p.start()
        pools.append(p)
        return p

    yield _run
    for p in pools:
        p.stop(timeout=5)


def _wait_settled(engine, ids, statuses=("succeeded", "failed", "dead")):
    def done():
        with engine.connect() as conn:
            n = conn.execute(
                text("SELECT count(*) FROM workflow_jobs WHERE id = ANY(:ids) AND status = ANY(:s)"),
                {"ids": list(ids), "s": list(statuses)},
            ).scalar()
        return n == len(ids)

    wait_for(done, timeout=10)


def test_pool_settles_every_kind_of_outcome(db, run_pool, monkeypatch):
    # "no handler" must hold whichever tests ran before (the engine's tests import the built-in
    # handlers, which register themselves for subprocess_join)
    monkeypatch.delitem(handlers._handlers, "subprocess_join", raising=False)

    def behave(ctx):
        mode = ctx.payload["mode"]
        if mode == "skip":
            return Skip("nothing to do")
        if mode == "fail":
            raise RuntimeError("transient")
        if mode == "permanent":
            raise PermanentError("bad")
        if mode == "manual":
            raise ManualRetryError("ask")
        return {"mode": mode}

    handlers.register("delay_wake", behave, replace=True)
    ids = {m: add_job(db, "delay_wake", {"mode": m}) for m in ("ok", "skip", "fail", "permanent", "manual")}
    ids["missing"] = add_job(db, "subprocess_join", {})  # no handler registered for this type
    run_pool()
    _wait_settled(db, [i for m, i in ids.items() if m != "fail"])
    wait_for(lambda: status_attempts(db, ids["fail"]) == ("pending", 1))
    got = {m: (job(db, i)["status"], job(db, i)["error_code"]) for m, i in ids.items()}
    assert got == {
        "ok": ("succeeded", None),
        "skip": ("succeeded", None),
        "fail": ("pending", "HANDLER_ERROR"),
        "permanent": ("dead", "PERMANENT_ERROR"),
        "manual": ("failed", "NEEDS_OPERATOR"),
        "missing": ("dead", "HANDLER_MISSING"),
    }
    assert "no handler is registered" in job(db, ids["missing"])["last_error"]
    assert attempts(db, ids["skip"])[0]["status"] == "skipped"
    assert job(db, ids["ok"])["result"] == {"mode": "ok"}
    assert all(a["duration_ms"] is not None for i in ids.values() for a in attempts(db, i))


@pytest.mark.parametrize("bad", [{"x": float("nan")}, "nul\x00byte"])
def test_a_result_jsonb_refuses_does_not_wedge_the_pool(db, run_pool, bad):
    """Regression: a handler result PostgreSQL cannot store (NaN, a NUL character) made the batched
    settle fail on every pass, and since claims share that transaction the whole pool stopped."""
    handlers.register("delay_wake", lambda ctx: bad if ctx.payload.get("bad") else {"ok": True}, replace=True)
    handlers.register(
        "task_timeout", lambda ctx: (_ for _ in ()).throw(RuntimeError("nul\x00here")), replace=True
    )
    poison = add_job(db, "delay_wake", {"bad": True})
    nul_error = add_job(db, "task_timeout", {}, max_attempts=1)
    run_pool()
    _wait_settled(db, [poison, nul_error])
    later = add_job(db, "delay_wake", {})
    _wait_settled(db, [later])
    assert job(db, poison)["status"] == "succeeded" and "repr" in job(db, poison)["result"]
    assert job(db, nul_error)["status"] == "dead" and "nul" in job(db, nul_error)["last_error"]
    assert job(db, later)["result"] == {"ok": True}


class _Coded(Exception):
    def __init__(self, code):
        super().__init__("coded")
        self.code = code


@pytest.mark.parametrize(
    ("raise_", "delay"),
    [
        (RetryableError("busy", retry_after=float("inf")), 30),
        (RetryableError("busy", retry_after=1e300), 900),
        (_Coded("NUL\x00CODE"), 30),
    ],
    ids=["retry-after-inf", "retry-after-1e300", "nul-in-code"],
)
def test_an_unwritable_retry_after_or_error_code_does_not_wedge_the_pool(db, run_pool, raise_, delay):
    """Regression: an infinite or huge ``retry_after`` put ``now() + inf * interval '1 second'``
    (out of range) into the settle statement, and a NUL in an error code made psycopg refuse the batch:
    either failed every pass of the pool, so nothing it held ever settled and it claimed nothing more."""

    def behave(ctx):
        if ctx.payload.get("bad"):
            raise raise_
        return {"ok": True}

    handlers.register("delay_wake", behave, replace=True)
    poison = add_job(db, "delay_wake", {"bad": True}, max_attempts=5)
    run_pool()
    wait_for(lambda: status_attempts(db, poison) == ("pending", 1), timeout=10)
    later = add_job(db, "delay_wake", {})
    _wait_settled(db, [later])
    jr = job(db, poison)
    assert jr["error_code"] in ("HANDLER_ERROR", "NUL\\x00CODE")
    # not a number a wait can be: the backoff alone (30 s); a huge one: L-STATE-3's cap of one delay (15 min)
    assert seconds_until_run_at(db, poison) == pytest.approx(delay, abs=5)
