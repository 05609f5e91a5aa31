"""Fixtures for the web tests: a Flask test client on the session's real Postgres database,
credentials with chosen scopes, and a helper that inserts jobs in any state (crafted rows)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import Engine, text

from app.auth import ENGINE_SCOPES, create_credential
from app.db import transaction
from tests.conftest import LEDGER_TABLES

API_TABLES = "operation_audit, idempotency_receipts, credentials, namespaces"
PREFIX = "/api/workflows/engine"


@pytest.fixture(scope="session")
def app():
    from web import create_app

    flask_app = create_app()
    flask_app.config["TESTING"] = True
    return flask_app


@pytest.fixture
def clean(engine: Engine) -> Iterator[Engine]:
    with engine.begin() as conn:
        conn.execute(text(f"TRUNCATE {LEDGER_TABLES}, {API_TABLES} RESTART IDENTITY CASCADE"))
    yield engine


@pytest.fixture
def client(app, clean):
    return app.test_client()


@pytest.fixture
def token(clean: Engine) -> Callable[..., str]:
    """``token(scope, ..., namespace="ops")`` issues a credential and returns its bearer token. A
    credential with a ledger operator scope is platform-wide unless ``platform=False`` (the crafted
    jobs of these tests belong to no instance, so only a platform-wide operator reaches them)."""

    def _issue(
        *scopes: str, namespace: str = "ops", queues: list[str] | None = None, platform: bool | None = None
    ) -> str:
        if platform is None:
            platform = bool(ENGINE_SCOPES & set(scopes))
        with transaction(clean) as conn:
            issued = create_credential(
                conn,
                namespace=namespace,
                name="t-" + uuid.uuid4().hex[:8],
                scopes=scopes,
                queues=queues,
                platform=platform,
            )
        return issued.token

    return _issue


@pytest.fixture
def monitor(token) -> dict[str, str]:
    return {"Authorization": "Bearer " + token("workflow:instance:monitor")}


@pytest.fixture
def operator(token) -> dict[str, str]:
    return {"Authorization": "Bearer " + token("workflow:instance:monitor", "workflow:engine:operate")}


def mutate(client, path: str, headers: dict[str, str], body: Any, key: str | None = None):
    h = {**headers, "Idempotency-Key": key or uuid.uuid4().hex}
    return client.post(PREFIX + path, headers=h, data=json.dumps(body), content_type="application/json")


_INSERT = text(
    """
INSERT INTO workflow_jobs (type, queue, status, payload, instance_id, run_at, attempts, max_attempts,
    generation, lease_token, lease_until, execution_deadline, remaining_ms, last_error, operation_key,
    trace_id, created_at, effect_marker, attempt_id, attempt_started_at)
VALUES (:type, :queue, CAST(:status AS workflow_job_status), CAST(:payload AS jsonb), :instance_id,
    now() + make_interval(secs => :run_in), :attempts, :max_attempts, :generation,
    CASE WHEN CAST(:status AS workflow_job_status) = 'running' THEN gen_random_uuid() END,
    CASE WHEN CAST(:status AS workflow_job_status) = 'running' THEN now() + make_interval(secs => :lease_in) END,
    CASE WHEN CAST(:status AS workflow_job_status) = 'running' THEN now() + make_interval(secs => :deadline_in) END,
    CASE WHEN CAST(:status AS workflow_job_status) = 'paused' THEN 5000 END, :last_error, :operation_key, :trace_id,
    now() - make_interval(secs => :age), CAST(:marker AS jsonb),
    CASE WHEN CAST(:status AS workflow_job_status) = 'running' THEN nextval('workflow_job_executions_id_seq') END,
    CASE WHEN CAST(:status AS workflow_job_status) = 'running' THEN now() END)
RETURNING id
"""
)


@pytest.fixture
def make_job(clean: Engine) -> Callable[..., int]:
    """Insert one job in any status with chosen times (seconds relative to database now)."""

    def _make(
        status: str = "pending",
        *,
        type: str = "delay_wake",
        attempts: int = 0,
        max_attempts: int = 5,
        run_in: float = 0,
        lease_in: float = 60,
        deadline_in: float = 600,
        last_error: str | None = None,
        instance_id: str | None = None,
        trace_id: str = "trace-1",
        age: float = 0,
        payload: Any = None,
        generation: int = 1,
        marker: Any = None,
    ) -> int:
        queue = "workflow-ledger-outbound" if type in OUTBOUND_TYPES else "workflow-ledger"
        with clean.begin() as conn:
            return conn.execute(
                _INSERT,
                {
                    "type": type,
                    "queue": queue,
                    "status": status,
                    "payload": json.dumps(payload or {}),
                    "instance_id": instance_id,
                    "run_in": run_in,
                    "attempts": attempts,
                    "max_attempts": max_attempts,
                    "generation": generation,
                    "lease_in": lease_in,
                    "deadline_in": deadline_in,
                    "last_error": last_error,
                    "operation_key": uuid.uuid4().hex,
                    "trace_id": trace_id,
                    "age": age,
                    "marker": None if marker is None else json.dumps(marker),
                },
            ).scalar_one()

    return _make


OUTBOUND_TYPES = {
    "trigger_dispatch",
    "external_dispatch",
    "event_dispatch",
    "webhook_delivery",
    "compensation_action",
    "automation_action",
}


def row(engine: Engine, job_id: int) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(
            conn.execute(text("SELECT * FROM workflow_jobs WHERE id = :i"), {"i": job_id}).one()._mapping
        )


def audit_rows(engine: Engine) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT * FROM operation_audit ORDER BY created_at, id"))
        return [dict(r._mapping) for r in rows]
