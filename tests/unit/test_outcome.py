"""The one place that maps a handler's result or exception to a settlement outcome (L-STATE)."""

from __future__ import annotations

import json

import pytest

from app.ledger.outcome import (
    ExternalOutcomeUnknown,
    HandlerMissing,
    JobAborted,
    ManualRetryError,
    PermanentError,
    RetryableError,
    Skip,
    outcome_of,
)


def test_plain_results_succeed_and_are_stored():
    assert outcome_of({"a": 1}).kind == "succeeded"
    assert outcome_of({"a": 1}).result == {"a": 1}
    assert outcome_of(None).result is None and outcome_of(None).error is None


def test_skip_is_its_own_kind():
    out = outcome_of(Skip("subscription disabled"))
    assert out.kind == "skipped"
    assert out.result == {"skipped": True, "reason": "subscription disabled"}


@pytest.mark.parametrize(
    ("exc", "kind", "code"),
    [
        (RuntimeError("boom"), "retry", "HANDLER_ERROR"),
        (RetryableError("later"), "retry", "HANDLER_ERROR"),
        (PermanentError("bad input"), "dead", "PERMANENT_ERROR"),
        (HandlerMissing("no handler"), "dead", "HANDLER_MISSING"),
        (ManualRetryError("ask a person"), "failed", "NEEDS_OPERATOR"),
        (ExternalOutcomeUnknown("502"), "dead", "EXTERNAL_OUTCOME_UNKNOWN"),
        (JobAborted("deadline"), "retry", "DEADLINE_EXCEEDED"),
        (KeyboardInterrupt(), "retry", "HANDLER_ERROR"),
        (SystemExit(3), "retry", "HANDLER_ERROR"),  # SystemExit.code is an int, not an error code
    ],
)
def test_exceptions_map_to_outcomes(exc, kind, code):
    out = outcome_of(None, exc)
    assert (out.kind, out.error_code) == (kind, code)
    assert out.error.startswith(type(exc).__name__)
    assert out.result is None


def test_a_custom_string_code_is_kept_for_retryable_errors():
    class RateLimited(Exception):
        code = "RATE_LIMITED"

    out = outcome_of(None, RateLimited("slow down"))
    assert (out.kind, out.error_code, out.error) == ("retry", "RATE_LIMITED", "RateLimited: slow down")


def test_long_errors_are_truncated():
    out = outcome_of(None, RuntimeError("x" * 10_000))
    assert len(out.error) == 4000


def test_results_that_are_not_json_are_described():
    out = outcome_of({"when": object()})
    assert out.kind == "succeeded" and set(out.result) == {"repr"}
    json.dumps(out.result)


@pytest.mark.parametrize(
    "value",
    [float("nan"), {"x": float("inf")}, "nul\x00byte", {"k\x00": 1}, ["a", {"b": "\x00"}]],
)
def test_results_postgres_jsonb_cannot_store_are_described(value):
    """Regression: NaN/Infinity and NUL characters passed through ``json.dumps`` but PostgreSQL
    refuses them in jsonb, so the whole settlement batch of the pool failed again and again."""
    out = outcome_of(value)
    text = json.dumps(out.result, allow_nan=False)
    assert "\\u0000" not in text
    assert out.kind == "succeeded"


def test_error_text_never_carries_nul_characters():
    """PostgreSQL text cannot hold NUL: an exception message with one must still be storable."""
    out = outcome_of(None, RuntimeError("bad\x00input"))
    assert "\x00" not in out.error and out.error.startswith("RuntimeError: bad")


@pytest.mark.parametrize(
    ("asked", "kept"),
    [
        (30, 30.0),
        (2.5, 2.5),
        (-5, 0.0),
        (10**9, 3600.0),
        (float("inf"), None),
        (float("nan"), None),
        (1e300, 3600.0),
        ("60", None),
        (True, None),
        (None, None),
    ],
)
def test_a_handlers_retry_after_is_clamped_to_what_a_settlement_can_write(asked, kept):
    """Regression: ``RetryableError(retry_after=inf)`` (or 1e300) reached the settle statement,
    whose ``now() + retry_after * interval '1 second'`` is out of range: the pool's whole batch failed on
    every pass. A retry waits at most RETRY_AFTER_CAP_SECONDS, as after a receiver's Retry-After."""
    out = outcome_of(None, RetryableError("busy", retry_after=asked))
    assert out.kind == "retry" and out.retry_after == kept


def test_a_handlers_own_error_code_is_storable_text():
    """Regression: a NUL in an exception's ``code`` made psycopg refuse the batch's parameters;
    a code that is not text, or empty, gives the default."""

    class Odd(Exception):
        def __init__(self, code):
            super().__init__("odd")
            self.code = code

    assert outcome_of(None, Odd("A\x00B")).error_code == "A\\x00B"
    assert outcome_of(None, Odd("C" * 500)).error_code == "C" * 100
    assert outcome_of(None, Odd(42)).error_code == "HANDLER_ERROR"
    assert outcome_of(None, Odd("")).error_code == "HANDLER_ERROR"
    assert outcome_of(None, PermanentError("p")).error_code == "PERMANENT_ERROR"
    assert outcome_of(None, ManualRetryError("m")).error_code == "NEEDS_OPERATOR"
