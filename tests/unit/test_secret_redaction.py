"""Secrets stay out of errors, markers and logs (issue 9): a job's ``last_error`` and side-effect
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


def test_plain_text_is_kept():
    assert redact("https://api.example.com/x?page=2") == "https://api.example.com/x?page=2"


def test_database_errors_hide_parameters():
    from app.db import _engine_for

    engine = _engine_for("postgresql+psycopg://nobody@127.0.0.1:1/none")
    assert engine.hide_parameters is True
