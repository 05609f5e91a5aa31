"""The failover scenario's short form (``python -m chaos --only postgres-failover`` runs the longer one):
the Procfile processes on a pg_auto_failover pair (a primary and a synchronous standby, DATABASE_URL in
libpq's multi-host form), a switchover and a SIGKILLed primary under load; every acknowledged start,
signal and task completion is in the database, nothing doubled, every workflow SUCCEEDED, no 500."""

from __future__ import annotations

import pytest

from chaos import failover
from chaos.__main__ import table
from chaos.autofailover import MISSING, pg_autoctl


def test_two_failovers_under_load_lose_and_double_nothing():
    if pg_autoctl() is None:
        pytest.fail(MISSING, pytrace=False)
    # the short form: one worker per pool, and the killed node restarted without waiting for it to be
    # the standby again (the full scenario checks that)
    result = failover.run_failover(failover.QUICK, timeout=90, workers_per_pool=1, rejoin=False)
    report = table([result])
    print(report)
    assert result.error is None, report
    assert result.faults == 2, report
    assert result.violations == 0, report
    assert result.workflows > 0 and result.jobs > 0, report
    assert any(n.startswith("switchover:") for n in result.notes), report
    assert any(n.startswith("sigkill:") for n in result.notes), report
