"""Server-rendered SVG line charts: pure geometry (no I/O), drawn by ``templates/console/_chart.html``
with presentation attributes only (the CSP allows no inline style)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

WIDTH, HEIGHT = 360, 120
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 8, 18


def _nice_max(peak: float) -> float:
    """The smallest 1/2/5 x 10^n at or above ``peak`` (1 when nothing was measured)."""
    if peak <= 0:
        return 1.0
    scale = 1.0
    while scale * 10 <= peak:
        scale *= 10
    while scale > peak:
        scale /= 10
    for m in (1, 2, 5, 10):
        if m * scale >= peak:
            return m * scale
    return 10 * scale


def _label(value: float, unit: str, percent: bool, *, exact: bool = False) -> str:
    """An axis tick (``50%``) or, ``exact``, a measured value as the status panel prints it (``61.5%``)."""
    if percent:
        return f"{value * 100:.1f}%" if exact else f"{value * 100:g}%"
    return f"{value:g}{unit}"


def line_chart(
    series: Mapping[str, Sequence[float | None]], *, unit: str = "", percent: bool = False
) -> dict[str, Any]:
    """Polylines of equally spaced samples, one per series; a ``None`` sample breaks the line (no
    measurement is not zero). Returns the view box, the y axis ticks and the segments to draw."""
    n = max((len(v) for v in series.values()), default=0)
    peak = max((x for v in series.values() for x in v if x is not None), default=0.0)
    top = 1.0 if percent and peak <= 1 and peak > 0.5 else _nice_max(float(peak))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def xy(i: int, v: float) -> str:
        x = LEFT + (plot_w * i / (n - 1) if n > 1 else plot_w / 2)
        y = TOP + plot_h * (1 - min(v, top) / top)
        return f"{x:.1f},{y:.1f}"

    lines: list[dict[str, Any]] = []
    for idx, (name, values) in enumerate(series.items()):
        segments: list[list[str]] = []
        current: list[str] = []
        for i, v in enumerate(values):
            if v is None:
                if current:
                    segments.append(current)
                current = []
            else:
                current.append(xy(i, float(v)))
        if current:
            segments.append(current)
        lines.append(
            {
                "name": name,
                "series": idx,
                "segments": [" ".join(s) for s in segments],
                "last": next((v for v in reversed(values) if v is not None), None),
            }
        )
    ticks = [{"y": TOP + plot_h * (1 - f), "label": _label(top * f, unit, percent)} for f in (0, 0.5, 1)]
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "right": WIDTH - RIGHT,
        "top": TOP,
        "bottom": HEIGHT - BOTTOM,
        "ticks": ticks,
        "lines": lines,
        "samples": n,
        "last_labels": {
            ln["name"]: None if ln["last"] is None else _label(ln["last"], unit, percent, exact=True)
            for ln in lines
        },
    }


def hour_totals(series: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A pool's last hour in one figure, computed as the status panel computes it: failed attempts over
    attempts (``None`` without attempts)."""
    attempts = sum(int(b["attempts"]) for b in series)
    failed = sum(int(b["failed"]) for b in series)
    return {"attempts": attempts, "failed": failed, "rate": (failed / attempts) if attempts else None}
