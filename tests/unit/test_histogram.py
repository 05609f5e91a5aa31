"""The queue-wait histogram of the runtime status rollup (app/ledger/histogram.py): buckets, merging,
and percentiles within the stated error of the exact ``percentile_cont``."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.ledger import histogram
from app.ledger.histogram import BUCKETS, RELATIVE_ERROR, bucket_of, upper_bound_ms

# the largest wait the bound is stated for: the last bucket's upper bound (about 34 h)
TOP_MS = upper_bound_ms(BUCKETS - 1)


def percentile_cont(values: list[float], p: float) -> float:
    """PostgreSQL's percentile_cont: linear interpolation between the two nearest ranks."""
    xs = sorted(values)
    rank = (len(xs) - 1) * p
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def test_bucket_bounds():
    assert [bucket_of(w) for w in (-5.0, 0.0, 0.5, 1.0)] == [0, 0, 0, 0]
    assert bucket_of(1.0001) == 1
    assert bucket_of(2.0) == 8 and bucket_of(2.001) == 9  # 8 buckets per doubling
    assert bucket_of(1000.0) == 80  # 1 s: 8 * log2(1000) = 79.7
    assert bucket_of(3_600_000.0) == 175  # one hour
    assert bucket_of(TOP_MS * 10) == BUCKETS - 1  # longer waits stay in the last bucket
    assert upper_bound_ms(0) == 1.0 and upper_bound_ms(8) == 2.0
    assert RELATIVE_ERROR == pytest.approx(1.0905, abs=1e-4)


@given(st.floats(min_value=1.0001, max_value=TOP_MS, allow_nan=False))
def test_a_wait_lies_in_its_bucket(wait_ms):
    k = bucket_of(wait_ms)
    assert upper_bound_ms(k - 1) < wait_ms * (1 + 1e-12)
    assert wait_ms <= upper_bound_ms(k) * (1 + 1e-12)


def test_merge_and_add_counts():
    a = histogram.of_waits([0.5, 2.0, 2.0, 1000.0])
    b = histogram.of_waits([2.0, 5000.0])
    merged = histogram.merge([a, b])
    assert sum(merged) == 6 and merged[8] == 3 and merged[0] == 1 and merged[80] == 1
    assert (
        histogram.add_counts(histogram.empty(), [(8, 3), (0, 1), (80, 1), (bucket_of(5000.0), 1)]) == merged
    )
    with pytest.raises(ValueError, match="216 buckets"):
        histogram.merge([[1, 2, 3]])


def test_percentiles_of_small_histograms():
    assert histogram.percentile(histogram.empty(), 0.95) is None
    one = histogram.of_waits([1500.0])  # 8 * log2(1500) = 84.4 -> bucket 85
    assert histogram.percentile(one, 0.95) == histogram.percentile(one, 0.0) == upper_bound_ms(85)
    # 100 waits of 1..100 s: P95 interpolates between the 95th and 96th (ranks 94, 95)
    hist = histogram.of_waits([i * 1000.0 for i in range(1, 101)])
    exact = percentile_cont([i * 1000.0 for i in range(1, 101)], 0.95)
    assert exact <= histogram.percentile(hist, 0.95) <= exact * RELATIVE_ERROR


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.floats(min_value=0.0, max_value=TOP_MS, allow_nan=False), min_size=1, max_size=300),
    st.sampled_from([0.0, 0.5, 0.95, 0.99, 1.0]) | st.floats(min_value=0.0, max_value=1.0),
)
def test_percentile_is_within_one_bucket_of_the_exact_one(waits, p):
    """The stated bound: exact <= reported <= 2^(1/8) * exact + 1 ms; and the reported value lies in
    the buckets of the two waits percentile_cont interpolates between (within one bucket)."""
    reported = histogram.percentile(histogram.of_waits(waits), p)
    exact = percentile_cont(waits, p)
    assert reported is not None
    assert exact <= reported * (1 + 1e-9)
    assert reported <= RELATIVE_ERROR * exact + 1.0 + 1e-9 * reported
    xs = sorted(waits)
    rank = (len(xs) - 1) * p
    b_lo, b_hi = bucket_of(xs[math.floor(rank)]), bucket_of(xs[min(math.floor(rank) + 1, len(xs) - 1)])
    assert b_lo <= bucket_of(reported) <= b_hi + 1
    if b_lo == b_hi:  # both ranks in one bucket: the figure is in the exact value's bucket (or next)
        assert bucket_of(exact) <= bucket_of(reported) <= bucket_of(exact) + 1
