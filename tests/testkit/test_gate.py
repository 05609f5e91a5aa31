"""Time skipping exists only on a server the test kit started: anywhere else the route is absent (404 whose
message says why) and the server says at start why it refuses LEDGERFLOW_TEST_TIME_SKIPPING; on the kit's
server a request needs the kit's key and a bounded span."""

from __future__ import annotations

import logging
import os

import httpx
import pytest

from app.integrations import time_skip
from ledgerflow.testing import KEY_HEADER, SKIP_PATH
from web import create_app

KEY = "k" * 43  # fixed: pytest-xdist needs the same test ids in every worker


def _skip(app, seconds=60):
    return app.test_client().post(SKIP_PATH, json={"seconds": seconds}, headers={"Authorization": "Bearer x"})


def test_a_server_started_otherwise_has_no_time_skipping(monkeypatch):
    monkeypatch.delenv("LEDGERFLOW_TEST_TIME_SKIPPING", raising=False)
    answer = _skip(create_app())
    assert answer.status_code == 404
    assert answer.json["code"] == "NOT_FOUND"
    assert "test kit" in answer.json["message"]


@pytest.mark.parametrize("value", ["on", "1", f"1:{KEY}", f"999999999:{KEY}"])
def test_asked_for_it_outside_the_kit_it_says_so_at_start(monkeypatch, caplog, value):
    monkeypatch.setenv("LEDGERFLOW_TEST_TIME_SKIPPING", value)
    with caplog.at_level(logging.WARNING):
        app = create_app()
    assert "not started by the test kit" in caplog.text
    assert _skip(app).status_code == 404


def test_never_in_production_even_from_the_kit(monkeypatch, caplog):
    monkeypatch.setenv("LEDGERFLOW_TEST_TIME_SKIPPING", f"{os.getppid()}:{KEY}")
    monkeypatch.setenv("LEDGERFLOW_ENV", "production")
    assert time_skip.refusal() is not None and "production" in time_skip.refusal()
    assert not time_skip.enabled()


def test_an_ancestor_s_marker_turns_it_on(monkeypatch):
    """What the kit does: its own process id (an ancestor of the server) and a key."""
    monkeypatch.setenv("LEDGERFLOW_TEST_TIME_SKIPPING", f"{os.getppid()}:{KEY}")
    assert time_skip.enabled()
    assert (
        time_skip.key_matches(KEY)
        and not time_skip.key_matches(KEY[:-1] + "x")
        and not time_skip.key_matches(None)
    )
    assert _skip(create_app()).status_code == 401  # the route exists: it wants a credential


def test_the_kit_s_server_wants_its_key_and_a_bounded_span(ledgerflow_env):
    env = ledgerflow_env
    auth = {"Authorization": f"Bearer {env.token}"}
    url = env.url + SKIP_PATH
    wrong = httpx.post(url, json={"seconds": 60}, headers={**auth, KEY_HEADER: "x" * 43})
    assert wrong.status_code == 403 and wrong.json()["code"] == "PERMISSION_DENIED"
    key = {**auth, KEY_HEADER: env.server.key}
    for bad in (0, -1, time_skip.MAX_SECONDS + 1, "60", True, None):
        answer = httpx.post(url, json={"seconds": bad}, headers=key)
        assert answer.status_code == 400, bad
        assert answer.json()["code"] == "INVALID_ARGUMENT"
    assert httpx.post(url, json={"seconds": 1, "extra": 1}, headers=key).status_code == 400
    assert httpx.post(url, json={"seconds": 60}, headers={KEY_HEADER: env.server.key}).status_code == 401
    moved = httpx.post(url, json={"seconds": 60}, headers=key)
    assert moved.status_code == 200
    assert moved.json()["data"]["skipped"]["jobs"] == 0  # nothing of this fresh namespace was due
