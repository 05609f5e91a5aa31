"""OWASP API4:2023 Unrestricted Resource Consumption: per-namespace caps overrun by concurrent creates
. 16 parallel rule creates at 92 of 100 ended at 107, 16 parallel schedule creates at 992 of
1000 ended at 1008 (count, then insert, with no lock); subscriptions used the same pattern. Now the count
and the insert of one namespace's creates of one kind are serialized (an advisory lock), so a cap holds
whatever the concurrency: real parallel creates through the API, and a deterministic interleaving of two
transactions (the second create counts only after the first committed)."""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from app.db import get_engine
from app.integrations import automation, schedules, subscriptions
from tests.security.hostile import author, sql
from tests.web.wf_ops import Ops

PARALLEL = 16


@pytest.fixture(autouse=True)
def _loopback_receivers(monkeypatch):  # the live server runs in this process
    monkeypatch.setenv("LEDGERFLOW_OUTBOUND_ALLOW", "127.0.0.1/32")


def _ns_id(ops: Ops) -> str:
    return sql("SELECT id FROM namespaces WHERE name = :n", n=ops.ns.name)[0][0]


def _fill(ops: Ops, kind: str, n: int, def_id: str) -> None:
    """``n`` rows of ``kind`` in the namespace, written directly (the cap is what is under test)."""
    ns = _ns_id(ops)
    if kind == "automation_rules":
        sql(
            "INSERT INTO automation_rules (id, namespace_id, name, event_type, conditions, action, enabled) "
            "SELECT md5(random()::text), :ns, 'f' || g, 'workflow.started', '[]', '{\"kind\": \"http\", "
            '"url": "http://127.0.0.1:1/"}\', false FROM generate_series(1, :n) g',
            ns=ns,
            n=n,
        )
    elif kind == "event_subscriptions":
        sql(
            "INSERT INTO event_subscriptions (id, namespace_id, url, event_types, secret, enabled) "
            "SELECT md5(random()::text), :ns, 'http://127.0.0.1:1/', ARRAY['*'], 'whsec_x', false "
            "FROM generate_series(1, :n) g",
            ns=ns,
            n=n,
        )
    else:
        sql(
            "INSERT INTO workflow_schedules (id, namespace_id, name, definition_id, version, input, "
            "interval_seconds, anchor_at, paused, next_fire_at, created_by) SELECT md5(random()::text), :ns, "
            "'f' || g, :d, 'v1', '{}', 3600, now(), true, now() + interval '1 hour', 'x' "
            "FROM generate_series(1, :n) g",
            ns=ns,
            n=n,
            d=def_id,
        )


def _count(ops: Ops, table: str) -> int:
    return sql(f"SELECT count(*) FROM {table} WHERE namespace_id = :ns", ns=_ns_id(ops))[0][0]


CASES = {
    "automation_rules": (
        100,
        "/v1/automation-rules",
        lambda d, i: {
            "name": f"r{i}",
            "event_type": "workflow.started",
            "action": {"kind": "start_workflow", "definition_id": d, "version": "v1", "input": {}},
        },
    ),
    "event_subscriptions": (
        100,
        "/v1/event-subscriptions",
        lambda d, i: {"url": f"http://127.0.0.1:1/{i}", "event_types": ["*"]},
    ),
    "workflow_schedules": (
        1000,
        "/v1/schedules",
        lambda d, i: {
            "name": f"s{i}",
            "definition_id": d,
            "version": "v1",
            "input": {},
            "interval_seconds": 3600,
        },
    ),
}


@pytest.mark.parametrize("table", sorted(CASES))
def test_parallel_creates_never_pass_the_cap(ops, table):
    cap, path, body = CASES[table]
    def_id = ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 60}]})
    _fill(ops, table, cap - 8, def_id)
    headers = author(ops.ns.name).headers

    def create(i: int) -> int:
        return httpx.post(
            ops.ns.url + path,
            json=body(def_id, i),
            timeout=60,
            headers={**headers, "Idempotency-Key": uuid.uuid4().hex},
        ).status_code

    with ThreadPoolExecutor(PARALLEL) as pool:
        codes = list(pool.map(create, range(PARALLEL)))
    assert sorted(codes) == [201] * 8 + [409] * 8, codes
    assert _count(ops, table) == cap


CREATE = {
    "automation_rules": lambda c, p, d: automation.create_rule(
        c, p, None, CASES["automation_rules"][2](d, uuid.uuid4().hex)
    ),
    "event_subscriptions": lambda c, p, d: subscriptions.create(
        c, p, None, CASES["event_subscriptions"][2](d, 0)
    ),
    "workflow_schedules": lambda c, p, d: schedules.create_schedule(
        c, p, CASES["workflow_schedules"][2](d, uuid.uuid4().hex)
    ),
}


@pytest.mark.parametrize("table", sorted(CASES))
def test_a_create_counts_only_after_the_one_before_it_committed(ops, table):
    cap = CASES[table][0]
    def_id = ops.define({"steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 60}]})
    _fill(ops, table, cap - 1, def_id)
    who = author(ops.ns.name, ns_id=_ns_id(ops)).principal
    outcome: list[str] = []

    def second() -> None:
        try:
            with get_engine().begin() as conn:
                CREATE[table](conn, who, def_id)
            outcome.append("created")
        except Exception as exc:  # the refusal is the expected outcome
            outcome.append(getattr(exc, "code", type(exc).__name__))

    with get_engine().begin() as first:
        CREATE[table](first, who, def_id)  # the last free place, not committed yet
        racer = threading.Thread(target=second)
        racer.start()
        racer.join(timeout=1.0)  # before the fix it finished here, having counted 99 (the first's row unseen)
    racer.join(timeout=60)
    assert not racer.is_alive()
    assert outcome and outcome[0].endswith("_LIMIT"), outcome
    assert _count(ops, table) == cap
