"""The short version of the fault suite (``python -m chaos`` runs the full table): one cluster of
real Procfile processes on a fresh database, three SIGKILLed workers, one SIGSTOP past the lease,
one Redis stop with a flushed restart — then every SQL invariant holds."""

from __future__ import annotations

import os

from chaos.__main__ import table
from chaos.scenarios import QUICK, run


def test_quick_fault_run_keeps_every_invariant():
    result = run("mixed", QUICK, os.environ["LEDGERFLOW_SERVER_DATABASE_URL"], timeout=120)
    report = table([result])
    assert result.error is None, report
    assert result.faults >= 5, report
    assert len(result.invariants) >= 12, report
    assert result.violations == 0, report
    assert result.jobs > 0 and result.workflows > 0, report
