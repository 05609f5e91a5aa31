"""TRIGGER steps without a database: the decisions (``decide/triggers``), the publish-time checks of
the step document, the response-to-output mapping and the signature."""

from __future__ import annotations

import hashlib
import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.engine.decide import triggers as decide
from app.engine.decide.model import CompleteStep, FailStep, Ignore, Inst, Step
from app.engine.documents import url_error, validate_document
from app.engine.handlers.outbound import MAX_RESPONSE_BYTES, response_output, signature_headers
from app.errors import InvalidArgument

ACT = "a" * 32


def step(state: str = "ACTIVE", kind: str = "TRIGGER", act: str = ACT) -> Step:
    return Step(key="t", kind=kind, state=state, activation_id=act, activation_sequence=1)


def test_the_gate_before_the_call() -> None:
    running = Inst(id="i", state="RUNNING")
    assert decide.may_send(running, step(), ACT) is None
    assert decide.may_send(Inst(id="i", state="RUNNING", paused=True), step(), ACT) is None  # in flight
    for inst, st_, why in [
        (Inst(id="i", state="CANCELLED"), step(), "CANCELLED"),
        (Inst(id="i", state="CANCELLING", cancel_requested=True), step(), "stopping"),
        (running, None, "no longer current"),
        (running, step(act="b" * 32), "no longer current"),
        (running, step(kind="TASK"), "no longer current"),
        (running, step(state="SUCCEEDED"), "SUCCEEDED"),
    ]:
        verdict = decide.may_send(inst, st_, ACT)
        assert isinstance(verdict, Ignore) and why in verdict.reason


@given(st.integers(min_value=100, max_value=599))
def test_the_answer_decides_the_step(status: int) -> None:
    out = {"status": status, "body": {"ok": True}}
    verdict = decide.answered(Inst(id="i", state="RUNNING"), step(), ACT, status, out)
    if 200 <= status < 300:
        assert verdict == CompleteStep(out)
    else:
        assert isinstance(verdict, FailStep) and verdict.error["code"] == "TRIGGER_REJECTED"
        assert verdict.error["status"] == status


def doc(**trigger) -> dict:
    return {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 60,
        "steps": [
            {"key": "a", "kind": "TIMER", "delay_seconds": 0},
            {"key": "t", "kind": "TRIGGER", "after": ["a"], "url": "https://example.com/hook", **trigger},
        ],
    }


def test_publish_checks_name_the_field() -> None:
    validate_document(
        doc(
            body={"id": "$.input.id", "a": "$.steps.a.output"},
            method="PUT",
            headers={"X-Tenant": "acme"},
            timeout_seconds=5,
        )
    )
    cases = [
        ({"url": "ftp://example.com/x"}, "steps[1].url"),
        ({"url": "https://user:pw@example.com/"}, "steps[1].url"),
        ({"url": "/relative"}, "steps[1].url"),
        ({"method": "TRACE"}, "steps[1].method"),
        ({"headers": {"X-Idempotency-Key": "mine"}}, "steps[1].headers.X-Idempotency-Key"),
        ({"headers": {"X-Ok": 5}}, "steps[1].headers.X-Ok"),
        ({"timeout_seconds": 31}, "steps[1].timeout_seconds"),
        ({"body": {"x": "$.steps.nope.output"}}, "steps[1].body"),
        ({"queue": "q"}, "steps[1].queue"),
    ]
    for changes, field in cases:
        with pytest.raises(InvalidArgument) as err:
            validate_document(doc(**changes))
        assert field in [e.field for e in err.value.field_errors], (changes, err.value.field_errors)
    bad = doc()
    del bad["steps"][1]["url"]
    with pytest.raises(InvalidArgument) as err:
        validate_document(bad)
    assert "steps[1].url" in [e.field for e in err.value.field_errors]
    assert url_error("http://127.0.0.1:5500/x") is None  # the destination policy is the HTTP client's


def test_response_output() -> None:
    assert response_output(200, '{"n": 12345678901234567890}') == {
        "status": 200,
        "body": {"n": 12345678901234567890},
    }
    assert response_output(204, "") == {"status": 204, "body": None}
    assert response_output(200, "plain") == {"status": 200, "text": "plain"}
    assert response_output(200, "x" * (MAX_RESPONSE_BYTES + 1)) == {"status": 200, "body_too_large": True}


def test_signature() -> None:
    assert signature_headers("{}", None) == {}
    h = signature_headers('{"a":1}', "s3cret", now=1700000000)
    expected = hmac.new(b"s3cret", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
    assert h == {"X-Ledgerflow-Timestamp": "1700000000", "X-Ledgerflow-Signature": f"v1={expected}"}
