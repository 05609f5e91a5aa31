"""Every change of a parent job's status, as named guarded SQL — one place, like River's
``JobSetState*``. Each statement names the status(es) it may leave.

- ``executor``: the moves an executor makes on its own job (claim, settle, renew, marker), each
  guarded by generation + lease token + ``status = 'running'``;
- ``interventions``: the moves others make to a job (drain reclaim; suspend, resume, clear,
  operator cancel and manual retry, which bump ``generation`` and so fence out the executor).

All time decisions use database time (``now()`` / ``clock_timestamp()``), never the app clock.
"""

from app.ledger.transitions.executor import (
    BACKOFF_SQL,
    CLAIM_BY_DUE,
    CLAIM_BY_PRIORITY,
    JOB_FENCE_SQL,
    PG_SESSION_OPTIONS,
    PG_SESSION_SETTINGS,
    Settlement,
    claim,
    hand_back,
    lock_owned,
    renew_leases,
    seconds_left,
    set_effect_marker,
    settle,
    settle_and_claim,
)
from app.ledger.transitions.interventions import (
    CANCEL_WAITING_CTES,
    cancel_job,
    cancel_waiting,
    clear_instance,
    instance_cancel_params,
    reclaim_expired,
    reclaim_lost_node,
    resume_instance,
    retry_job,
    suspend_instance,
)

__all__ = [
    "BACKOFF_SQL",
    "CANCEL_WAITING_CTES",
    "CLAIM_BY_DUE",
    "CLAIM_BY_PRIORITY",
    "PG_SESSION_OPTIONS",
    "PG_SESSION_SETTINGS",
    "Settlement",
    "cancel_job",
    "cancel_waiting",
    "instance_cancel_params",
    "claim",
    "clear_instance",
    "hand_back",
    "JOB_FENCE_SQL",
    "lock_owned",
    "seconds_left",
    "reclaim_expired",
    "reclaim_lost_node",
    "renew_leases",
    "resume_instance",
    "retry_job",
    "set_effect_marker",
    "settle",
    "settle_and_claim",
    "suspend_instance",
]
