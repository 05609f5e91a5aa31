"""The runtime status rollup (L-STATUS): per minute and queue, the attempts started in
that minute, so the last hour's figures (attempts, failures, average duration, queue-wait P95 / P99)
read at most 120 rolled rows plus the few most recent minutes of attempts, never the whole hour.

- ``roll_up`` is a drain sweep. It rolls complete minutes whose attempts are final: minutes that
  ended at least ``SETTLE_SECONDS`` ago (every claim that started in them has committed) and before
  the oldest attempt still running started; an attempt that is final never changes again (a trigger
  keeps finished attempts immutable), so the rolled counts, failures and durations are the ones a
  full scan would find. A minute that ended ``lag`` ago (the default execution timeout + 1 min: an
  attempt ends by its deadline, the pools reclaim a passed one within seconds) is rolled whatever
  still runs, so one long job holds the rollup back by at most that. The oldest running attempt is
  found through the running jobs (the in-flight work, a partial index), not the attempts.
  A sweep starts after the newest rolled minute (the watermark) or at most 60 minutes back, rolls
  at most ``MINUTES_PER_CALL`` minutes per call with one ``INSERT ... SELECT ... GROUP BY`` over the
  ``started_at`` index (``ON CONFLICT DO NOTHING``: a minute is written once), writing a row for
  every minute and ledger queue (zeros for an idle one, so the watermark moves on), and removes
  rolled minutes older than ``KEEP_MINUTES``. One call per drain run: after a fresh start (or a
  stalled drain) the rollup catches up over a few runs; meanwhile the live part is larger, the
  figures the same.
- ``window`` tells a reader which part of the last hour is rolled: the minutes from the first rolled
  one inside the hour to the watermark. The rest is read live from the attempts: the head (the part
  of the hour before the first rolled minute, under a minute once the rollup keeps up) and the tail
  (after the watermark: one to three minutes of attempts with a drain every minute, up to ``lag``
  while a long job runs).

An attempt whose job has a longer per-job execution timeout than the default and still runs ``lag``
after its minute counts, once rolled, as an attempt but not as a failure or a duration. Attempts
removed later by retention stay in the rolled minutes (they are at most two hours old there)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from sqlalchemy import Connection, Row

from app.ledger import histogram
from app.ledger.drain import Sweep
from app.ledger.models import JOB_QUEUE_TYPE, QUEUES
from app.settings import Settings
from app.sql import query, run

MINUTES_PER_CALL = 10
# the status reads the last 60 minutes; an hour more is kept so a late reader or a stalled drain
# never finds the window's minutes already removed
KEEP_MINUTES = 120
LOOKBACK_MINUTES = 60
# a minute is rolled no sooner than this after its end: the claims that started in it have committed
SETTLE_SECONDS = 60

# the queue wait of attempt ``e`` in milliseconds, and its histogram bucket
WAIT_MS = "(extract(epoch FROM e.started_at - e.due_at) * 1000)::float8"
WAIT_BUCKET = histogram.bucket_sql(WAIT_MS)


def attempts_started(where: str) -> str:
    """A query of the attempts ``(job_id, status, due_at, started_at, duration_ms)`` matching ``where``
    (over those column names, as ``e.``): the final rows of the attempt table, and the open attempts
    of running jobs (on their job rows, read through the partial running index)."""
    open_where = where.replace("e.started_at", "j.attempt_started_at")
    return f"""SELECT e.job_id, e.status, e.due_at, e.started_at, e.duration_ms FROM workflow_job_executions e
WHERE {where}
UNION ALL
SELECT j.id, 'running', j.run_at, j.attempt_started_at, NULL FROM workflow_jobs j
WHERE j.status = 'running' AND {open_where}"""


# the minutes to roll now, [since, until): after the watermark (or LOOKBACK_MINUTES back); ended
# SETTLE_SECONDS ago and before the oldest running attempt started, or ended lag ago
_SPAN = query(
    "rollup_span",
    """
SELECT greatest((SELECT max(minute) FROM workflow_attempt_minutes) + interval '1 minute',
                date_trunc('minute', now()) - make_interval(mins => :lookback)) AS since,
       greatest(date_trunc('minute', now() - make_interval(secs => :lag_seconds)),
                least(date_trunc('minute', now() - make_interval(secs => :settle_seconds)),
                      date_trunc('minute', (
                          SELECT min(attempt_started_at) FROM workflow_jobs WHERE status = 'running')))) AS until
""",
)
_ROLL = query(
    "rollup_roll",
    f"""
WITH by_bucket AS (
    SELECT date_trunc('minute', e.started_at) AS minute, j.queue, {WAIT_BUCKET} AS bucket,
           count(*) AS n,
           count(*) FILTER (WHERE e.status = 'failed') AS failed,
           COALESCE(sum(e.duration_ms), 0) AS duration_sum_ms,
           count(e.duration_ms) AS duration_n
    FROM ({attempts_started("e.started_at >= :since AND e.started_at < :until")}) e
    JOIN workflow_jobs j ON j.id = e.job_id
    GROUP BY 1, 2, 3
), by_minute AS (
    SELECT minute, queue, sum(n) AS attempts, sum(failed) AS failed, sum(duration_sum_ms) AS duration_sum_ms,
           sum(duration_n) AS duration_n, array_agg(bucket) AS buckets, array_agg(n) AS counts
    FROM by_bucket GROUP BY 1, 2
)
INSERT INTO workflow_attempt_minutes (minute, queue, attempts, failed, duration_sum_ms, duration_n, wait_hist)
SELECT g.minute, q.queue, COALESCE(m.attempts, 0), COALESCE(m.failed, 0), COALESCE(m.duration_sum_ms, 0),
       COALESCE(m.duration_n, 0),
       -- the dense histogram: one count per bucket, zeros included
       (SELECT array_agg(COALESCE(h.n, 0)::int ORDER BY b.k)
        FROM generate_series(0, {histogram.BUCKETS - 1}) AS b(k)
        LEFT JOIN unnest(m.buckets, m.counts) AS h(bucket, n) ON h.bucket = b.k)
-- every minute of the span and every ledger queue gets its row, attempts or not: the watermark moves
-- over idle minutes, and a minute at or before it is rolled, full stop
FROM generate_series(CAST(:since AS timestamptz), CAST(:until AS timestamptz) - interval '1 minute',
                     interval '1 minute') AS g(minute)
CROSS JOIN unnest(CAST(:queues AS {JOB_QUEUE_TYPE}[])) AS q(queue)
LEFT JOIN by_minute m ON m.minute = g.minute AND m.queue = q.queue
ON CONFLICT (minute, queue) DO NOTHING
RETURNING minute
""",
)
_FORGET = query(
    "rollup_forget",
    """
DELETE FROM workflow_attempt_minutes WHERE (minute, queue) IN (
    SELECT minute, queue FROM workflow_attempt_minutes
    WHERE minute < now() - make_interval(mins => :keep)
    ORDER BY minute LIMIT :limit)
RETURNING minute
""",
)


def lag_seconds(settings: Settings) -> float:
    """How old a minute's end must be before it is rolled even with an attempt still running in it:
    the default execution timeout + 1 min."""
    return settings.execution_timeout_ms / 1000 + 60


def roll_up(conn: Connection, limit: int, *, lag_seconds: float, max_minutes: int = MINUTES_PER_CALL) -> int:
    """Roll up to ``max_minutes`` complete minutes of final attempts after the watermark and remove up to
    ``limit`` rolled minutes older than ``KEEP_MINUTES``; returns the rows written and removed."""
    span = run(
        conn,
        _SPAN,
        {"lookback": LOOKBACK_MINUTES, "lag_seconds": lag_seconds, "settle_seconds": SETTLE_SECONDS},
    ).one()
    until = min(span.until, span.since + timedelta(minutes=max_minutes))
    written = roll_minutes(conn, span.since, until) if span.since < until else 0
    removed = len(run(conn, _FORGET, {"keep": KEEP_MINUTES, "limit": limit}).all())
    return written + removed


def roll_minutes(conn: Connection, since: datetime, until: datetime) -> int:
    """Roll the minutes in ``[since, until)`` (whole minutes) that are not rolled yet; the rows written."""
    return len(run(conn, _ROLL, {"since": since, "until": until, "queues": QUEUES}).all())


def sweeps(settings: Settings) -> list[Sweep]:
    """The rollup sweep for ``drain(..., sweeps=...)``."""
    return [("status_rollup", partial(roll_up, lag_seconds=lag_seconds(settings)))]


# --------------------------------------------------------------------------- reading the last hour
_WINDOW = query(
    "rollup_window",
    """
SELECT now() - interval '1 hour' AS since,
       (SELECT min(minute) FROM workflow_attempt_minutes WHERE minute >= now() - interval '1 hour')
           AS first_minute,
       (SELECT max(minute) FROM workflow_attempt_minutes) AS last_minute
""",
)
_MINUTES = query(
    "rollup_minutes",
    """
SELECT minute, queue, attempts, failed, duration_sum_ms, duration_n, wait_hist
FROM workflow_attempt_minutes
WHERE minute >= :since AND minute <= :last_minute
""",
)

# The attempts of the last hour that are not rolled: the head and the tail of the window, two ranges
# of the started_at index (plus the open attempts of running jobs in them). Without a rolled minute in the hour the head is empty and the tail is the
# whole hour.
LIVE_ATTEMPTS = f"""
{attempts_started("e.started_at >= :since AND e.started_at < :head_end")}
UNION ALL
{attempts_started("e.started_at >= :tail_start")}
"""


@dataclass(frozen=True)
class Window:
    """The last hour (from ``since``) as rolled minutes ``[first_minute, last_minute]`` plus the live
    head and tail; ``first_minute`` is None when no rolled minute falls inside the hour."""

    since: datetime
    first_minute: datetime | None
    last_minute: datetime | None

    @property
    def rolled(self) -> bool:
        return self.first_minute is not None

    def live_params(self) -> dict[str, datetime]:
        """The bounds of ``LIVE_ATTEMPTS``."""
        if self.first_minute is None or self.last_minute is None:
            return {"since": self.since, "head_end": self.since, "tail_start": self.since}
        return {
            "since": self.since,
            "head_end": self.first_minute,
            "tail_start": self.last_minute + timedelta(minutes=1),
        }


def window(conn: Connection) -> Window:
    """Which part of the last hour (by database time) is rolled."""
    r = run(conn, _WINDOW).one()
    return Window(since=r.since, first_minute=r.first_minute, last_minute=r.last_minute)


def rolled_minutes(conn: Connection, win: Window) -> list[Row]:
    """The rolled minutes of ``win`` (none when it has none). Bounded by the watermark the window
    read, so a minute rolled meanwhile is not counted twice (it is in the live tail)."""
    if not win.rolled:
        return []
    return list(run(conn, _MINUTES, {"since": win.since, "last_minute": win.last_minute}))
