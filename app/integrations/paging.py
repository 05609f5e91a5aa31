"""Keyset pages over ``(created_at, id)`` with cursors bound to the query (``app.cursor``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, text

from app import cursor as cursors
from app.jsonx import rfc3339


def page(
    conn: Connection,
    sql: str,
    params: dict[str, Any],
    *,
    binding: dict[str, Any],
    limit: int,
    cursor: str | None,
    view: Callable[[Any], dict[str, Any]],
    alias: str = "",
    newest_first: bool = False,
) -> dict[str, Any]:
    """``sql`` selects rows with ``created_at`` and ``id`` and ends with ``{after}`` where the keyset
    condition goes (``AND ...``) and ``{order}`` for the ORDER BY + LIMIT."""
    pos = cursors.decode(cursor, binding, t=cursors.TIME, i=cursors.TEXT) if cursor else None
    op, direction = ("<", "DESC") if newest_first else (">", "")
    after = f"AND ({alias}created_at, {alias}id) {op} (:_t, :_i)" if pos else ""
    order = f"ORDER BY {alias}created_at {direction}, {alias}id {direction} LIMIT :_n"
    rows = conn.execute(
        text(sql.format(after=after, order=order)),
        {
            **params,
            "_n": limit + 1,
            "_t": pos["t"] if pos else None,
            "_i": pos and pos["i"],
        },
    ).all()
    out: dict[str, Any] = {"items": [view(r) for r in rows[:limit]]}
    if len(rows) > limit:
        last = rows[limit - 1]
        out["next_cursor"] = cursors.encode({"t": rfc3339(last.created_at), "i": last.id}, binding)
    return out
