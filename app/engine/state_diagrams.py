"""docs/state_machine.md, drawn from the code's transition tables (``app.engine.states`` and
``app.ledger.states``: every move as ``Move(by, frm, to)``): one Mermaid state diagram per machine, each
edge labelled with the function that makes the move, and a table of the same moves.

    .venv/bin/python -m app.engine.state_diagrams            # prints the document
    .venv/bin/python -m app.engine.state_diagrams --write    # writes docs/state_machine.md

tests/unit/test_state_machine.py fails when the file and this rendering differ, or when a table and the
transitions modules disagree."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from enum import StrEnum
from pathlib import Path

from app.engine import states as engine_states
from app.ledger import states as ledger_states
from app.ledger.states import Move

DOC = Path(__file__).resolve().parents[2] / "docs" / "state_machine.md"


class Machine:
    """One state machine: its name, the column it lives in, its states, its moves, its end states."""

    def __init__(
        self,
        name: str,
        column: str,
        enum: type[StrEnum],
        moves: Iterable[Move],
        terminal: Iterable[str],
        modules: str,
        *,
        without: Iterable[str] = (),
    ) -> None:
        self.name = name
        self.column = column
        self.states = [m.value for m in enum if m.value not in set(without)]
        self.moves = tuple(moves)
        self.terminal = frozenset(terminal)
        self.modules = modules  # where the moves' functions live (``app/engine/transitions/``, ...)
        self.unreached = engine_states.UNREACHED.get(name, frozenset())


E, L = engine_states, ledger_states
MACHINES: tuple[Machine, ...] = (
    Machine(
        "instance",
        "workflow_instances.state",
        E.InstanceState,
        E.INSTANCE_MOVES,
        E.TERMINAL,
        "app.engine.transitions",
    ),
    Machine(
        "step",
        "workflow_steps.state",
        E.StepState,
        E.STEP_MOVES,
        {E.StepState.SUCCEEDED},
        "app.engine.transitions",
    ),
    Machine(
        "activation",
        "workflow_steps.act_state (replaced ones: workflow_activations.state)",
        E.StepState,
        E.ACTIVATION_MOVES,
        {E.StepState.SUCCEEDED},  # an operator's close settles a FAILED or CANCELLED one again
        "app.engine.transitions",
        without={E.StepState.BLOCKED},  # a step is BLOCKED before it has an activation
    ),
    Machine(
        "task",
        "workflow_tasks.state",
        E.TaskState,
        E.TASK_MOVES,
        {E.TaskState.COMPLETED, E.TaskState.FAILED, E.TaskState.TIMED_OUT, E.TaskState.CANCELLED},
        "app.engine.transitions",
    ),
    Machine(
        "wait",
        "workflow_waits.state",
        E.WaitState,
        E.WAIT_MOVES,
        {E.WaitState.RESOLVED, E.WaitState.EXPIRED, E.WaitState.CANCELLED},
        "app.engine.transitions",
    ),
    Machine(
        "signal",
        "workflow_signals.state",
        E.SignalState,
        E.SIGNAL_MOVES,
        {E.SignalState.CONSUMED, E.SignalState.REJECTED, E.SignalState.EXPIRED},
        "app.engine.transitions",
    ),
    Machine("job", "workflow_jobs.status", L.JobStatus, L.JOB_MOVES, L.JOB_TERMINAL, "app.ledger"),
    Machine(
        "attempt",
        "workflow_job_executions.status",
        L.AttemptStatus,
        L.ATTEMPT_MOVES,
        L.ATTEMPT_TERMINAL,
        "app.ledger",
    ),
)


def edges(machine: Machine) -> list[tuple[str, str, list[str]]]:
    """(from, to, the functions that move a row so) of ``machine``, in the order of its table; ``[*]`` is
    the row's creation; a move that leaves the state as it is (RUNNING -> RUNNING) is no edge."""
    found: dict[tuple[str, str], list[str]] = {}
    for m in machine.moves:
        for frm in m.frm or ("[*]",):
            for to in m.to:
                if frm != to:
                    names = found.setdefault((str(frm), str(to)), [])
                    if m.by not in names:
                        names.append(m.by)
    return [(f, t, by) for (f, t), by in found.items()]


def mermaid(machine: Machine) -> str:
    lines = ["```mermaid", "stateDiagram-v2"]
    for frm, to, by in edges(machine):
        lines.append(f"    {frm} --> {to}: {', '.join(b.split('.')[-1] for b in by)}")
    for state in machine.states:
        if state in machine.terminal:
            lines.append(f"    {state} --> [*]")
    for state in sorted(machine.unreached):
        lines.append(f"    note left of {state}: no move enters it yet")
    lines.append("```")
    return "\n".join(lines)


def table(machine: Machine) -> str:
    rows = ["| move | from | to |", "|---|---|---|"]
    for m in machine.moves:
        frm = ", ".join(f"`{s}`" for s in m.frm) or "(created)"
        rows.append(f"| `{m.by}` | {frm} | {', '.join(f'`{s}`' for s in m.to)} |")
    return "\n".join(rows)


def render() -> str:
    parts = [
        "# The state machines",
        "",
        "Generated from the code's transition tables (`app/engine/states.py`, `app/ledger/states.py`) by",
        "`python -m app.engine.state_diagrams --write`; do not edit by hand. `tests/unit/test_state_machine.py`",
        "fails when this file and the code disagree: each move names a function of the transitions modules that",
        "exists, writes the states it enters and guards with the states it leaves.",
        "",
        "An edge is labelled with the function that makes the move (every move is one guarded statement:",
        "`WHERE state = ANY(:from)`); `[*]` is where a row is created, and an end state leads to `[*]`.",
    ]
    for machine in MACHINES:
        parts += [
            "",
            f"## {machine.name.capitalize()} (`{machine.column}`)",
            "",
            f"Moves in `{machine.modules}`.",
            "",
            mermaid(machine),
            "",
            table(machine),
        ]
    return "\n".join(parts) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--write" in argv:
        DOC.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
