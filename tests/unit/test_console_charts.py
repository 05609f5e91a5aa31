"""The console's SVG chart geometry (pure)."""

from __future__ import annotations

from web.console.charts import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH, _nice_max, hour_totals, line_chart


def test_nice_max_rounds_up_to_1_2_5():
    assert [_nice_max(v) for v in (0, 0.3, 1, 1.2, 3, 7, 12, 480)] == [1.0, 0.5, 1, 2, 5, 10, 20, 500]


def test_a_gap_breaks_the_line_and_the_scale_fits_the_peak():
    c = line_chart({"p95": [1.0, None, 2.0, 4.0]}, unit="s")
    [line] = c["lines"]
    assert len(line["segments"]) == 2  # no measurement is not zero
    first, second = line["segments"]
    assert " " not in first and len(second.split(" ")) == 2
    assert c["ticks"][-1]["label"] == "5s" and c["last_labels"] == {"p95": "4s"}
    xs = [float(p.split(",")[0]) for s in line["segments"] for p in s.split(" ")]
    ys = [float(p.split(",")[1]) for s in line["segments"] for p in s.split(" ")]
    assert xs[0] == LEFT and xs[-1] == WIDTH - RIGHT
    assert all(TOP <= y <= HEIGHT - BOTTOM for y in ys)


def test_failure_rate_as_percent_and_empty_series():
    c = line_chart({"rate": [0.0, 0.75]}, percent=True)
    assert c["ticks"][-1]["label"] == "100%" and c["last_labels"]["rate"] == "75.0%"
    empty = line_chart({"rate": [None, None]}, percent=True)
    assert empty["lines"][0]["segments"] == [] and empty["last_labels"]["rate"] is None


def test_measured_percentages_read_as_the_status_panel_prints_them():
    c = line_chart({"rate": [0.310344827, None]}, percent=True)
    assert c["last_labels"]["rate"] == "31.0%"  # one decimal, never 31.0345%
    assert hour_totals([{"attempts": 13, "failed": 8}, {"attempts": 0, "failed": 0}]) == {
        "attempts": 13,
        "failed": 8,
        "rate": 8 / 13,
    }
    assert hour_totals([])["rate"] is None
