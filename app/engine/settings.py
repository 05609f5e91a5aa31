"""Engine limits read from the environment at call time (so a test server can lower them)."""

from __future__ import annotations

from app.config import env_float as _float
from app.config import env_int as _int


def instance_limit() -> int:
    """W-START-8: unfinished instances per namespace."""
    return _int("LEDGERFLOW_INSTANCE_LIMIT", 10_000)


def queue_pending_limit() -> int:
    """W-ERR quota: pending tasks per (namespace, queue) before a start answers 429 QUEUE_FULL."""
    return _int("LEDGERFLOW_QUEUE_PENDING_LIMIT", 100_000)


def application_work_limit() -> int:
    """W-ERR quota: unfinished work per application (= namespace of the credential): unfinished
    instances plus open (PENDING or CLAIMED) tasks, before a start answers 429 APPLICATION_FULL."""
    return _int("LEDGERFLOW_APPLICATION_WORK_LIMIT", 250_000)


def quota_retry_after_seconds() -> int:
    """Retry-After of a 429 QUEUE_FULL / APPLICATION_FULL."""
    return _int("LEDGERFLOW_QUOTA_RETRY_AFTER_SECONDS", 30)


def task_lease_seconds() -> float:
    """X-TASK: how long a claim holds a task without a heartbeat."""
    return _float("LEDGERFLOW_TASK_LEASE_SECONDS", 60.0)


def claim_poll_seconds() -> float:
    """How often a waiting long-poll claim looks at its queues again without a wake-up (a NOTIFY
    wakes it at once when a task becomes PENDING; this bounds the wait for a task whose lease
    expired, or after a lost listener connection)."""
    return _float("LEDGERFLOW_CLAIM_POLL_SECONDS", 5.0)
