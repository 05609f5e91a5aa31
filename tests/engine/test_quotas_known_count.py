"""A start's quota check counts the namespace's open tasks only while they are few: from
``COUNT_EVERY_START_BELOW`` on, a process reuses the count one of its starts made for ``KNOWN_SECONDS``
(far from the caps), so the work of a start no longer grows with the namespace's backlog. Near a cap the
start counts exactly, whatever is known."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import text

from app.engine import quotas
from app.errors import QuotaExceeded
from app.ids import new_id
from app.sql import observing
from tests.engine.helpers import publish, start

ONE_TASK = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [{"key": "a", "kind": "TASK", "queue": "qk.a"}],
}


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(quotas, "_clock", lambda: now[0])
    monkeypatch.setattr(quotas, "_known", {})
    return now


def _counted_by_a_start(eng, ns: str, def_id: str) -> list[Any]:
    """Start one workflow; the open-task figure each quota statement of the start was given (None: the
    statement counted the tasks)."""
    given: list[Any] = []

    def seen(name: Any, statement: str, params: Any) -> None:
        if "FROM workflow_quota_counts WHERE namespace_id" in statement:
            given.append(params["known"])

    with observing(seen):
        start(eng, ns, def_id, {})
    return given


def _plan(eng, ns: str, known: int | None) -> str:
    """The check's statement as EXPLAIN ANALYZE runs it for ``ns``, given ``known`` (None: no figure)."""
    params = {
        "ns": ns,
        "own": "0" * 32,
        "queues": ["qk.a"],
        "k": "lf-ns:" + ns,
        "instance_limit": 10_000,
        "queue_limit": 100_000,
        "work_limit": 250_000,
        "known": known,
    }
    with eng.begin() as conn:
        rows = conn.execute(text("EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + quotas._SHARED.text), params)
        return "\n".join(r[0] for r in rows)


def test_a_large_backlog_is_counted_once_per_second_per_process(eng, clock, monkeypatch):
    monkeypatch.setattr(quotas, "COUNT_EVERY_START_BELOW", 5)
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, ONE_TASK)
    for _ in range(6):
        start(eng, ns, def_id, {})
    clock[0] += quotas.KNOWN_SECONDS  # what those starts counted is old now
    assert _counted_by_a_start(eng, ns, def_id) == [None]  # counted (6 open tasks) and kept
    assert _counted_by_a_start(eng, ns, def_id) == [6]  # the figure of the start before: not counted again
    clock[0] += quotas.KNOWN_SECONDS
    assert _counted_by_a_start(eng, ns, def_id) == [None]  # a second later: counted again
    assert _counted_by_a_start(eng, ns, def_id) == [8]


def test_a_small_backlog_is_counted_by_every_start(eng, clock, monkeypatch):
    monkeypatch.setattr(quotas, "COUNT_EVERY_START_BELOW", 100)
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, ONE_TASK)
    for _ in range(3):
        assert _counted_by_a_start(eng, ns, def_id) == [None]
    assert quotas._known == {}


def test_given_a_figure_the_statement_reads_no_task(eng):
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, ONE_TASK)
    for _ in range(3):
        start(eng, ns, def_id, {})
    counting, given = _plan(eng, ns, None), _plan(eng, ns, 3)
    # the count of the namespace's open tasks is one more plan node that never runs
    assert given.count("never executed") == counting.count("never executed") + 1


def test_near_a_cap_the_start_counts_exactly_whatever_is_known(eng, clock, monkeypatch):
    """A figure far below the truth does not let a start pass the cap: near it the check counts the rows
    under the EXCLUSIVE lock."""
    ns = "ns-" + new_id()[:8]
    def_id = publish(eng, ns, ONE_TASK)
    for _ in range(3):
        start(eng, ns, def_id, {})
    monkeypatch.setattr(quotas, "_known", {ns: (0, clock[0])})  # "no open task", just counted
    monkeypatch.setenv("LEDGERFLOW_APPLICATION_WORK_LIMIT", "6")  # 3 unfinished + 3 open tasks: full
    with pytest.raises(QuotaExceeded) as e:
        start(eng, ns, def_id, {})
    assert e.value.code == "APPLICATION_FULL"
