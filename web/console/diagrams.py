"""Server-rendered SVG figures of a workflow (pure geometry, no I/O; drawn by ``_graph.html`` and
``_timeline.html`` with presentation attributes and classes only: the CSP allows no inline style, and
the classes give the colours of both schemes).

- ``graph``: the definition's steps as a layered DAG, top to bottom (a step's row is its depth in the
  graph, ``app.engine.overview.graph_layers``), each node coloured by its step's state, an edge from
  every step to each step that waits for it.
- ``timeline``: one row per step in graph order; a bar per activation from its start to its end (or to
  now while it runs), and inside it a thinner bar per task attempt; a dashed line at now."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 150, 34, 24, 30, 10
MAX_LABEL = 18
TL_LEFT, TL_RIGHT, TL_ROW, TL_TOP, TL_WIDTH = 140, 12, 22, 22, 900


def _label(text: str, limit: int = MAX_LABEL) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _note(s: Mapping[str, Any]) -> str:
    """What the node's title adds to its state: a skip's reason, a fan-out's progress."""
    skipped, fan = s.get("skipped"), s.get("fan_out")
    if isinstance(skipped, Mapping):
        return f" ({skipped.get('code')}: {skipped.get('message')})"
    if isinstance(fan, Mapping):
        return f" ({fan['done']}/{fan['total']} done, {fan['running']} running, {fan['failed']} failed)"
    return ""


def graph(steps: Sequence[Mapping[str, Any]], layers: Mapping[str, int]) -> dict[str, Any]:
    """Nodes and edges of the step graph. ``steps``: in graph order, each with ``key``, ``state``,
    ``after``; ``layers``: each key's depth."""
    rows: dict[int, list[str]] = {}
    for s in steps:
        rows.setdefault(layers.get(s["key"], 0), []).append(s["key"])
    widest = max((len(r) for r in rows.values()), default=1)
    width = PAD * 2 + widest * NODE_W + (widest - 1) * GAP_X
    pos: dict[str, tuple[float, float]] = {}
    for depth, keys in sorted(rows.items()):
        row_w = len(keys) * NODE_W + (len(keys) - 1) * GAP_X
        x0 = (width - row_w) / 2
        for i, key in enumerate(keys):
            pos[key] = (x0 + i * (NODE_W + GAP_X), PAD + depth * (NODE_H + GAP_Y))
    nodes = [
        {
            "key": s["key"],
            "label": _label(s["key"]),
            "state": s["state"],
            "kind": s.get("kind", ""),
            "note": _note(s),
            "x": round(pos[s["key"]][0], 1),
            "y": round(pos[s["key"]][1], 1),
        }
        for s in steps
    ]
    edges = []
    for s in steps:
        for before in s.get("after") or ():
            if before not in pos:
                continue
            (x1, y1), (x2, y2) = pos[before], pos[s["key"]]
            sx, sy, ex, ey = x1 + NODE_W / 2, y1 + NODE_H, x2 + NODE_W / 2, y2
            mid = (sy + ey) / 2
            edges.append(f"M{sx:.1f},{sy:.1f} C{sx:.1f},{mid:.1f} {ex:.1f},{mid:.1f} {ex:.1f},{ey - 4:.1f}")
    height = PAD * 2 + (max(rows, default=0) + 1) * (NODE_H + GAP_Y) - GAP_Y
    return {
        "width": width,
        "height": height,
        "nodes": nodes,
        "edges": edges,
        "node_w": NODE_W,
        "node_h": NODE_H,
    }


def _x(t: datetime, t0: datetime, span: float, plot_w: float) -> float:
    return TL_LEFT + plot_w * max(min((t - t0).total_seconds() / span, 1.0), 0.0)


def timeline(
    order: Sequence[str],
    activations: Sequence[Mapping[str, Any]],
    attempts: Sequence[Mapping[str, Any]],
    now: datetime,
    skipped: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Rows, bars and time ticks of the timeline (see the module text). Times are datetimes; an open
    activation or attempt ends at ``now``. ``skipped``: the skip reason of each SKIPPED step by key (its
    row has no bar; the reason is written in it)."""
    skipped = skipped or {}
    keys = list(order)
    for a in [*activations, *attempts]:
        if a["key"] not in keys:
            keys.append(a["key"])  # compensation tasks of steps no longer in the order, e.g.
    starts = [a["start"] for a in [*activations, *attempts] if a["start"] is not None]
    t0 = min(starts, default=now)
    ends = [a["end"] or now for a in [*activations, *attempts]]
    t1 = (
        max([now, *ends])
        if any(a["end"] is None for a in [*activations, *attempts])
        else max(ends, default=now)
    )
    span = max((t1 - t0).total_seconds(), 0.001)
    plot_w = TL_WIDTH - TL_LEFT - TL_RIGHT
    row_of = {k: i for i, k in enumerate(keys)}
    bars = []
    for a in activations:
        if a["start"] is None:
            continue
        x1, x2 = _x(a["start"], t0, span, plot_w), _x(a["end"] or now, t0, span, plot_w)
        y = TL_TOP + row_of[a["key"]] * TL_ROW + 3
        bars.append(
            {
                "x": round(x1, 1),
                "y": y,
                "w": round(max(x2 - x1, 2.0), 1),
                "h": TL_ROW - 6,
                "cls": f"bar {a['state']}",
                "title": f"{a['key']} #{a['sequence']}: {a['state']}",
            }
        )
    for t in attempts:
        if t["start"] is None:
            continue
        x1, x2 = _x(t["start"], t0, span, plot_w), _x(t["end"] or now, t0, span, plot_w)
        y = TL_TOP + row_of[t["key"]] * TL_ROW + 8
        what = "compensation" if t.get("purpose") == "COMPENSATION" else f"attempt {t['attempt']}"
        bars.append(
            {
                "x": round(x1, 1),
                "y": y,
                "w": round(max(x2 - x1, 2.0), 1),
                "h": TL_ROW - 16,
                "cls": f"bar attempt {t['state']}",
                "title": f"{t['key']} {what}: {t['state']}",
            }
        )
    ticks = [
        {"x": round(TL_LEFT + plot_w * f, 1), "label": _offset(span * f)} for f in (0, 0.25, 0.5, 0.75, 1)
    ]
    return {
        "width": TL_WIDTH,
        "height": TL_TOP + max(len(keys), 1) * TL_ROW + 6,
        "left": TL_LEFT,
        "right": TL_WIDTH - TL_RIGHT,
        "top": TL_TOP,
        "row": TL_ROW,
        "rows": [
            {"key": _label(k, 20), "y": TL_TOP + i * TL_ROW + TL_ROW / 2 + 4, "skipped": skipped.get(k)}
            for i, k in enumerate(keys)
        ],
        "bars": bars,
        "ticks": ticks,
        "start": t0,
        "end": t1,
        "now_x": round(_x(now, t0, span, plot_w), 1) if t0 <= now <= t1 else None,
    }


def _offset(seconds: float) -> str:
    if seconds < 1:
        return f"+{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"+{seconds:.1f} s"
    if seconds < 7200:
        return f"+{seconds / 60:.1f} min"
    return f"+{seconds / 3600:.1f} h"
