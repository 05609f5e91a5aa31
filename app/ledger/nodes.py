"""The worker registry read by the runtime status (L-STATUS): nodes, roles, pools, slots, heartbeat."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from datetime import UTC, datetime

from sqlalchemy import Connection, text

_UPSERT = text(
    """
INSERT INTO workflow_worker_nodes (node_id, hostname, pid, roles, pools, slot_capacity, slots_in_use,
    status, started_at, heartbeat_at, node_clock_at)
VALUES (:node_id, :hostname, :pid, CAST(:roles AS text[]), CAST(:pools AS text[]), :capacity, 0, 'active',
    now(), now(), :clock)
ON CONFLICT (node_id) DO UPDATE SET roles = EXCLUDED.roles, pools = EXCLUDED.pools,
    slot_capacity = EXCLUDED.slot_capacity, status = 'active', heartbeat_at = now(),
    node_clock_at = EXCLUDED.node_clock_at
"""
)
_BEAT = text(
    """
UPDATE workflow_worker_nodes SET heartbeat_at = now(), slots_in_use = :in_use, status = :status,
    node_clock_at = :clock
WHERE node_id = :node_id
"""
)


LIVE_SECONDS = 90  # a node is live while its heartbeat is younger than this (L-STATUS)

# the registry as an operator reads it: a node whose heartbeat stopped without a clean exit is lost
_REGISTRY = text(
    f"""
SELECT node_id, hostname, pid, roles, pools, slot_capacity, slots_in_use, started_at, heartbeat_at,
       CASE WHEN status = 'active' AND heartbeat_at < now() - interval '{LIVE_SECONDS} seconds' THEN 'lost'
            ELSE status END AS status,
       extract(epoch FROM now() - heartbeat_at) AS heartbeat_age_seconds
FROM workflow_worker_nodes
ORDER BY (status = 'active' AND heartbeat_at >= now() - interval '{LIVE_SECONDS} seconds') DESC,
         heartbeat_at DESC, node_id
LIMIT :limit
"""
)


def registry(conn: Connection, limit: int = 200) -> list[dict]:
    """The worker nodes, live first: ``status`` is active / stopping / stopped, or ``lost`` for an
    active node whose heartbeat is older than ``LIVE_SECONDS`` (killed, frozen or cut off)."""
    rows = conn.execute(_REGISTRY, {"limit": limit})
    return [
        {**dict(r._mapping), "heartbeat_age_seconds": round(float(r.heartbeat_age_seconds), 3)} for r in rows
    ]


def register_node(
    conn: Connection, node_id: str, *, roles: Sequence[str], pools: Sequence[str], slot_capacity: int
) -> None:
    conn.execute(
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
    conn.execute(
        _BEAT, {"node_id": node_id, "in_use": slots_in_use, "status": status, "clock": _node_clock()}
    )


def _node_clock() -> datetime:
    """This node's wall clock; the database stamps heartbeat_at with its own (doctor: clock skew)."""
    return datetime.now(UTC)
