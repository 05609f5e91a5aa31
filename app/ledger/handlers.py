"""Handler registry for the eleven job types (L-TYPE). A type without a handler settles ``dead``
with HANDLER_MISSING, never a silent success."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from app.ledger.outcome import HandlerMissing
from app.ledger.states import JobType

if TYPE_CHECKING:
    from app.ledger.context import JobContext

Handler = Callable[["JobContext"], Any]
_handlers: dict[str, Handler] = {}


def register(job_type: str | JobType, fn: Handler | None = None, *, replace: bool = False) -> Any:
    """Register ``fn`` for ``job_type``; usable as a decorator."""
    jt = JobType(job_type).value

    def _do(f: Handler) -> Handler:
        if jt in _handlers and not replace and _handlers[jt] is not f:
            raise ValueError(f"a handler for {jt} is already registered")
        _handlers[jt] = f
        return f

    return _do(fn) if fn is not None else _do


def resolve(job_type: str) -> Handler:
    try:
        return _handlers[job_type]
    except KeyError:
        raise HandlerMissing(f"no handler is registered for job type {job_type!r}") from None


def registered() -> dict[str, Handler]:
    return dict(_handlers)


def load_modules(modules: Iterable[str]) -> None:
    """Import modules that register handlers (built-in families, then LEDGERFLOW_HANDLERS).

    Like the ``dramatiq`` command, the working directory is importable, so a project's own handler
    modules load without installing them."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for name in modules:
        importlib.import_module(name)
