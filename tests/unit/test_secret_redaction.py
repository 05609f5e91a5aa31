"""Secrets stay out of errors, markers and logs: a job's ``last_error`` and side-effect
marker mask URL credentials and token query parameters; database errors carry no parameters."""

from __future__ import annotations

import pytest

from app.ledger.outcome import outcome_of
from app.ledger.transitions.executor import _redacted
from app.observability.logs import redact


@pytest.mark.parametrize(
    ("raw", "leak"),
    [
        ("ConnectError: https://bob:hunter2@api.example.com/pay", "hunter2"),
        ("GET https://api.example.com/x?access_token=abc123secret&page=2", "abc123secret"),
        ("https://s3.example.com/o?X-Amz-Signature=deadbeef99&X-Amz-Date=1", "deadbeef99"),
        ("call failed with lf_AbCdEf0123456789xyz", "AbCdEf0123456789xyz"),
        ("Authorization: Bearer eyJhbGciOi.payload.sig", "eyJhbGciOi"),
    ],
)
def test_credentials_are_masked(raw, leak):
    assert leak not in redact(raw)
    out = outcome_of(exc=RuntimeError(raw))
    assert leak not in out.error
    assert leak not in str(_redacted({"url": raw, "method": "POST"}))


def test_plain_text_is_kept_and_a_url_is_shown_as_everywhere_else():
    assert redact("the receiver answered 503 after 2.5 s") == "the receiver answered 503 after 2.5 s"
    # one URL redaction for views, audit rows and log lines (user info and every query value)
    assert (
        redact("GET https://api.example.com/x?page=2 failed")
        == "GET https://api.example.com/x?page=*** failed"
    )
    assert redact("http://u:p@h.example/a?k=v") == "http://***@h.example/a?k=***"


def test_database_errors_hide_parameters():
    from app.db import _engine_for

    engine = _engine_for("postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert engine.hide_parameters is True
