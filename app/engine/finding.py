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
from app.sql import query, run

MIN_ID_PREFIX = 8
ID_PREFIX_RE = re.compile(r"^[0-9a-f]{8,32}$")
# the normalised message of an instance's error (numbers, ids, uuids, hosts folded as the ledger's clusters
# fold a job's error: ``app.ledger.replay.normalized_error_sql``): the generated column ``fail_group``
# (``fail_step`` and ``fail_code`` are the error's step and code), migration 0026
ERROR_GROUP_SQL = normalized_error_sql("error->>'message'")
FILTERS = ("id_prefix", "business_key_prefix", "failed_step", "error_code", "error_group")


# The SQL conditions (on ``workflow_instances`` unaliased) of the filters above, each true when its filter is
# not given (its parameter NULL); the statements that hold them are planned with their values
# (``app.sql.Query.planned_each_time``), so a NULL filter's condition folds away and a prefix's ``LIKE``
# is a range of its index
CONDITIONS = """(CAST(:idp AS text) IS NULL OR (id >= :idlo AND id < :idhi AND id LIKE :idp))
  AND (CAST(:bkp AS text) IS NULL OR lower(business_key) LIKE :bkp)
  AND (CAST(:failed_step AS text) IS NULL OR fail_step = :failed_step)
  AND (CAST(:error_code AS text) IS NULL OR fail_code = :error_code)
  AND (CAST(:error_group AS text) IS NULL OR fail_group = :error_group)"""


def condition_params(filters: dict[str, Any]) -> dict[str, Any]:
    """The parameters of ``CONDITIONS`` for ``filters`` (NULL: the filter is not given)."""
    idp = filters["id_prefix"].lower() if "id_prefix" in filters else None
    return {
        "idp": None if idp is None else idp + "%",  # hex: no escapes
        "idlo": idp,
        "idhi": None if idp is None else idp + "g",  # past every id that starts with it (hex digits < 'g')
        "bkp": like_prefix(filters["business_key_prefix"].lower())
        if "business_key_prefix" in filters
        else None,
        "failed_step": filters.get("failed_step"),
        "error_code": filters.get("error_code"),
        "error_group": filters.get("error_group"),
    }


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


_PREFIX_MATCHES = f"""
SELECT i.id, i.state, i.business_key, n.name AS namespace FROM (
    SELECT id, state, business_key, namespace_id, created_at FROM workflow_instances
    WHERE {{namespace}} AND {CONDITIONS}
    ORDER BY created_at DESC, id DESC LIMIT :n
) i JOIN namespaces n ON n.id = i.namespace_id
ORDER BY i.created_at DESC, i.id DESC
"""
# an id prefix: in one namespace or (``:ns`` NULL) every one; a business-key prefix: in one namespace
_BY_ID_PREFIX = query(
    "instances_by_id_prefix",
    _PREFIX_MATCHES.format(namespace="(CAST(:ns AS text) IS NULL OR namespace_id = :ns)"),
    planned_each_time=True,
)
_BY_KEY_PREFIX = query(
    "instances_by_key_prefix", _PREFIX_MATCHES.format(namespace="namespace_id = :ns"), planned_each_time=True
)


def prefix_matches(
    conn: Connection, q: str, namespace_id: str | None, own_namespace: str, limit: int
) -> list[dict[str, Any]]:
    """The console's search box: workflows whose id starts with ``q`` (8-32 hex characters; in
    ``namespace_id``, None: every namespace) or whose business key starts with ``q`` in any case (in
    ``namespace_id``, or the caller's own namespace for a platform-wide reader), newest first, at most
    ``limit``: ``{id, state, business_key, namespace}``."""
    filters = search_filters(q)
    params: dict[str, Any] = {"n": limit, **condition_params(filters)}
    if "id_prefix" in filters:
        params["ns"] = namespace_id
        rows = run(conn, _BY_ID_PREFIX, params).all()
    else:
        params["ns"] = namespace_id or own_namespace
        rows = run(conn, _BY_KEY_PREFIX, params).all()
    return [dict(r._mapping) for r in rows]
