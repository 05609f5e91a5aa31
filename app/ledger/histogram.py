"""Queue-wait histograms with fixed log-scale buckets (L-STATUS): what the per-minute
rollup (``app/ledger/rollup.py``) stores, so the runtime status can read P95 / P99 of the last hour
without sorting every attempt of it. Pure functions, no database.

Bucket 0 holds waits of at most 1 ms (negative ones included); bucket ``k`` (1 <= k < BUCKETS) holds
waits in ``(2^((k-1)/8), 2^(k/8)]`` ms. The last bucket also takes every longer wait (beyond
``2^((BUCKETS-1)/8)`` ms, about 34 hours). A percentile reads the buckets' upper bounds, interpolated
between neighbouring ranks as ``percentile_cont`` does, so for waits between 0 and the last bound::

    exact <= reported <= 2^(1/8) * exact + 1 ms        (2^(1/8) - 1 = 9.05 %)

i.e. the figure never under-reports and over-reports by at most 9.05 % (plus bucket 0's 1 ms).
``BUCKET_SQL`` is the same mapping in SQL, so the database fills histograms the way ``bucket_of``
would."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

STEPS_PER_DOUBLING = 8
BUCKETS = 216
# 2^(1/8): the largest ratio between a reported percentile and the exact one (above 1 ms)
RELATIVE_ERROR = 2 ** (1 / STEPS_PER_DOUBLING)

# the bucket of a wait of ``wait_ms`` milliseconds (a float8 SQL expression), as ``bucket_of`` does
BUCKET_SQL = (
    f"(CASE WHEN {{wait_ms}} <= 1 THEN 0 ELSE "
    f"least(ceil({STEPS_PER_DOUBLING} * ln({{wait_ms}}) / ln(2::float8)), {BUCKETS - 1})::int END)"
)


def bucket_sql(wait_ms: str) -> str:
    """``BUCKET_SQL`` for the SQL expression ``wait_ms`` (milliseconds, float8)."""
    return BUCKET_SQL.format(wait_ms=wait_ms)


def bucket_of(wait_ms: float) -> int:
    """The bucket holding a wait of ``wait_ms`` milliseconds."""
    if wait_ms <= 1:
        return 0
    return min(math.ceil(STEPS_PER_DOUBLING * math.log(wait_ms) / math.log(2.0)), BUCKETS - 1)


def upper_bound_ms(bucket: int) -> float:
    """The largest wait (ms) of ``bucket``; the value a percentile falling in it reads."""
    return 2.0 ** (bucket / STEPS_PER_DOUBLING)


def empty() -> list[int]:
    return [0] * BUCKETS


def of_waits(waits_ms: Iterable[float]) -> list[int]:
    """The histogram of a sample of waits (ms)."""
    hist = empty()
    for w in waits_ms:
        hist[bucket_of(w)] += 1
    return hist


def merge(hists: Iterable[Sequence[int]]) -> list[int]:
    """Bucket-wise sum of histograms (e.g. the rolled minutes of an hour and its live part)."""
    total = empty()
    for hist in hists:
        if len(hist) != BUCKETS:
            raise ValueError(f"a histogram has {BUCKETS} buckets, not {len(hist)}")
        for k, n in enumerate(hist):
            total[k] += n
    return total


def add_counts(hist: list[int], counts: Iterable[tuple[int, int]]) -> list[int]:
    """Add ``(bucket, count)`` pairs (a ``GROUP BY bucket`` result) to ``hist`` in place."""
    for bucket, n in counts:
        hist[bucket] += n
    return hist


def percentile(hist: Sequence[int], p: float) -> float | None:
    """The ``p`` percentile (0 <= p <= 1) in milliseconds read from ``hist``, interpolated between
    the two ranks ``percentile_cont`` would use; ``None`` for an empty histogram."""
    n = sum(hist)
    if n == 0:
        return None
    rank = (n - 1) * p
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    v_lo = upper_bound_ms(_bucket_at_rank(hist, lo))
    v_hi = upper_bound_ms(_bucket_at_rank(hist, hi))
    return v_lo + (v_hi - v_lo) * (rank - lo)


def _bucket_at_rank(hist: Sequence[int], rank: int) -> int:
    """The bucket of the ``rank``-th smallest wait (0-based)."""
    seen = 0
    for k, n in enumerate(hist):
        seen += n
        if seen > rank:
            return k
    raise ValueError(f"rank {rank} is beyond the histogram's {seen} waits")
