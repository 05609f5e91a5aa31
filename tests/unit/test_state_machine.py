"""docs/state_machine.md is the drawing of the code's own transition tables (``app.engine.states``,
``app.ledger.states``), and those tables say what the transitions modules do: each move names a function
that exists, that writes the states the table says it enters, and whose guard is the table's ``from``
(the module constant it reads, or the state its statement names). A move added to a module without its
row, or a row without its move, or a drawing not regenerated, fails here."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
from types import ModuleType

import pytest

from app.engine import state_diagrams
from app.engine.state_diagrams import MACHINES, Machine
from app.ledger.states import Move

_MODULES = {
    "app.engine.transitions": ("instance_moves", "step_moves", "task_moves", "wait_moves", "signal_moves"),
    "app.ledger": ("transitions.executor", "transitions.interventions", "enqueue"),
}


def _module(machine: Machine, short: str) -> ModuleType:
    for name in _MODULES[machine.modules]:
        if name.rsplit(".", 1)[-1] == short:
            return importlib.import_module(f"{machine.modules}.{name}")
    raise AssertionError(f"{machine.name}: no module {short} under {machine.modules}")


def _moves() -> list[tuple[Machine, Move]]:
    return [(machine, move) for machine in MACHINES for move in machine.moves]


def _code(func: object, depth: int = 2) -> str:
    """The source of ``func`` and of what it names of its own module: the helpers it calls and the
    statements it runs (module constants: text, ``Query`` or ``text()``), ``depth`` calls deep."""
    source = inspect.getsource(func)  # type: ignore[arg-type]
    # the code, not its prose: docstrings and comments out
    fn = ast.parse(textwrap.dedent(source)).body[0]
    if ast.get_docstring(fn):  # type: ignore[arg-type]
        doc = fn.body[0]  # type: ignore[attr-defined]
        lines = source.splitlines()
        source = "\n".join(lines[: doc.lineno - 1] + lines[doc.end_lineno :])
    source = re.sub(r"#[^\n]*", "", source)
    found = [source]
    scope = getattr(func, "__globals__", {})
    for name in dict.fromkeys(re.findall(r"\b[A-Za-z_]\w*\b", source)):
        value = scope.get(name)
        if value is None or value is func:
            continue
        if inspect.isfunction(value) and depth > 0:
            found.append(_code(value, depth - 1))
        elif isinstance(value, str):
            found.append(value)
        elif isinstance(getattr(value, "text", None), str):
            found.append(value.text)
        elif isinstance(value, dict):  # a table of statements (by filter, by kind) or of states
            found += [getattr(v, "text", None) or repr(v) for v in value.values()]
    return "\n".join(found)


def _default(machine: Machine) -> str | None:
    """The column default of the machine's state column (what a row is inserted in when its INSERT does
    not say)."""
    from app.engine import models

    table, column = machine.column.split()[0].split(".")
    default = (
        models.metadata.tables[table].c[column].server_default if table in models.metadata.tables else None
    )
    return None if default is None else str(default.arg.text).strip("'")  # type: ignore[attr-defined]


def _names(state: str) -> tuple[str, ...]:
    """How a statement or the code names a state: a literal, or an enum member."""
    return (f"'{state}'", f'"{state}"', f".{state.upper()}")


def test_the_document_is_the_drawing_of_the_code():
    assert state_diagrams.DOC.read_text() == state_diagrams.render(), (
        "docs/state_machine.md differs from the code's transition tables: "
        "run .venv/bin/python -m app.engine.state_diagrams --write"
    )


@pytest.mark.parametrize(("machine", "move"), _moves(), ids=lambda x: getattr(x, "name", None) or x.by)
def test_each_move_is_a_function_that_enters_its_states_from_its_guard(machine: Machine, move: Move):
    short, func_name = move.by.split(".")
    module = _module(machine, short)
    func = getattr(module, func_name, None)
    assert callable(func), f"{move.by} is no function of {module.__name__}"
    # the engine's moves are read in their function (and the helpers and statements it names), the
    # ledger's in their module (its statements are module constants built from shared pieces)
    source = _code(func) if machine.modules.startswith("app.engine") else inspect.getsource(module)
    folded = re.sub(r'" "', "", " ".join(source.split()))  # adjacent string literals joined
    # the caller names the target state: a parameter of the function or of its statement
    caller_given = "state" in inspect.signature(func).parameters or re.search(
        r"state = :s\b|:state\b", folded
    )
    created_in = _default(machine) if not move.frm else None
    for state in move.to:
        assert caller_given or state == created_in or any(n in source for n in _names(state)), (
            f"{move.by}: the table says it enters {state}, its code never names it"
        )
    if move.guard is not None and " " in move.guard:  # a guard written in the statement itself
        assert " ".join(move.guard.split()) in folded, f"{move.by}: its statement has no {move.guard!r}"
    elif move.guard is not None:
        mod_name, const = move.guard.split(".")
        holder = (
            importlib.import_module("app.engine.states")
            if mod_name == "states"
            else _module(machine, mod_name)
        )
        assert set(getattr(holder, const)) == set(move.frm), (
            f"{move.by}: its guard {move.guard} is not {move.frm}"
        )
        assert re.search(rf"\b{const}\b", inspect.getsource(module)), f"{module.__name__} never uses {const}"
    else:
        for state in move.frm:
            assert any(n in source for n in _names(state)), (
                f"{move.by}: leaves {state}, its code never names it"
            )


@pytest.mark.parametrize("machine", MACHINES, ids=lambda m: m.name)
def test_every_state_is_entered_and_every_open_state_is_left(machine: Machine):
    entered = {s for m in machine.moves for s in m.to}
    left = {s for m in machine.moves for s in m.frm if set(m.to) - {s}}
    for state in machine.states:
        if state in machine.unreached:
            assert state not in entered, f"{machine.name}: {state} is entered now: take it out of UNREACHED"
            continue
        assert state in entered, f"{machine.name}: no move enters {state}"
        assert state in machine.terminal or state in left, f"{machine.name}: no move leaves {state}"
    assert not (machine.terminal & left), f"{machine.name}: an end state is left: {machine.terminal & left}"
