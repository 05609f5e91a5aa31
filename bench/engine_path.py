"""Which modules one workflow start, one task completion and one timer job cross (the engine's path
count): runs the engine's own functions under ``sys.setprofile`` and prints, for each phase, the
project modules entered and how often control moved from one module to another.

    PYTHONPATH=. ledgerflow env -- python -m bench.engine_path      # needs a migrated DATABASE_URL
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from app.db import get_engine, transaction
from app.engine import definitions, instances, task_protocol
from app.ledger import handlers

PROJECT = ("app.", "web.", "actors.", "ledgerflow.")
DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "t", "kind": "TASK", "queue": "q", "input": {"x": "$.input.x"}},
        {"key": "wait", "kind": "TIMER", "delay_seconds": 1, "after": ["t"]},
        {"key": "t2", "kind": "TASK", "queue": "q", "after": ["wait"]},
    ],
}


def trace(fn: Callable[[], Any]) -> tuple[Any, list[str], int]:
    seen: list[str] = []
    crossings = 0
    stack: list[str] = []

    def prof(frame: Any, event: str, arg: Any) -> None:
        nonlocal crossings
        if event not in ("call", "return"):
            return
        mod = frame.f_globals.get("__name__", "")
        if not mod.startswith(PROJECT):
            return
        if event == "call":
            if stack and stack[-1] != mod:
                crossings += 1
            if mod not in seen:
                seen.append(mod)
            stack.append(mod)
        elif stack:
            stack.pop()

    sys.setprofile(prof)
    try:
        result = fn()
    finally:
        sys.setprofile(None)
    return result, seen, crossings


def main() -> None:
    engine = get_engine()
    ns = "path-" + uuid.uuid4().hex[:8]
    import app.engine.handlers.timers  # noqa: F401  (registers delay_wake)
    from tests.ledger_helpers import claim, context_for  # the inline claim the engine tests use

    with transaction(engine) as conn:
        d = definitions.create_definition(conn, ns, "path")
        definitions.publish_version(conn, ns, d["id"], DOC)

    def start() -> Any:
        with transaction(engine) as conn:
            return instances.start_workflow(
                conn, ns, {"definition_id": d["id"], "version": "v1", "input": {"x": 1}}
            )

    inst, mods, crossings = trace(start)
    print(f"start:          {len(mods):3d} modules, {crossings:4d} module crossings")
    with transaction(engine) as conn:
        task = task_protocol.claim(conn, ns, ["q"], 1, 60)[0]

    def complete() -> Any:
        with transaction(engine) as conn:
            return task_protocol.complete(conn, ns, task["id"], task["epoch"], {"ok": True})

    _, mods2, c2 = trace(complete)
    print(f"task complete:  {len(mods2):3d} modules, {c2:4d} module crossings")
    with engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE workflow_jobs SET run_at = now() WHERE type = 'delay_wake' AND instance_id = :i "
                "AND payload->>'wake' = 'timer'"
            ),
            {"i": inst["id"]},
        )
        conn.execute(
            text("UPDATE workflow_waits SET deadline_at = now() WHERE instance_id = :i"), {"i": inst["id"]}
        )
    row = next(r for r in claim(engine) if r["type"] == "delay_wake")

    def timer_job() -> Any:
        return handlers.resolve(row["type"])(context_for(row, engine))

    _, mods3, c3 = trace(timer_job)
    print(f"timer job:      {len(mods3):3d} modules, {c3:4d} module crossings")
    allm = list(dict.fromkeys(mods + mods2 + mods3))
    print(f"whole path:     {len(allm):3d} distinct modules")
    print("  " + " ".join(m.replace("app.", "") for m in allm))


if __name__ == "__main__":
    main()
