"""Claim latency: ``transitions.claim`` of 4 jobs, each in its own rolled-back transaction (so the
backlog stays exactly the size being measured), alternating like the pool does (every fourth claim
by due time)."""

from __future__ import annotations

import time

import psycopg
from sqlalchemy import Engine

from app.ledger import transitions

QUEUE = "workflow-ledger"
WARMUP = 20
# The pool loop claims on a raw psycopg connection (prepared statement) where transitions offers it.
RAW_CLAIM = hasattr(transitions, "settle_and_claim")


def time_claims(engine: Engine, dsn: str, samples: int, *, raw: bool = RAW_CLAIM) -> list[float]:
    """Milliseconds per claim call, measured around the call (client round trip included).

    ``raw``: on a plain psycopg connection (prepared statement), as the pool loop claims;
    otherwise through a SQLAlchemy connection, as application code would."""
    out: list[float] = []
    if raw:
        options = "-c timezone=UTC " + getattr(transitions, "PG_SESSION_OPTIONS", "")
        with psycopg.connect(dsn, autocommit=True, options=options) as conn:
            for i in range(WARMUP + samples):
                conn.execute("BEGIN")
                t0 = time.perf_counter()
                rows = transitions.claim(
                    conn, queue=QUEUE, limit=4, worker_id="bench", lease_seconds=60, by_due=i % 4 == 3
                )
                dt = (time.perf_counter() - t0) * 1000
                conn.execute("ROLLBACK")
                assert len(rows) == 4, rows
                if i >= WARMUP:
                    out.append(dt)
        return out
    with engine.connect() as conn:
        for i in range(WARMUP + samples):
            trans = conn.begin()
            t0 = time.perf_counter()
            rows = transitions.claim(
                conn, queue=QUEUE, limit=4, worker_id="bench", lease_seconds=60, by_due=i % 4 == 3
            )
            dt = (time.perf_counter() - t0) * 1000
            trans.rollback()
            assert len(rows) == 4, rows
            if i >= WARMUP:
                out.append(dt)
    return out


def explain_claim(dsn: str) -> str:
    """EXPLAIN ANALYZE of the claim's row picking (both orders), for the record."""
    plans = []
    with psycopg.connect(dsn) as conn:
        for order in ("priority, run_at, id", "run_at, id"):
            rows = conn.execute(
                f"""EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
                    SELECT id FROM workflow_jobs
                    WHERE queue = %s AND status = 'pending' AND run_at <= now()
                    ORDER BY {order} LIMIT 4 FOR UPDATE SKIP LOCKED""",
                (QUEUE,),
            ).fetchall()
            plans.append(f"-- ORDER BY {order}\n" + "\n".join(r[0] for r in rows))
        conn.rollback()
    return "\n".join(plans)
