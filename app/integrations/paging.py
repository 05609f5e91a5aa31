"""Keyset pages over ``(created_at, id)`` with cursors bound to the query (``app.cursor``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from app import cursor as cursors
from app.jsonx import rfc3339
from app.sql import Query, query, run


@dataclass(frozen=True)
class Pages:
    """The two named statements of a keyset list: its first page and a page after a cursor's position."""

    first: Query
    after: Query


def pages(name: str, sql: str, *, alias: str = "", newest_first: bool = False) -> Pages:
    """The statements of the list ``sql`` (rows with ``created_at`` and ``id``; ends with ``{after}``,
    where the keyset condition goes, and ``{order}``, the ORDER BY and ``LIMIT :_n``), named ``name``
    (first page) and ``name_after`` (``:_t``, ``:_i``: the last row's position). Made once, at import."""
    op, direction = ("<", " DESC") if newest_first else (">", "")
    order = f"ORDER BY {alias}created_at{direction}, {alias}id{direction} LIMIT :_n"
    return Pages(
        first=query(name, sql.format(after="", order=order)),
        after=query(
            f"{name}_after",
            sql.format(after=f"AND ({alias}created_at, {alias}id) {op} (:_t, :_i)", order=order),
        ),
    )


def page(
    conn: Connection,
    statements: Pages,
    params: dict[str, Any],
    *,
    binding: dict[str, Any],
    limit: int,
    cursor: str | None,
    view: Callable[[Any], dict[str, Any]],
) -> dict[str, Any]:
    """A page of ``limit`` rows (``statements``, made by ``pages``) after ``cursor``'s position."""
    pos = cursors.decode(cursor, binding, t=cursors.TIME, i=cursors.TEXT) if cursor else None
    args = {**params, "_n": limit + 1}
    if pos:
        args.update(_t=pos["t"], _i=pos["i"])
    rows = run(conn, statements.after if pos else statements.first, args).all()
    out: dict[str, Any] = {"items": [view(r) for r in rows[:limit]]}
    if len(rows) > limit:
        last = rows[limit - 1]
        out["next_cursor"] = cursors.encode({"t": rfc3339(last.created_at), "i": last.id}, binding)
    return out
