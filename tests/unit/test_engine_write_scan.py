"""Every write of an engine state column lives in ``app/engine/transitions/`` (``app/engine/states.py``).
This scan reads the source of every module outside it and fails on an ``INSERT INTO`` one of the
engine's state tables or an ``UPDATE`` of one whose ``SET`` names ``state`` (or the flags that gate
it: ``paused``, ``cancel_requested_at``, ``stop_kind``, ``compensation``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRANSITIONS = ROOT / "app" / "engine" / "transitions"
TABLES = "instances|steps|activations|tasks|waits|signals"
_JOIN = re.compile(r'"\s*\n\s*f?"')  # adjacent string literals over lines
_INSERT = re.compile(rf"INSERT\s+INTO\s+workflow_({TABLES})\b", re.I)
_UPDATE = re.compile(
    rf"UPDATE\s+workflow_({TABLES})\b(?:\s+\w+)?\s+SET\s+(.*?)(?:\bWHERE\b|\bFROM\b|$)", re.I | re.S
)
_STATE_COL = re.compile(r"(?:^|[\s,.])(state|paused|cancel_requested_at|stop_kind|compensation)\s*=", re.I)


def offending_writes(source: str) -> list[str]:
    text = _JOIN.sub("", source)
    found = [f"INSERT INTO workflow_{m.group(1)}" for m in _INSERT.finditer(text)]
    for m in _UPDATE.finditer(text):
        if _STATE_COL.search(m.group(2)):
            found.append(f"UPDATE workflow_{m.group(1)} SET {m.group(2).strip()[:60]}")
    return found


def test_the_scan_sees_a_state_write() -> None:
    assert offending_writes(
        'x = "UPDATE workflow_steps SET revision = 1, "\n    "state = \'FAILED\' WHERE id = 1"'
    )
    assert offending_writes("INSERT INTO workflow_tasks (id) VALUES (1)")
    assert not offending_writes("UPDATE workflow_tasks SET deadline_at = now() WHERE state = 'PENDING'")


def test_no_engine_state_write_outside_the_transitions() -> None:
    offenders = {}
    for folder in ("app", "web", "schemas", "actors", "ledgerflow"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.is_relative_to(TRANSITIONS):
                continue
            found = offending_writes(path.read_text())
            if found:
                offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}, f"engine state written outside app/engine/transitions: {offenders}"


# Transitions that write a state column without an event, and why (docs/integrations.md lists them):
NO_EVENT = {
    "step_moves.insert_activation": "the activation row; step.activated follows in step_moves.activate",
    "step_moves.end_activation_for_retry": "an operator RETRY_STEP; step.activated of the new activation follows",
    "task_moves.claim": "delivery of work to a task worker (lock-free, many instances at once)",
    "task_moves.return_expired": "the lease sweep returns a claim; no business state changes",
    "instance_moves.set_compensation_task": "bookkeeping of the saga's current task (task.created follows)",
}


def test_every_state_writing_transition_writes_an_event() -> None:
    """No state change can forget its event: every function of the transitions (waits aside: a wait's
    end is reported by its step) that writes a state column calls the events outbox."""
    import ast

    missing = []
    for module in ("instance_moves", "step_moves", "task_moves", "signal_moves"):
        path = TRANSITIONS / f"{module}.py"
        source = path.read_text()
        tree = ast.parse(source)
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            body = ast.get_source_segment(source, node) or ""
            if not offending_writes(body) or f"{module}.{node.name}" in NO_EVENT:
                continue
            if not re.search(r"events\.emit|_task_event\(|_events\(", body):
                missing.append(f"{module}.{node.name}")
    assert missing == [], f"state-writing transitions without an event: {missing}"
