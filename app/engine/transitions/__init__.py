"""Every write of an engine state column, as named guarded SQL — one place, like the ledger's
``app/ledger/transitions``. Each statement names the states it may leave (``state = ANY(:from)``).

- single-row moves raise ``TransitionRefused`` (a ``StateConflict``) when no row matched;
- ``try_*`` moves are conditional (due, still open) and return whether they moved the row;
- set moves (every open task / wait / step of an instance) return what they moved.

``app/engine/states.py`` says which of these moves each state in and out; the decisions are pure
functions in ``app/engine/decide/``. ``tests/unit/test_engine_write_scan.py`` checks that no other
module writes these columns.
"""

from app.engine.transitions import instance_moves, signal_moves, step_moves, task_moves, wait_moves
from app.engine.transitions._guard import TransitionRefused

__all__ = ["TransitionRefused", "instance_moves", "signal_moves", "step_moves", "task_moves", "wait_moves"]
