"""TRIGGER steps against real PostgreSQL and a local HTTP receiver on 127.0.0.1: the response becomes
the step output; a refusal fails the step; an unknown outcome (5xx) sends the job to the dead letter
and the step and instance to NEEDS_REVIEW, also when the drain finds it (executor lost mid-call)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from sqlalchemy import text

from app.db import transaction
from app.engine.handlers import outbound, triggers
from app.errors import InvalidArgument
from app.ids import new_id
from app.ledger import handlers
from app.ledger.outcome import EXTERNAL_OUTCOME_UNKNOWN
from app.settings import get_settings
from tests.engine.helpers import instance, make_due, publish, run_jobs, start

NS = "ns-" + new_id()[:8]
OUTBOUND = "workflow-ledger-outbound"


@dataclass
class Receiver:
    url: str
    calls: list[dict] = field(default_factory=list)
    status: int = 200
    reply: str = '{"accepted": true, "ticket": 12345678901234567890}'


def _serve(port: int) -> tuple[ThreadingHTTPServer, Receiver]:
    rec = Receiver(f"http://127.0.0.1:{port}")

    class H(BaseHTTPRequestHandler):
        def _any(self) -> None:
            n = int(self.headers.get("Content-Length") or 0)
            rec.calls.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "headers": dict(self.headers),
                    "body": self.rfile.read(n).decode(),
                }
            )
            raw = rec.reply.encode()
            self.send_response(rec.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        do_POST = do_PUT = do_GET = _any

        def log_message(self, *a) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", port), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, rec


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    for port in range(5510, 5530):
        try:
            srv, rec = _serve(port)
            break
        except OSError:
            continue
    else:  # pragma: no cover
        pytest.skip("no free port in 5510-5529")
    yield rec
    srv.shutdown()


@pytest.fixture
def trig(eng, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")  # the local receivers
    handlers.register("trigger_dispatch", triggers.trigger_dispatch, replace=True)
    monkeypatch.setattr(outbound, "get_settings", lambda: replace(get_settings(), signing_secret="s3cret"))
    return eng


def trigger_doc(url: str, **kw) -> dict:
    return {
        "version": "v1",
        "input_schema": {"type": "object"},
        "deadline_seconds": 600,
        "steps": [
            {
                "key": "notify",
                "kind": "TRIGGER",
                "url": url + "/hook",
                "body": {"order": "$.input.order"},
                "headers": {"X-Tenant": "acme"},
                **kw,
            },
        ],
        "output": {"answer": "$.steps.notify.output"},
    }


def test_trigger_completes_with_the_receivers_answer(trig, receiver) -> None:
    def_id = publish(trig, NS, trigger_doc(receiver.url))
    iid = start(trig, NS, def_id, {"order": 42})["id"]
    assert run_jobs(trig, queue=OUTBOUND) == [("trigger_dispatch", "succeeded")]
    [call] = receiver.calls
    assert json.loads(call["body"]) == {"order": 42} and call["headers"]["X-Tenant"] == "acme"
    assert call["headers"]["X-Idempotency-Key"].endswith(":trigger:" + _activation(trig, iid))
    ts = call["headers"]["X-Ledgerflow-Timestamp"]
    mac = hmac.new(b"s3cret", f"{ts}.{call['body']}".encode(), hashlib.sha256).hexdigest()
    assert call["headers"]["X-Ledgerflow-Signature"] == f"v1={mac}"
    view = instance(trig, iid)
    assert view["state"] == "SUCCEEDED"
    assert view["output"] == {
        "answer": {"status": 200, "body": {"accepted": True, "ticket": 12345678901234567890}}
    }
    # a retry of the settled job would reuse the receipt: the receiver is never called again
    assert run_jobs(trig, queue=OUTBOUND) == [] and len(receiver.calls) == 1


def _activation(eng, iid: str) -> str:
    with eng.connect() as conn:
        return conn.execute(
            text("SELECT activation_id FROM workflow_steps WHERE instance_id = :i AND key = 'notify'"),
            {"i": iid},
        ).scalar()


def test_a_refusal_fails_the_step(trig, receiver) -> None:
    receiver.status, receiver.reply = 422, '{"error": "bad order"}'
    def_id = publish(trig, NS, trigger_doc(receiver.url))
    iid = start(trig, NS, def_id, {"order": 1})["id"]
    run_jobs(trig, queue=OUTBOUND)
    run_jobs(trig)  # the instance's end (no compensation)
    view = instance(trig, iid)
    assert view["state"] == "FAILED" and len(receiver.calls) == 1
    with trig.connect() as conn:
        err = conn.execute(
            text("SELECT act_error FROM workflow_steps WHERE instance_id = :i AND activation_id IS NOT NULL"),
            {"i": iid},
        ).scalar()
    assert err["code"] == "TRIGGER_REJECTED" and err["status"] == 422


def test_an_unknown_outcome_goes_to_the_dead_letter_and_review(trig, receiver) -> None:
    receiver.status = 503
    def_id = publish(trig, NS, trigger_doc(receiver.url))
    iid = start(trig, NS, def_id, {"order": 7})["id"]
    [(_, kind)] = run_jobs(trig, queue=OUTBOUND)
    assert kind.startswith("dead")
    with trig.connect() as conn:
        job = conn.execute(
            text("SELECT status, error_code FROM workflow_jobs WHERE type = 'trigger_dispatch'")
        ).one()
        step_state = conn.execute(
            text("SELECT state FROM workflow_steps WHERE instance_id = :i AND key = 'notify'"), {"i": iid}
        ).scalar()
    assert (job.status, job.error_code) == ("dead", EXTERNAL_OUTCOME_UNKNOWN)
    assert step_state == "NEEDS_REVIEW" and instance(trig, iid)["state"] == "NEEDS_REVIEW"
    make_due(trig)
    assert run_jobs(trig, queue=OUTBOUND) == [] and len(receiver.calls) == 1  # never re-sent


def test_the_drain_path_sends_a_lost_call_to_review(trig, receiver) -> None:
    def_id = publish(trig, NS, trigger_doc(receiver.url))
    iid = start(trig, NS, def_id, {"order": 9})["id"]
    # as the drain leaves a job whose executor was lost after its marker: dead, outcome unknown
    with trig.begin() as conn:
        conn.execute(
            text("UPDATE workflow_jobs SET status = 'dead', error_code = :u WHERE type = 'trigger_dispatch'"),
            {"u": EXTERNAL_OUTCOME_UNKNOWN},
        )
    with transaction(trig) as conn:
        assert outbound.review_dead_unknown(conn, 100) == 1
    with transaction(trig) as conn:
        assert outbound.review_dead_unknown(conn, 100) == 0  # once
    assert instance(trig, iid)["state"] == "NEEDS_REVIEW"


def dispatch_doc(url: str) -> dict:
    return {
        "version": "v1",
        "input_schema": {"type": "object"},
        "deadline_seconds": 600,
        "steps": [
            {
                "key": "approve",
                "kind": "TASK",
                "queue": "ext-approvals",
                "input": {"amount": "$.input.amount"},
                "dispatch": {"url": url + "/approvals", "headers": {"X-System": "erp"}},
            }
        ],
        "output": {"decision": "$.steps.approve.output"},
    }


@pytest.fixture
def disp(trig):
    from app.engine.handlers import dispatch

    handlers.register("external_dispatch", dispatch.external_dispatch, replace=True)
    return trig


def test_external_dispatch_sends_the_task_and_the_system_completes_it(disp, receiver) -> None:
    from tests.engine.helpers import claim_task, complete_task

    def_id = publish(disp, NS, dispatch_doc(receiver.url))
    iid = start(disp, NS, def_id, {"amount": 250})["id"]
    assert run_jobs(disp, queue=OUTBOUND) == [("external_dispatch", "succeeded")]
    [call] = receiver.calls
    sent = json.loads(call["body"])
    assert sent["task"]["workflow_id"] == iid and sent["task"]["input"] == {"amount": 250}
    assert sent["task"]["state"] == "PENDING" and sent["callback"]["complete"]["path"].endswith("/complete")
    assert call["headers"]["X-Idempotency-Key"].endswith(":dispatch:" + sent["task"]["id"])
    assert call["headers"]["X-System"] == "erp" and call["headers"]["X-Ledgerflow-Signature"].startswith(
        "v1="
    )
    # the external system claims the task it was sent and completes it through the task API
    task = claim_task(disp, NS, "ext-approvals")
    assert task["id"] == sent["task"]["id"]
    complete_task(disp, NS, task, {"approved": True})
    assert instance(disp, iid)["output"] == {"decision": {"approved": True}}


def test_a_failed_dispatch_is_a_dead_letter_and_the_task_stays_claimable(disp, receiver) -> None:
    from tests.engine.helpers import claim_task, complete_task

    receiver.status = 502
    def_id = publish(disp, NS, dispatch_doc(receiver.url))
    iid = start(disp, NS, def_id, {"amount": 5})["id"]
    [(_, kind)] = run_jobs(disp, queue=OUTBOUND)
    assert kind.startswith("dead")
    with disp.connect() as conn:
        assert conn.execute(
            text("SELECT error_code FROM workflow_jobs WHERE type = 'external_dispatch'")
        ).scalar() == (EXTERNAL_OUTCOME_UNKNOWN)
    assert instance(disp, iid)["state"] == "RUNNING"
    task = claim_task(disp, NS, "ext-approvals")  # a person acts instead
    complete_task(disp, NS, task, {"approved": False})
    assert instance(disp, iid)["state"] == "SUCCEEDED" and len(receiver.calls) == 1
    # a refusal (4xx) is a permanent failure of the job, never re-sent
    receiver.status = 400
    iid2 = start(disp, NS, def_id, {"amount": 6})["id"]
    [(_, kind)] = run_jobs(disp, queue=OUTBOUND)
    assert kind.startswith("dead") and instance(disp, iid2)["state"] == "RUNNING"


def test_dispatch_target_is_checked_at_publish(monkeypatch) -> None:
    from app.engine.documents import validate_document

    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")
    doc = dispatch_doc("http://127.0.0.1:5510")
    validate_document(doc)
    for bad, name in (
        ({"url": "gopher://x"}, "steps[0].dispatch.url"),
        ({}, "steps[0].dispatch.url"),
        ({"url": "https://x.example", "extra": 1}, "steps[0].dispatch.extra"),
        ({"url": "https://x.example", "headers": {"Host": "h"}}, "steps[0].dispatch.headers.Host"),
    ):
        doc["steps"][0]["dispatch"] = bad
        with pytest.raises(InvalidArgument) as err:
            validate_document(doc)
        assert name in [e.field for e in err.value.field_errors], (bad, err.value.field_errors)


def test_a_forbidden_destination_is_refused_at_publish_and_at_delivery(trig, receiver, monkeypatch) -> None:
    """The destination policy of the safe HTTP client (``app.ledger.destinations``) guards TRIGGER and dispatch URLs:
    a cloud metadata address is a 400 naming the field at publish; a URL that became forbidden after
    publishing (the allow-list narrowed) is dead with DESTINATION_FORBIDDEN at delivery."""
    with pytest.raises(InvalidArgument) as refused:
        publish(trig, NS, trigger_doc("http://169.254.169.254/latest/meta-data"))
    assert any(e.field == "steps[0].url" and "link-local" in e.message for e in refused.value.field_errors)
    with pytest.raises(InvalidArgument) as hex_host:
        publish(trig, NS, {**trigger_doc("http://0x7f000001/hook")})
    assert any(e.field == "steps[0].url" for e in hex_host.value.field_errors)
    with pytest.raises(InvalidArgument) as local:
        publish(trig, NS, trigger_doc("http://localhost:8080/hook"))
    assert any(e.field == "steps[0].url" and "this machine" in e.message for e in local.value.field_errors)
    def_id = publish(trig, NS, trigger_doc(receiver.url))
    start(trig, NS, def_id, {"order": 1})
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "")
    ((kind, outcome),) = run_jobs(trig, queue=OUTBOUND)
    assert kind == "trigger_dispatch" and outcome.startswith("dead") and "loopback" in outcome
    assert receiver.calls == []
