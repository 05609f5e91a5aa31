"""OWASP API4:2023 Unrestricted Resource Consumption: every probe answers 4xx within a time bound
instead of pinning a CPU of the shared ``web`` process (numbers, nesting, tenant regexes, mappings)."""

from __future__ import annotations

import functools
import threading
import time
import uuid

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from app.db import get_engine
from tests.web.wf_live import Namespace

SIGNAL_DOC = {
    "signals": [
        {
            "name": "approve",
            "payload_version": "1",
            "schema": {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a+)+$"}}},
        }
    ],
    "steps": [
        {"key": "w", "kind": "SIGNAL", "signal": "approve", "payload_version": "1", "correlation": "c"}
    ],
}


def _post(ns: Namespace, path: str, raw: str | bytes) -> httpx.Response:
    headers = {
        "Authorization": f"Bearer {ns.tokens['all']}",
        "Content-Type": "application/json",
        "Idempotency-Key": uuid.uuid4().hex,
    }
    return httpx.post(ns.url + path, content=raw, headers=headers, timeout=30)


def _timed(fn):
    started = time.monotonic()
    result = fn()
    return result, time.monotonic() - started


def _fields(r: httpx.Response) -> list[str]:
    return [e["field"] for e in r.json()["errors"]]


def test_huge_exponent_answers_400_naming_the_field_quickly(wf_ns):
    body = '{"definition_id": "' + ("a" * 32) + '", "version": "v1", "input": {"amount": 1e999999999}}'
    r, took = _timed(lambda: _post(wf_ns, "/v1/workflows", body))
    assert r.status_code == 400, r.text
    assert _fields(r) == ["input.amount"]
    assert took < 2.0


def test_integer_past_the_digit_limit_and_deep_nesting_answer_400(wf_ns):
    r = _post(wf_ns, "/v1/workflows", '{"input": {"n": ' + ("7" * 5000) + "}}")
    assert r.status_code == 400 and _fields(r) == ["input.n"]
    deep = "[" * 100 + "]" * 100
    r = _post(wf_ns, "/v1/workflows", '{"input": {"x": ' + deep + "}}")
    assert r.status_code == 400 and _fields(r)[0].startswith("input.x[0]")
    r = _post(wf_ns, "/v1/workflows", "[" * 50_000 + "]" * 50_000)
    assert r.status_code == 400 and _fields(r) == ["body"]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(raw=st.binary(max_size=512))
def test_arbitrary_bytes_never_a_server_error(wf_ns, raw):
    r, took = _timed(lambda: _post(wf_ns, "/v1/workflows", raw))
    assert r.status_code < 500, r.text
    assert took < 5.0


def test_tenant_pattern_is_evaluated_in_linear_time_outside_the_instance_lock(ops):
    """A classic ReDoS pattern against a 20 000-character payload answers at once (a backtracking
    engine needs longer than the age of the universe), and is judged while another transaction holds
    the instance lock (a slow contract would otherwise stall the instance's other work)."""
    def_id = ops.define(SIGNAL_DOC)
    wid = ops.start(def_id)
    raw = {"code": "a" * 20_000 + "!"}
    with get_engine().connect() as holder:
        holder.execute(text("SELECT 1 FROM workflow_instances WHERE id = :id FOR UPDATE"), {"id": wid})
        out: dict = {}

        def send() -> None:
            try:
                ops.client.send_workflow_signal(
                    wid,
                    name="approve",
                    payload_version="1",
                    target_step_key="w",
                    target_activation_sequence=1,
                    correlation_key="c",
                    payload=raw,
                    reason="probe",
                )
            except Exception as exc:  # the expected InvalidArgument
                out["exc"] = exc

        t = threading.Thread(target=send)
        started = time.monotonic()
        t.start()
        t.join(timeout=5)
        took = time.monotonic() - started
        holder.rollback()
    t.join()
    assert type(out.get("exc")).__name__ == "InvalidArgument", out
    assert took < 5.0


def test_contracts_that_cannot_run_in_linear_time_or_are_too_big_are_refused_at_publish(ops):
    d = ops.client.create_definition("d-" + uuid.uuid4().hex[:8])
    base = {
        "version": "v1",
        "deadline_seconds": 60,
        "steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 1}],
    }
    cases = {
        "look-around": {"type": "string", "pattern": "^(?=a)a+$"},
        "back-reference": {"type": "string", "pattern": "^(a)\\1$"},
        "too big": {"enum": ["x" * 1000 for _ in range(70)]},
        "too deep": {"items": functools.reduce(lambda acc, _: {"items": acc}, range(40), {})},
    }
    for label, schema in cases.items():
        r = httpx.post(
            f"{ops.ns.url}/v1/workflow-definitions/{d['id']}/versions",
            json={**base, "input_schema": schema},
            headers={"Authorization": f"Bearer {ops.ns.tokens['all']}", "Idempotency-Key": uuid.uuid4().hex},
        )
        assert r.status_code == 400, (label, r.text)
        assert _fields(r)[0] == "input_schema", (label, r.text)


def test_a_mapping_that_amplifies_its_input_fails_the_step_with_a_reason(ops):
    def_id = ops.define(
        {"steps": [{"key": "t", "kind": "TASK", "queue": "q", "input": {"a": "$.input", "b": "$.input"}}]}
    )
    wid, took = _timed(lambda: ops.start(def_id, {"blob": "x" * 150_000}))
    assert took < 5.0
    assert ops.client.get_workflow(wid).state == "FAILED"
    step = ops.client.get_workflow_step(wid, "t")
    assert step.step.state == "FAILED"
    assert step.error["code"] == "MAPPED_INPUT_TOO_LARGE" and "262144 bytes" in step.error["message"]


def test_a_mapping_with_too_many_references_is_refused_at_publish(ops):
    d = ops.client.create_definition("d-" + uuid.uuid4().hex[:8])
    doc = {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 60,
        "steps": [{"key": "t", "kind": "TASK", "queue": "q", "input": ["$.input"] * 65}],
    }
    r = httpx.post(
        f"{ops.ns.url}/v1/workflow-definitions/{d['id']}/versions",
        json=doc,
        headers={"Authorization": f"Bearer {ops.ns.tokens['all']}", "Idempotency-Key": uuid.uuid4().hex},
    )
    assert r.status_code == 400 and _fields(r) == ["steps[0].input"], r.text


def test_api_database_sessions_have_a_statement_timeout(wf_ns):
    with get_engine().connect() as conn:
        assert conn.execute(text("SHOW statement_timeout")).scalar_one() == "30s"


def test_the_trace_chain_is_capped(ops):
    """An operator read that grew with the trace (every job of it, with attempts) stops at 500 jobs."""
    from tests.security.test_api1_broken_object_level_authorization import _operator
    from tests.web.wf_ops import sql

    trace = "t-" + uuid.uuid4().hex
    sql(
        "INSERT INTO workflow_jobs (type, queue, status, max_attempts, operation_key, trace_id) "
        "SELECT 'delay_wake', 'workflow-ledger', 'canceled', 1, md5(random()::text || g::text), :t "
        "FROM generate_series(1, 501) g",
        t=trace,
    )
    headers = _operator("platform-" + uuid.uuid4().hex[:6], platform=True)
    r = httpx.get(f"{ops.ns.url}/api/workflows/engine/jobs/chain/{trace}", headers=headers, timeout=30)
    assert r.status_code == 200
    assert len(r.json()["data"]["jobs"]) == 500 and r.json()["data"]["truncated"] is True
