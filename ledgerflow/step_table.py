"""A workflow's steps as a table for people: ``ledgerflow workflows show`` and ``watch`` (the server's
command, read from the database or through the API, and the SDK's, through the API) print the same
columns from the same step views (``app.engine.views.step_view``, which ``GET
/v1/workflows/{id}/steps/{key}`` answers): the steps in the order of the definition's graph (each after
the steps it waits for), the attempts a TASK step took, and the last failed attempt's error. Pure: part
of the SDK distribution (the server's command draws these rows with rich, the SDK's as plain text)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

COLUMNS = ["step", "kind", "state", "attempts", "took", "output / error / waiting for"]
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


def _error(value: Any) -> str:
    """An error for people: its message when it has one (with its code), else its JSON."""
    if isinstance(value, dict) and isinstance(value.get("message"), str):
        code = value.get("code") or value.get("type")
        return _json(f"{code}: {value['message']}" if isinstance(code, str) else value["message"]).strip('"')
    return _json(value)


def _waiting_for(view: dict[str, Any]) -> str:
    step = view.get("step", view)
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


def detail(view: dict[str, Any]) -> str:
    """The one thing worth knowing about a step now: its output, its error, or what it waits for; and
    the error of its last failed attempt when one failed."""
    if "error" in view:
        now = "error: " + _error(view["error"])
    elif "output" in view:
        now = _json(view["output"])
    else:
        now = _waiting_for(view)
    failed = view.get("last_failed_attempt")
    if isinstance(failed, dict) and "error" not in view:
        said = (
            f"attempt {failed.get('attempt')} {str(failed.get('state', 'FAILED')).lower().replace('_', ' ')}"
        )
        now = "; ".join(p for p in (now, f"{said}: {_error(failed.get('error'))}") if p)
    return now


def graph_order(views: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``views`` so that every step comes after the steps it waits for (its ``after``), steps of one
    depth in the order given; a view without ``after`` (an older server) counts as a first step."""
    steps = {v.get("step", v)["key"]: v.get("step", v) for v in views}
    depth: dict[str, int] = {}

    def depth_of(key: str, seen: frozenset[str] = frozenset()) -> int:
        if key not in depth:
            before = [k for k in steps.get(key, {}).get("after") or () if k in steps and k not in seen]
            depth[key] = 1 + max((depth_of(k, seen | {key}) for k in before), default=-1)
        return depth[key]

    position = {key: i for i, key in enumerate(steps)}
    return sorted(views, key=lambda v: (depth_of(v.get("step", v)["key"]), position[v.get("step", v)["key"]]))


def rows(views: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One row per step view (``{"step": summary, "input"?, "output"?, "error"?, ...}``), graph order."""
    out: list[tuple[str, ...]] = []
    for view in graph_order(views):
        step = view.get("step", view)
        attempts = view.get("attempts")
        out.append(
            (
                step["key"],
                step["kind"],
                step["state"],
                "" if attempts is None else str(attempts),
                _took(view),
                detail(view),
            )
        )
    return out


def text_table(title: str, views: list[dict[str, Any]]) -> str:
    """The rows as plain text: a title line, a header and one line per step (the SDK's command)."""
    lines = [COLUMNS, *[list(r) for r in rows(views)]]
    widths = [max(len(line[i]) for line in lines) for i in range(len(COLUMNS) - 1)]
    out = [title]
    for line in lines:
        out.append("  ".join([c.ljust(w) for c, w in zip(line, widths, strict=False)] + [line[-1]]).rstrip())
    return "\n".join(out)
