"""Helpers of the control / signal / audit / recovery tests: an operator credential with every
workflow permission in a fresh namespace, definitions, waits on the live server, database time travel."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import pytest
from sqlalchemy import text

from app.auth import ALL_SCOPES, create_credential
from app.db import get_engine, transaction
from ledgerflow.client import Client
from tests.web.wf_live import Namespace, make_namespace

ENGINE_WORKER_ENV = {"LEDGERFLOW_HANDLERS": "", "LEDGERFLOW_POLL_SECONDS": "0.2"}


@dataclass
class Ops:
    ns: Namespace
    client: Client  # every scope
    worker: Client  # tasks:work only
    actor_id: str

    def define(self, doc: dict) -> str:
        d = self.client.create_definition("d-" + uuid.uuid4().hex[:10])
        self.client.publish_version(
            d["id"], {"version": "v1", "input_schema": {}, "deadline_seconds": 600, **doc}
        )
        return d["id"]

    def start(self, def_id: str, input: dict | None = None) -> str:
        return self.client.start_workflow(def_id, "v1", input or {}).instance.id


@pytest.fixture
def ops(wf_server: str) -> Ops:
    ns = make_namespace(wf_server)
    with transaction() as conn:
        issued = create_credential(conn, namespace=ns.name, name="operator", scopes=sorted(ALL_SCOPES))
    return Ops(ns, Client(wf_server, issued.token), ns.client("worker"), issued.credential_id)


def until(fn, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


def sql(query: str, **params) -> list:
    with get_engine().begin() as conn:
        res = conn.execute(text(query), params)
        return res.all() if res.returns_rows else []


def unknown_outcome_job(instance_id: str, step_key: str) -> int:
    """A running external call with an open side-effect marker (its outcome is unknown)."""
    return sql(
        "INSERT INTO workflow_jobs (type, queue, status, instance_id, step_key, max_attempts, operation_key, "
        "trace_id, lease_token, lease_until, execution_deadline, effect_marker, attempts, attempt_id, "
        "attempt_started_at) VALUES ('external_dispatch', "
        "'workflow-ledger-outbound', 'running', :i, :k, 3, :op, 't', gen_random_uuid(), now() + interval '1 hour', "
        "now() + interval '1 hour', '{\"sent\": true}', 1, nextval('workflow_job_executions_id_seq'), now()) "
        "RETURNING id",
        i=instance_id,
        k=step_key,
        op=uuid.uuid4().hex,
    )[0][0]
