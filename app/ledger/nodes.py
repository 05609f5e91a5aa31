"""The worker registry read by the runtime status (L-STATUS): nodes, roles, pools, slots, heartbeat."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import Connection

from app.sql import query, run

_UPSERT = query(
    "node_upsert",
    """
INSERT INTO workflow_worker_nodes (node_id, hostname, pid, roles, pools, slot_capacity, slots_in_use,
    status, started_at, heartbeat_at, node_clock_at)
VALUES (:node_id, :hostname, :pid, CAST(:roles AS text[]), CAST(:pools AS text[]), :capacity, 0, 'active',
    now(), now(), :clock)
ON CONFLICT (node_id) DO UPDATE SET roles = EXCLUDED.roles, pools = EXCLUDED.pools,
    slot_capacity = EXCLUDED.slot_capacity, status = 'active', heartbeat_at = now(),
    node_clock_at = EXCLUDED.node_clock_at
""",
)
_BEAT = query(
    "node_heartbeat",
    """
UPDATE workflow_worker_nodes SET heartbeat_at = now(), slots_in_use = :in_use, status = :status,
    node_clock_at = :clock
WHERE node_id = :node_id
""",
)


def register_node(
    conn: Connection, node_id: str, *, roles: Sequence[str], pools: Sequence[str], slot_capacity: int
) -> None:
    run(
        conn,
        _UPSERT,
        {
            "node_id": node_id,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "roles": list(roles),
            "pools": list(pools),
            "capacity": slot_capacity,
            "clock": _node_clock(),
        },
    )


def heartbeat(conn: Connection, node_id: str, *, slots_in_use: int, status: str = "active") -> None:
    run(conn, _BEAT, {"node_id": node_id, "in_use": slots_in_use, "status": status, "clock": _node_clock()})


def _node_clock() -> datetime:
    """This node's wall clock; the database stamps heartbeat_at with its own (doctor: clock skew)."""
    return datetime.now(UTC)


_NODES = query(
    "nodes_list",
    """
SELECT node_id, hostname, pid, roles, pools, slot_capacity, slots_in_use, status, started_at, heartbeat_at,
       (status = 'active' AND heartbeat_at >= now() - interval '90 seconds') AS live,
       -- the registry as an operator reads it: an active node whose heartbeat stopped is lost
       CASE WHEN status = 'active' AND heartbeat_at < now() - interval '90 seconds' THEN 'lost'
            ELSE status END AS state,
       round(extract(epoch FROM now() - heartbeat_at)::numeric, 3)::float8 AS heartbeat_age_seconds
FROM workflow_worker_nodes
WHERE heartbeat_at >= now() - interval '1 day'
ORDER BY live DESC, heartbeat_at DESC, node_id
LIMIT :limit
""",
)


def list_nodes(conn: Connection, *, limit: int = 100) -> list[dict]:
    """Worker nodes seen in the last day, live first ("live" as in the runtime status: active with a
    heartbeat within 90 s; ``state`` is ``lost`` for an active node whose heartbeat stopped without a
    clean exit, else its status); at most ``limit``."""
    return [dict(r._mapping) for r in run(conn, _NODES, {"limit": limit})]


_NODE = query(
    "node_read",
    """
SELECT node_id, hostname, pid, roles, pools, slot_capacity, slots_in_use, status, started_at, heartbeat_at,
       (status = 'active' AND heartbeat_at >= now() - interval '90 seconds') AS live
FROM workflow_worker_nodes WHERE node_id = :node_id
""",
)
_NODE_JOBS = query(
    "node_jobs",
    """
SELECT j.id, j.type, j.attempts, j.max_attempts, j.lease_until, j.execution_deadline,
       j.effect_marker IS NOT NULL AS has_effect_marker, j.attempt_started_at AS started_at
FROM workflow_jobs j
WHERE j.status = 'running' AND j.worker_id = :node_id
ORDER BY j.id
LIMIT :limit
""",
)


def node_detail(conn: Connection, node_id: str, *, limit: int = 100) -> dict | None:
    """One node and the running jobs its open attempts name (at most ``limit``), or None."""
    row = run(conn, _NODE, {"node_id": node_id}).first()
    if row is None:
        return None
    jobs = [
        {**dict(r._mapping), "id": str(r.id)}
        for r in run(conn, _NODE_JOBS, {"node_id": node_id, "limit": limit})
    ]
    return {**dict(row._mapping), "running_jobs": jobs}
