"""Safe outbound HTTP in a job context (L-EFFECT-3, -4, -5) against a real local HTTP server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import text

from app.db import transaction
from app.ledger import http as http_module
from app.ledger import transitions
from app.ledger.drain import drain
from app.ledger.http import MARKER_WRITE_FAILED
from app.ledger.outcome import ExternalOutcomeUnknown, ManualRetryError, PermanentError, outcome_of
from tests.ledger_helpers import (
    OUTBOUND,
    InDoubtMarker,
    add_job,
    claim,
    claim_one,
    context_for,
    job,
    scalar,
    settle,
    settlement,
    wait_for,
)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request, client_address):  # a client that timed out and left
        pass


class Receiver:
    """A tiny HTTP receiver on 127.0.0.1 that counts every request it gets."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, idempotency key)
        self.lock = threading.Lock()
        self.release_hang = threading.Event()
        self.hanging = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                with receiver.lock:
                    receiver.requests.append((self.command, self.path, self.headers.get("X-Idempotency-Key")))
                if self.path.startswith("/status/"):
                    code = int(self.path.rsplit("/", 1)[1])
                    body = f'{{"status": {code}}}'.encode()
                    self.send_response(code)
                    if code in (301, 302):
                        self.send_header("Location", "/status/200")
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                elif self.path == "/hang":
                    receiver.hanging.set()
                    receiver.release_hang.wait(10)
                    self.send_response(200)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                elif self.path == "/close":
                    self.close_connection = True  # drop the connection without any response

            do_GET = do_POST = do_PUT = _handle

        self.server = _QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def count(self, path: str | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.requests if path is None or r[1] == path)


@pytest.fixture
def receiver(monkeypatch) -> Iterator[Receiver]:
    # the receiver is local: the destination policy opens loopback through its allow-list only
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")
    r = Receiver()
    r.thread.start()
    yield r
    r.release_hang.set()
    r.server.shutdown()
    r.server.server_close()


def _run_handler(engine, row, fn):
    """Run ``fn(ctx)`` as the pool would, settle its outcome, return (outcome, new status)."""
    ctx = context_for(row, engine)
    try:
        result, exc = fn(ctx), None
    except Exception as e:
        result, exc = None, e
    out = outcome_of(result, exc)
    done = settle(
        engine,
        [settlement(row, out.kind, result=out.result, error=out.error, error_code=out.error_code)],
    )
    return out, done.get(row["id"])


def _post(path, receiver, timeout=0.5):
    return lambda ctx: (
        ctx.http.request(
            "POST", receiver.url(path), step_key="deliver", json={"event": 1}, timeout=timeout
        ).status_code
    )


@pytest.mark.parametrize(
    "path", ["/status/500", "/status/503", "/status/408", "/status/429", "/hang", "/close"]
)
def test_unknown_outcomes_go_dead_and_are_never_resent(db, receiver, settings, path):
    j = add_job(db, "webhook_delivery", {"event": 1}, max_attempts=10)
    row = claim_one(db, OUTBOUND)
    out, status = _run_handler(db, row, _post(path, receiver, timeout=0.3))
    assert status == "dead" and out.error_code == "EXTERNAL_OUTCOME_UNKNOWN"
    jr = job(db, j)
    assert jr["error_code"] == "EXTERNAL_OUTCOME_UNKNOWN" and jr["status"] == "dead"
    # the side-effect marker stays open for the operator
    assert jr["effect_marker"] == {
        "method": "POST",
        "url": receiver.url(path),
        "step_key": "deliver",
        "attempt_id": row["attempt_id"],
    }
    assert receiver.count(path) == 1  # no transport-level retry
    # nothing sends it again automatically: no claim, and the drain leaves it alone
    assert drain(db, replace(settings, backoff_base_seconds=0)).reclaimed == []
    assert job(db, j)["status"] == "dead"
    receiver.release_hang.set()
    assert receiver.count(path) == 1


def test_success_stores_a_receipt_that_a_later_attempt_reuses(db, receiver):
    j = add_job(db, "webhook_delivery", {"event": 1})
    first = claim_one(db, OUTBOUND)
    ctx = context_for(first, db)
    res = ctx.http.request("POST", receiver.url("/status/201"), step_key="deliver", json={"a": 1})
    assert (res.status_code, res.reused, res.json()) == (201, False, {"status": 201})
    assert job(db, j)["effect_marker"] is None  # closed after a definite answer
    assert ctx.receipt("http:deliver")[0]
    # the settlement fails later for another reason; the retry reuses the receipt, no re-send
    assert settle(db, [settlement(first, "retry", error="db hiccup")], base=0) == {j: "pending"}
    second = claim_one(db, OUTBOUND)
    res2 = context_for(second, db).http.request("POST", receiver.url("/status/201"), step_key="deliver")
    assert (res2.status_code, res2.reused, res2.json()) == (201, True, {"status": 201})
    assert receiver.count() == 1


def test_idempotency_key_is_stable_across_attempts(db, receiver):
    j = add_job(db, "webhook_delivery", {"event": 1})
    row = claim_one(db, OUTBOUND)
    out, status = _run_handler(db, row, _post("/status/400", receiver))
    assert status == "dead" and out.error_code == "PERMANENT_ERROR"  # a definite refusal
    assert job(db, j)["effect_marker"] is None
    with transaction(db) as conn:
        transitions.retry_job(conn, j)
    row2 = claim_one(db, OUTBOUND)
    assert row2["generation"] == 2
    _run_handler(db, row2, _post("/status/400", receiver))
    keys = [r[2] for r in receiver.requests]
    assert len(keys) == 2 and keys[0] == keys[1] == f"{row['operation_key']}:deliver"


def test_safe_requests_set_no_marker_and_failures_stay_retryable(db, receiver):
    j = add_job(db, "webhook_delivery", {})
    row = claim_one(db, OUTBOUND)
    ctx = context_for(row, db)
    assert ctx.http.request("GET", receiver.url("/status/500"), step_key="probe").status_code == 500
    assert job(db, j)["effect_marker"] is None
    out, status = _run_handler(
        db, row, lambda c: c.http.request("GET", receiver.url("/close"), step_key="probe", timeout=0.3)
    )
    assert (out.kind, status) == ("retry", "pending")
    assert receiver.requests[0][2] == receiver.requests[1][2] == f"{row['operation_key']}:probe"


def test_redirects_are_not_followed(db, receiver):
    add_job(db, "webhook_delivery", {})
    row = claim_one(db, OUTBOUND)
    ctx = context_for(row, db)
    with pytest.raises(PermanentError, match="redirect 302"):
        ctx.http.request("POST", receiver.url("/status/302"), step_key="deliver")
    assert receiver.count() == 1 and receiver.count("/status/200") == 0


def test_executor_lost_while_the_marker_is_open_goes_dead_by_drain(db, receiver, settings):
    """The executor's lease runs out mid-call: the drain finds the marker open and dead-letters the
    job; the late response cannot close the marker nor store a receipt."""
    j = add_job(db, "webhook_delivery", {"event": 1})
    row = claim_one(db, OUTBOUND, lease_seconds=0.3)
    ctx = context_for(row, db)
    outcome: dict = {}

    def call():
        try:
            ctx.http.request("POST", receiver.url("/hang"), step_key="deliver", timeout=10)
        except Exception as exc:
            outcome["exc"] = exc

    t = threading.Thread(target=call)
    t.start()
    assert receiver.hanging.wait(10)
    wait_for(lambda: scalar(db, "SELECT lease_until <= now() FROM workflow_jobs WHERE id = :id", id=j))
    report = drain(db, replace(settings, backoff_base_seconds=0))
    assert [(r["id"], r["status"], r["error_code"]) for r in report.reclaimed] == [
        (j, "dead", "EXTERNAL_OUTCOME_UNKNOWN")
    ]
    receiver.release_hang.set()  # the receiver answers 200, too late
    t.join(10)
    assert isinstance(outcome["exc"], ExternalOutcomeUnknown)
    jr = job(db, j)
    assert jr["status"] == "dead" and jr["effect_marker"]["step_key"] == "deliver"
    assert "outcome needs confirmation" in jr["last_error"]
    assert scalar(db, "SELECT count(*) FROM workflow_job_effects") == 0
    assert settle(db, [settlement(row, "succeeded")]) == {}
    assert receiver.count() == 1


@pytest.mark.parametrize("kind", ["retry", "failed"])
def test_an_open_marker_is_dead_lettered_even_if_the_handler_hides_it(db, receiver, kind):
    """Regression: the ledger trusted the handler to report EXTERNAL_OUTCOME_UNKNOWN. A handler that
    wrapped it in an ordinary error (or any failure while the marker was open) got a backoff retry,
    the marker was cleared and the unsafe request was sent again automatically (L-EFFECT-4)."""
    j = add_job(db, "webhook_delivery", {"event": 1}, max_attempts=10)
    row = claim_one(db, OUTBOUND)

    def hides(ctx):
        try:
            ctx.http.request("POST", receiver.url("/status/502"), step_key="deliver")
        except ExternalOutcomeUnknown as exc:
            if kind == "retry":
                raise RuntimeError("delivery failed, try later") from exc
            raise ManualRetryError("ask a person") from exc

    out, status = _run_handler(db, row, hides)
    assert out.kind == kind
    assert status == "dead"
    jr = job(db, j)
    assert jr["error_code"] == "EXTERNAL_OUTCOME_UNKNOWN" and jr["effect_marker"]["step_key"] == "deliver"
    assert claim(db, OUTBOUND) == [] and receiver.count() == 1


def test_a_marker_whose_commit_answer_was_lost_is_cleared_and_the_call_retried(db, receiver, monkeypatch):
    """Regression (seen in CI's failover test): the marker's COMMIT took effect but its answer was lost, the
    handler raised the database error, and the settlement found the marker open: dead, EXTERNAL_OUTCOME_UNKNOWN,
    for a request that was never sent. The executor knows it was not sent: it clears the marker and the
    job retries, then delivers once."""
    j = add_job(db, "webhook_delivery", {"event": 1}, max_attempts=10)
    monkeypatch.setattr(
        transitions, "set_effect_marker", InDoubtMarker(transitions.set_effect_marker, down=False)
    )
    row = claim_one(db, OUTBOUND)
    out, status = _run_handler(db, row, _post("/status/200", receiver))
    assert (out.kind, out.error_code, status) == ("retry", MARKER_WRITE_FAILED, "pending")
    assert "not sent" in out.error and receiver.count() == 0
    assert job(db, j)["effect_marker"] is None
    with db.begin() as conn:  # its backoff passed
        conn.execute(text("UPDATE workflow_jobs SET run_at = now() WHERE id = :id"), {"id": j})
    out, status = _run_handler(db, claim_one(db, OUTBOUND), _post("/status/200", receiver))
    assert (out.kind, status) == ("succeeded", "succeeded") and receiver.count() == 1


def test_a_marker_that_cannot_be_cleared_is_dead_lettered_saying_the_call_was_not_sent(
    db, receiver, monkeypatch
):
    """PostgreSQL stays away past the clearing budget: the marker may be recorded, so the job is L-EFFECT-4's
    dead letter as before, and its error tells the operator that the request never left (safe to retry)."""
    monkeypatch.setattr(http_module, "UNSENT_CLEAR_SECONDS", 0.3)
    j = add_job(db, "webhook_delivery", {"event": 1}, max_attempts=10)
    monkeypatch.setattr(
        transitions, "set_effect_marker", InDoubtMarker(transitions.set_effect_marker, down=True)
    )
    row = claim_one(db, OUTBOUND)
    out, status = _run_handler(db, row, _post("/status/200", receiver))
    assert (out.kind, status) == ("retry", "dead")
    jr = job(db, j)
    assert jr["error_code"] == "EXTERNAL_OUTCOME_UNKNOWN" and jr["effect_marker"]["step_key"] == "deliver"
    assert "outcome needs confirmation" in jr["last_error"] and "the request was not sent" in jr["last_error"]
    assert receiver.count() == 0
