"""A namespace's workflows at a glance (the console's overview, its home page): what runs now, by state
and definition; how the recent ones ended, by definition, with their failure rate over the last hour and
day; the oldest running, the longest waiting and the open reviews.

Every read is bounded before it runs, whatever the namespace holds:

- the workflows that have not ended are read from ``ix_workflow_instances_unfinished`` (the live work), at
  most ``LIVE_CAP`` of them: past that the counts are "at least" (``live_capped``);
- the ended ones of the last day from ``ix_workflow_instances_finished`` (their end, newest first), at most
  ``RECENT_CAP`` of them: past that the day's figures are those of its most recent ``RECENT_CAP`` ends,
  and ``recent_capped`` says so (the rate stays a rate, over fewer ends);
- the lists (oldest running, longest waiting, reviews) are ``LIST_LIMIT`` rows each; the oldest running
  come from the index of all instances by start (it stops at the first few), the longest waiting and the
  reviews from the same ``LIVE_CAP`` unfinished workflows as the counts.

A credential limited to some queues sees only the workflows whose definitions stay within them, as in the
workflow list (W-API-1)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import Connection

from app.engine.states import ended_sql, unfinished_sql
from app.sql import query, run

RECENT_CAP = 10_000  # ended workflows read for the last day's figures (the most recent ones)
LIVE_CAP = 20_000  # unfinished workflows read for the counts of the live work
LIST_LIMIT = 5
_SCOPE = "(CAST(:queues AS text[]) IS NULL OR i.queues <@ CAST(:queues AS text[]))"
_UNFINISHED = unfinished_sql("i")

# the live work by definition and state (paused counted apart)
SUMMARY_UNFINISHED = query(
    "summary_unfinished",
    f"""
SELECT definition_id, state, count(*) AS n, count(*) FILTER (WHERE paused) AS paused
FROM (SELECT i.definition_id, i.state, i.paused FROM workflow_instances i
      WHERE i.namespace_id = :ns AND {_UNFINISHED} AND {_SCOPE} LIMIT :cap) live
GROUP BY 1, 2
""",
)

# the ends of the last day, newest first, at most RECENT_CAP of them, by definition and final state, with
# the last hour apart
SUMMARY_RECENT = query(
    "summary_recent_ends",
    f"""
WITH recent AS (
    SELECT i.definition_id, i.state, i.completed_at FROM workflow_instances i
    WHERE i.namespace_id = :ns AND {ended_sql("i")}
      AND i.completed_at >= now() - interval '1 day' AND {_SCOPE}
    ORDER BY i.completed_at DESC LIMIT :cap
)
SELECT definition_id, state, count(*) AS day,
       count(*) FILTER (WHERE completed_at >= now() - interval '1 hour') AS hour
FROM recent GROUP BY 1, 2
""",
)

# the oldest running (by start, from ``ix_workflow_instances_list``: it stops at the first few)
SUMMARY_OLDEST_STARTED = query(
    "summary_oldest_started",
    f"""
SELECT i.id, i.definition_id, i.version, i.state, i.paused, i.business_key, i.created_at, i.updated_at
FROM workflow_instances i
WHERE i.namespace_id = :ns AND i.state = 'RUNNING' AND {_SCOPE}
ORDER BY i.created_at, i.id LIMIT :lim
""",
)
# the longest waiting and the open reviews (unchanged the longest), a few of each, among at most ``:cap``
# unfinished workflows (no index orders them by their last change: it would cost every instance update)
SUMMARY_LONGEST_UNCHANGED = query(
    "summary_longest_unchanged",
    f"""
SELECT id, definition_id, version, state, paused, business_key, created_at, updated_at FROM (
    SELECT live.*, row_number() OVER (PARTITION BY state ORDER BY updated_at, id) AS nth FROM (
        SELECT i.id, i.definition_id, i.version, i.state, i.paused, i.business_key, i.created_at, i.updated_at
        FROM workflow_instances i WHERE i.namespace_id = :ns AND {_UNFINISHED} AND {_SCOPE} LIMIT :cap
    ) live WHERE state IN ('WAITING', 'NEEDS_REVIEW')
) ranked WHERE nth <= :lim ORDER BY updated_at, id
""",
)


def namespace_summary(
    conn: Connection, namespace_id: str, queues: tuple[str, ...] | None = None
) -> dict[str, Any]:
    """The overview of one namespace (module docstring). ``queues``: the credential's queue scope (None:
    every queue)."""
    base = {"ns": namespace_id, "queues": list(queues) if queues is not None else None}
    defs: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"unfinished": {}, "paused": 0, "hour": {}, "day": {}}
    )
    unfinished: dict[str, int] = defaultdict(int)
    live = 0
    for r in run(conn, SUMMARY_UNFINISHED, {**base, "cap": LIVE_CAP}):
        d = defs[r.definition_id]
        d["unfinished"][r.state] = int(r.n)
        d["paused"] += int(r.paused)
        unfinished[r.state] += int(r.n)
        live += int(r.n)
    ended = 0
    for r in run(conn, SUMMARY_RECENT, {**base, "cap": RECENT_CAP}):
        d = defs[r.definition_id]
        d["day"][r.state] = int(r.day)
        d["hour"][r.state] = int(r.hour)
        ended += int(r.day)
    rows = []
    for def_id, d in defs.items():
        rows.append(
            {
                "definition_id": def_id,
                **d,
                "failure_rate_hour": failure_rate(d["hour"]),
                "failure_rate_day": failure_rate(d["day"]),
            }
        )
    rows.sort(key=lambda r: (-sum(r["unfinished"].values()), -sum(r["day"].values()), r["definition_id"]))

    oldest = [dict(r._mapping) for r in run(conn, SUMMARY_OLDEST_STARTED, {**base, "lim": LIST_LIMIT})]
    unchanged = [
        dict(r._mapping)
        for r in run(conn, SUMMARY_LONGEST_UNCHANGED, {**base, "lim": LIST_LIMIT, "cap": LIVE_CAP})
    ]

    return {
        "unfinished": dict(unfinished),
        "definitions": rows,
        "recent_capped": ended >= RECENT_CAP,
        "recent_cap": RECENT_CAP,
        "live_capped": live >= LIVE_CAP,
        "live_cap": LIVE_CAP,
        "oldest_running": oldest,
        "longest_waiting": [r for r in unchanged if r["state"] == "WAITING"],
        "reviews": [r for r in unchanged if r["state"] == "NEEDS_REVIEW"],
    }


def failure_rate(ended: dict[str, int]) -> float | None:
    """FAILED among the ended workflows (CANCELLED ones are an operator's choice, not a failure, but they
    count as ended); None when none ended."""
    total = sum(ended.values())
    return round(ended.get("FAILED", 0) / total, 4) if total else None
