"""L-CLAIM-4: a job a request creates (a timer, a task deadline, an event fan-out, a child...) publishes
its wake hint after the request's commit, from the web process as from a worker. Before, the web process
never installed the publisher: every such job waited for a pool's 2 s poll (a 1 s TIMER fired ~0.9 s late
when nothing else was going on)."""

from __future__ import annotations

import uuid

import pytest

from app.auth import ensure_namespace
from app.db import transaction
from app.ledger import hints
from app.settings import get_settings
from tests.engine.helpers import publish

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    # a 1 s TIMER: its ``delay_wake`` job is due within two short polls, so it is hinted (a job due later,
    # like the watch of a 600 s deadline, is found by the pools' own passes: hints.worth_a_hint)
    "steps": [{"key": "a", "kind": "TIMER", "delay_seconds": 1}],
}


def test_the_web_process_publishes_the_wake_hints_of_the_jobs_its_requests_create(
    clean,
    token,
    redis_client,
    monkeypatch,
) -> None:
    from web import create_app

    monkeypatch.setattr(hints, "_publisher", None)
    client = create_app().test_client()
    assert hints._publisher is not None  # installed by create_app
    bearer = token("workflows:start", "workflows:read", "tasks:submit", namespace="hints")
    with transaction(clean) as conn:
        ns = ensure_namespace(conn, "hints")
    def_id = publish(clean, ns, DOC)
    flag = f"{get_settings().redis_namespace}:hint:workflow-ledger"
    redis_client.delete(flag)
    r = client.post(
        "/v1/workflows",
        json={"definition_id": def_id, "version": "v1", "input": {}},
        headers={"Authorization": f"Bearer {bearer}", "Idempotency-Key": uuid.uuid4().hex},
    )
    assert r.status_code == 201, r.get_data(as_text=True)
    if not redis_client.exists(flag):  # pragma: no cover - the flag is cleared only by a hint consumer
        pytest.fail("the start's delay_wake job published no hint for the advance pool")
