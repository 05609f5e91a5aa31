"""Fixtures of the observability tests: the web fixtures (a Flask client on the real database,
credentials), a handler registry restored after each test, an in-process pool runner and a parser of
the Prometheus exposition (the client library's own parser)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text

from tests.engine.helpers import ENGINE_TABLES
from tests.ledger_helpers import restore_handlers
from tests.web.conftest import API_TABLES, app, clean, client, make_job, monitor, operator, token  # noqa: F401

ALL_TABLES = f"{ENGINE_TABLES}, workflow_signals"


@pytest.fixture
def fresh(clean):  # noqa: F811 - ledger, API and engine tables empty
    with clean.begin() as conn:
        conn.execute(text(f"TRUNCATE {ALL_TABLES} RESTART IDENTITY CASCADE"))
    return clean


@pytest.fixture
def handler_registry() -> Iterator[None]:
    from app.ledger import handlers

    saved = dict(handlers._handlers)
    yield
    restore_handlers(saved)


@pytest.fixture
def run_pool(engine, settings) -> Callable[..., None]:
    """Run an in-process LedgerPool of ``pool`` until ``done()`` (a SQL count condition) holds."""

    def _run(pool: str, done: Callable[[], bool], timeout: float = 30.0) -> None:
        from app.ids import new_id
        from app.ledger.pool import LedgerPool
        from app.ledger.states import Pool

        fast = replace(settings, poll_seconds=0.1, renew_seconds=0.5, lease_seconds=5.0)
        p = LedgerPool(Pool(pool), settings=fast, engine=engine, worker_id=new_id())
        p.start()
        try:
            deadline = time.monotonic() + timeout
            while not done():
                assert time.monotonic() < deadline, "the pool did not finish in time"
                p.nudge()
                time.sleep(0.05)
        finally:
            p.stop(timeout=10)

    return _run


def scalar(engine: Any, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar()


def parse_metrics(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition: {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: dict, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, lab), v in samples.items() if n == name and want <= set(lab))
