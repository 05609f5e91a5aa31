"""The Procfile's release phase: ``release: ledgerflow db upgrade`` runs on every deploy,
possibly twice at once (two deploys, a one-off beside it). Real processes on an empty database."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from app.migrate import current_revisions, head_revisions
from ledgerflow import procfile

ROOT = Path(__file__).resolve().parents[2]


def _upgrade(url: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ledgerflow.cli", "db", "upgrade"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": url},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_the_procfile_releases_with_db_upgrade_and_make_run_does_not_run_it_as_a_process():
    assert procfile.processes(ROOT / "Procfile")["release"] == "ledgerflow db upgrade"
    assert list(procfile.long_running(ROOT / "Procfile")) == [
        "web",
        "worker-advance",
        "worker-outbound",
        "scheduler",
    ]


def test_two_concurrent_upgrades_of_an_empty_database_both_succeed_once(scratch):
    url, eng = scratch
    assert current_revisions(url) == ()
    procs = [_upgrade(url) for _ in range(2)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    heads = head_revisions(url)
    assert set(current_revisions(url)) == set(heads)
    # one of them migrated; the other waited on the lock and found the schema at head
    upgraded = [o for o in outs if "database schema upgraded: (empty) ->" in o]
    waited = [o for o in outs if "already at" in o]
    assert len(upgraded) + len(waited) == 2 and len(upgraded) >= 1, outs
    assert all("Traceback" not in o for o in outs), outs
    # on the next deploy it is a no-op
    again = _upgrade(url)
    out = again.communicate(timeout=120)[0]
    assert again.returncode == 0 and f"already at {', '.join(heads)} (head): nothing to do" in out, out
