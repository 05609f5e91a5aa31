"""Find workflows by what operators see (issue 47): an id prefix (at least 8 hex characters: the console,
the worker logs and ``ledgerflow`` show 8), a business-key prefix in any case, and the failure filters of
the failure groups (failing step, error code, normalised message). Each is a condition of the workflow
list (``instances.list_instances``, the batch actions' filter); the prefixes are range scans of the
indexes of migration 0026 (``ix_workflow_instances_id_prefix``, ``ix_workflow_instances_key_lower``,
``text_pattern_ops``): a ``LIKE 'prefix%'`` whose pattern the planner sees (each statement is planned with
its values) becomes a range of the index, and its row estimate is the prefix's own."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import Connection

from app.ledger.replay import normalized_error_sql
from app.sql import run

MIN_ID_PREFIX = 8
ID_PREFIX_RE = re.compile(r"^[0-9a-f]{8,32}$")
# the normalised message of an instance's error (numbers, ids, uuids, hosts folded as the ledger's clusters
# fold a job's error: ``app.ledger.replay.normalized_error_sql``): the generated column ``fail_group``
# (``fail_step`` and ``fail_code`` are the error's step and code), migration 0026
ERROR_GROUP_SQL = normalized_error_sql("error->>'message'")
FILTERS = ("id_prefix", "business_key_prefix", "failed_step", "error_code", "error_group")


def conditions(filters: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """The SQL conditions (on ``workflow_instances`` unaliased) of the filters above; adds their parameters."""
    where: list[str] = []
    if "id_prefix" in filters:
        where.append("id LIKE :idp")
        params["idp"] = filters["id_prefix"].lower() + "%"  # hex: nothing to escape
    if "business_key_prefix" in filters:
        where.append("lower(business_key) LIKE :bkp")
        params["bkp"] = like_prefix(filters["business_key_prefix"].lower())
    if "failed_step" in filters:
        where.append("fail_step = :failed_step")
        params["failed_step"] = filters["failed_step"]
    if "error_code" in filters:
        where.append("fail_code = :error_code")
        params["error_code"] = filters["error_code"]
    if "error_group" in filters:
        where.append("fail_group = :error_group")
        params["error_group"] = filters["error_group"]
    return where


def like_prefix(value: str) -> str:
    """A LIKE pattern (escape ``\\``) of the strings that start with ``value``."""
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def search_filters(q: str) -> dict[str, str]:
    """What the console's search box means by ``q``: a hex id prefix (8-32 characters) finds workflows by
    id; anything else is a business-key prefix in any case."""
    q = q.strip()
    if ID_PREFIX_RE.fullmatch(q.lower()):
        return {"id_prefix": q.lower()}
    return {"business_key_prefix": q}


def prefix_matches(
    conn: Connection, q: str, namespace_id: str | None, own_namespace: str, limit: int
) -> list[dict[str, Any]]:
    """The console's search box: workflows whose id starts with ``q`` (8-32 hex characters; in
    ``namespace_id``, None: every namespace) or whose business key starts with ``q`` in any case (in
    ``namespace_id``, or the caller's own namespace for a platform-wide reader), newest first, at most
    ``limit``: ``{id, state, business_key, namespace}``."""
    filters = search_filters(q)
    params: dict[str, Any] = {"n": limit}
    where = conditions(filters, params)
    if "id_prefix" in filters:
        params["ns"] = namespace_id
        where.append("(CAST(:ns AS text) IS NULL OR namespace_id = :ns)")
    else:
        params["ns"] = namespace_id or own_namespace
        where.append("namespace_id = :ns")
    rows = run(
        conn,
        "SELECT i.id, i.state, i.business_key, n.name AS namespace FROM (SELECT id, state, business_key, "
        "namespace_id, created_at FROM workflow_instances WHERE "
        + " AND ".join(where)
        + " ORDER BY created_at DESC, id DESC LIMIT :n) i JOIN namespaces n ON n.id = i.namespace_id "
        "ORDER BY i.created_at DESC, i.id DESC",
        params,
    ).all()
    return [dict(r._mapping) for r in rows]
