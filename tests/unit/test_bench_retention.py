"""The retention benchmark's CPU figures per phase (bench/retention.py, ``cpu_within``): a phase's figures are
made of the samples inside its own windows, never of what lies between them. Pure arithmetic: no database,
no timing."""

from __future__ import annotations

from bench.retention import cpu_within


def sample(at: float, busy: float, all_: float) -> tuple[float, tuple[float, ...]]:
    # _cpu's fields: busy, I/O wait, all, then the claimer backend's and thread's run / wait seconds
    return at, (busy, 0.0, all_, busy / 2, 0.0, 0.0, 0.0)


def test_a_phase_counts_only_its_own_windows() -> None:
    # busy 10 % of the machine inside the windows, 90 % between them
    points = [
        sample(0.0, 0.0, 0.0),
        sample(1.0, 0.2, 2.0),  # window 1: +0.2 busy of 2.0
        sample(11.0, 18.2, 22.0),  # between: +18 busy of 20
        sample(12.0, 18.4, 24.0),  # window 2: +0.2 busy of 2.0
    ]
    d, wall = cpu_within(points, [(0.0, 1.5), (11.0, 12.5)])
    assert wall == 2.0
    assert round(d[0] / d[2], 6) == 0.1  # the whole run's first-to-last would say 0.77
    assert round(d[3], 6) == 0.2  # the claimer backend ran 0.1 s in each window


def test_windows_without_two_samples_add_nothing() -> None:
    points = [sample(0.0, 0.0, 0.0), sample(5.0, 1.0, 10.0)]
    assert cpu_within(points, [(0.0, 1.0), (4.0, 6.0)]) == ((), 0.0)
    assert cpu_within([], [(0.0, 1.0)]) == ((), 0.0)
