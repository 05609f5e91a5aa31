"""Identifier rules use full matches: ``$`` also matches before a trailing newline, so
``re.match`` accepted ``"v1\\n"`` as a version, key, queue or id."""

from __future__ import annotations

import pytest

from app import auth, idempotency, ids
from app.engine import definitions, documents


@pytest.mark.parametrize(
    ("check", "good"),
    [
        (ids.is_hex32, "a" * 32),
        (lambda v: bool(documents.VERSION_RE.fullmatch(v)), "v1"),
        (lambda v: bool(documents.KEY_RE.fullmatch(v)), "step-1"),
        (lambda v: bool(auth.QUEUE_RE.fullmatch(v)), "q1"),
        (lambda v: bool(definitions.NAME_RE.fullmatch(v)), "billing"),
    ],
)
def test_a_trailing_newline_is_refused(check, good):
    assert check(good)
    assert not check(good + "\n")


def test_validators_refuse_trailing_newlines():
    doc = {
        "version": "v1\n",
        "input_schema": {},
        "deadline_seconds": 60,
        "steps": [{"key": "t\n", "kind": "TIMER", "delay_seconds": 1}],
    }
    with pytest.raises(documents.InvalidArgument) as info:
        documents.validate_document(doc)
    assert {e.field for e in info.value.field_errors} >= {"version", "steps[0].key"}
    with pytest.raises(idempotency.InvalidArgument):
        idempotency.validate_key("key-1\n")


def test_node_ids_are_16_hex_and_distinct():
    made = {ids.new_node_id() for _ in range(1000)}
    assert len(made) == 1000 and all(len(n) == 16 and int(n, 16) >= 0 and n == n.lower() for n in made)
