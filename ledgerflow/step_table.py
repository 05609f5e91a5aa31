"""A workflow's steps as a table for people: ``ledgerflow workflows show`` (read from the database) and
``ledgerflow workflows watch`` (read through the API) print the same columns from the same step views
(``app.engine.views.step_view``, which ``GET /v1/workflows/{id}/steps/{key}`` answers)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

COLUMNS = ["step", "kind", "state", "#", "took", "output / error / waiting for"]
DETAIL_CHARS = 120


def _time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    return None


def _took(view: dict[str, Any]) -> str:
    start, end = _time(view.get("activated_at")), _time(view.get("completed_at"))
    if start is None or end is None:
        return ""
    seconds = (end - start).total_seconds()
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _json(value: Any) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1] + "…"


def left(ms: int) -> str:
    """A paused wait's time left, for people: ``45 s``, ``59 min``, ``23 h 59 min``, ``2 d 3 h``."""
    seconds = max(0, int(ms) // 1000)
    if seconds < 60:
        return f"{seconds} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours < 1:
        return f"{minutes} min"
    if days < 1:
        return f"{hours} h {minutes % 60} min" if minutes % 60 else f"{hours} h"
    return f"{days} d {hours % 24} h" if hours % 24 else f"{days} d"


def detail(view: dict[str, Any]) -> str:
    """The one thing worth knowing about a step now: its output, its error, or what it waits for."""
    step = view.get("step", view)
    if "error" in view:
        return "error: " + _json(view["error"])
    if "output" in view:
        return _json(view["output"])
    if view.get("next_attempt_remaining_ms") is not None:  # a paused backoff: its time left, not a time
        return f"next attempt paused, {left(view['next_attempt_remaining_ms'])} left"
    if view.get("next_attempt_at"):
        return f"next attempt at {view['next_attempt_at']}"
    if view.get("child_workflow_id"):
        return f"child workflow {view['child_workflow_id']}"
    wait = view.get("wait")
    if isinstance(wait, dict) and wait.get("state") not in ("RESOLVED", "EXPIRED", "CANCELLED"):
        paused = wait.get("paused") and wait.get("remaining_ms") is not None
        if wait.get("kind") == "TIMER":
            if paused:
                return f"timer paused, {left(wait['remaining_ms'])} left"
            return f"timer until {wait.get('deadline_at')}"
        what = f"signal {wait.get('name')} ({wait.get('payload_version')})"
        if wait.get("correlation_key") is not None:
            what += f", correlation key {wait['correlation_key']}"
        if paused:
            return what + f", timeout paused with {left(wait['remaining_ms'])} left"
        return what + (f", until {wait['deadline_at']}" if wait.get("deadline_at") else "")
    poll = view.get("poll")
    if isinstance(poll, dict) and not poll.get("resolved_at"):
        return f"poll round {poll.get('used_rounds')} of {poll.get('max_rounds')}"
    if step.get("state") == "ACTIVE" and step.get("kind") == "TASK":
        return f"task {step.get('task_id') or ''} waits for a task worker".replace("  ", " ")
    if step.get("state") == "BLOCKED":
        return "waits for the steps before it"
    return ""


def rows(views: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One row per step view (``{"step": summary, "input"?, "output"?, "error"?, ...}``)."""
    out: list[tuple[str, ...]] = []
    for view in views:
        step = view.get("step", view)
        seq = step.get("activation_sequence")
        out.append(
            (
                step["key"],
                step["kind"],
                step["state"],
                "" if seq is None else str(seq),
                _took(view),
                detail(view),
            )
        )
    return out


def table(title: str, views: list[dict[str, Any]]) -> Any:
    """A rich Table of ``views``."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in COLUMNS:
        t.add_column(c, overflow="fold", no_wrap=c in ("step", "kind", "state", "#", "took"))
    for r in rows(views):
        t.add_row(*r)
    return t
