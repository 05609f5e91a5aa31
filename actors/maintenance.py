"""The periodic drain actor (L-PAUSE-5); the scheduler process enqueues it every minute."""

from __future__ import annotations

import dramatiq

import actors.broker  # noqa: F401 - binds the actor to the configured broker
from app.db import get_engine
from app.engine import retention as engine_retention
from app.engine.handlers import outbound
from app.engine.task_protocol import return_expired_leases
from app.integrations import retention as integrations_retention
from app.ledger import retention, rollup
from app.ledger.drain import DrainReport, drain
from app.ledger.states import QUEUE_OF_POOL, Pool
from app.settings import get_settings


def run_drain() -> DrainReport:
    """The ledger drain plus the sweeps: expired task leases go back to their queue; a trigger /
    dispatch job the drain sent to the dead letter with an unknown outcome sends its step and
    instance to NEEDS_REVIEW; the status rollup rolls the runtime status's final minutes; the
    retention sweeps remove finished history past its retention."""
    policy = retention.policy_from_env()
    settings = get_settings()
    return drain(
        get_engine(),
        settings,
        sweeps=[
            ("task_leases", return_expired_leases),
            ("unknown_outcomes", outbound.review_dead_unknown),
            *rollup.sweeps(settings),
            *retention.sweeps(policy),
            *engine_retention.sweeps(policy),
            *integrations_retention.sweeps(policy),
        ],
    )


@dramatiq.actor(queue_name=QUEUE_OF_POOL[Pool.ADVANCE], max_retries=0, max_age=120_000, time_limit=300_000)
def workflow_jobs_drain() -> None:
    run_drain()
