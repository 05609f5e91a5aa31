"""Namespaces, credentials and permission scopes (SPEC X-CRED, W-API-4, L-API-1).

A credential is a bearer token of a namespace; only ``sha256(token)`` is stored. Every permission
is an explicit scope: nothing implies anything else (a worker credential never manages workflows).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app.errors import InvalidArgument, NotFound
from app.ids import new_id
from app.principal_cache import CACHE_SECONDS, PrincipalCache
from app.sql import query, run


class Scope:
    """Every scope of the product. Endpoints declare the ones they need (``web.auth.requires``)."""

    # Job ledger operator API (L-API-1)
    ENGINE_MONITOR = "workflow:instance:monitor"
    ENGINE_OPERATE = "workflow:engine:operate"
    # Public workflow API (W-API)
    WORKFLOWS_READ = "workflows:read"
    WORKFLOWS_START = "workflows:start"
    WORKFLOWS_CONTROL = "workflows:control"
    WORKFLOWS_SIGNAL = "workflows:signal"
    WORKFLOWS_AUDIT_READ = "workflows:audit:read"
    WORKFLOWS_RECOVERY = "workflows:recovery"
    TASKS_SUBMIT = "tasks:submit"
    DEFINITIONS_READ = "definitions:read"
    DEFINITIONS_PUBLISH = "definitions:publish"
    TASKS_WORK = "tasks:work"
    # Event subscriptions and automation rules (X-EVENT, X-AUTO)
    INTEGRATIONS_MANAGE = "integrations:manage"
    # Issue, list and revoke the namespace's credentials through the API (never beyond the issuer's own)
    CREDENTIALS_MANAGE = "credentials:manage"


ALL_SCOPES: frozenset[str] = frozenset(v for k, v in vars(Scope).items() if k.isupper())

# The CLI switches (W-API-4, X-CRED) and the scopes each grants; nothing else grants a scope. Seed 004
# §1 defines control / signal / recovery access as "instance read + <action>", so those switches
# bundle ``workflows:read`` (the scopes themselves stay explicit: no scope implies another).
SWITCHES: dict[str, tuple[str, ...]] = {
    "workflow_access": (Scope.DEFINITIONS_READ, Scope.DEFINITIONS_PUBLISH),
    "workflow_run_access": (Scope.WORKFLOWS_READ, Scope.WORKFLOWS_START, Scope.TASKS_SUBMIT),
    "workflow_control_access": (Scope.WORKFLOWS_READ, Scope.WORKFLOWS_CONTROL),
    "workflow_signal_access": (Scope.WORKFLOWS_READ, Scope.WORKFLOWS_SIGNAL),
    "workflow_recovery_access": (Scope.WORKFLOWS_READ, Scope.WORKFLOWS_RECOVERY),
    "workflow_audit_access": (Scope.WORKFLOWS_AUDIT_READ,),
    "engine_monitor": (Scope.ENGINE_MONITOR,),
    "engine_operate": (Scope.ENGINE_OPERATE,),
    "task_worker": (Scope.TASKS_WORK,),
    "integration_access": (Scope.INTEGRATIONS_MANAGE,),
    "credential_access": (Scope.CREDENTIALS_MANAGE,),
}


def switches_granting(scope: str) -> list[str]:
    """The ``ledgerflow credentials create`` switches that grant ``scope`` (e.g. ``--task-worker``)."""
    return ["--" + name.replace("_", "-") for name, scopes in SWITCHES.items() if scope in scopes]


def missing_permission_message(missing: Sequence[str]) -> str:
    """A 403 detail naming each missing scope and the credential switch(es) that grant it."""
    parts = []
    for scope in missing:
        switches = switches_granting(scope)
        grant = " or ".join(switches) if switches else "no switch"
        parts.append(f"{scope} (granted by {grant})")
    return (
        f"this credential lacks the permission {'; '.join(parts)}: issue a credential with "
        "`ledgerflow credentials create` and that switch"
    )


NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
QUEUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
TOKEN_PREFIX = "lf_"


@dataclass(frozen=True)
class Principal:
    """Who is calling: the credential (actor), its namespace, its scopes and queue scope."""

    credential_id: str
    name: str
    namespace_id: str
    namespace: str
    scopes: frozenset[str]
    queues: tuple[str, ...] | None  # None = every queue
    # L-API-2: a platform-wide operator credential reads and acts on every namespace's jobs; any
    # other credential's ledger operator rights reach only the jobs of its own namespace's instances
    platform: bool = False

    @property
    def actor_id(self) -> str:
        return self.credential_id

    def has(self, *scopes: str) -> bool:
        return all(s in self.scopes for s in scopes)

    def can_use_queue(self, queue: str) -> bool:
        return self.queues is None or queue in self.queues

    @property
    def job_namespace(self) -> str | None:
        """The namespace whose jobs the ledger operator API shows this principal (None = every one)."""
        return None if self.platform else self.namespace_id


@dataclass(frozen=True)
class IssuedCredential:
    token: str  # shown once
    credential_id: str
    name: str
    namespace: str
    namespace_id: str
    scopes: tuple[str, ...]
    queues: tuple[str, ...] | None
    created_at: datetime
    platform: bool = False
    expires_at: datetime | None = None


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


ENGINE_SCOPES = frozenset({Scope.ENGINE_MONITOR, Scope.ENGINE_OPERATE})
MAX_EXPIRES_IN_SECONDS = 10 * 366 * 86400


def validate_permission_set(
    scopes: Iterable[str], queues: Sequence[str] | None = None, *, platform: bool = False
) -> tuple[str, ...]:
    """Refuse an empty or contradictory permission set before any token exists (W-API-4).

    Contradictions: an unknown scope; a queue restriction without ``tasks:work``; a queue-restricted
    worker credential that also carries namespace-wide rights (a restriction that would not restrict)."""
    wanted = tuple(sorted(set(scopes)))
    if not wanted:
        raise InvalidArgument("a credential needs at least one explicit permission switch", field="scopes")
    unknown = [s for s in wanted if s not in ALL_SCOPES]
    if unknown:
        raise InvalidArgument(f"unknown scope(s): {', '.join(unknown)}", field="scopes")
    if platform and not ENGINE_SCOPES & set(wanted):
        raise InvalidArgument(
            "--platform widens the job ledger operator switches (--engine-monitor / --engine-operate) "
            "to every namespace; it needs at least one of them",
            field="platform",
        )
    if queues is not None:
        if not queues:
            raise InvalidArgument("an explicit queue list cannot be empty", field="queues")
        bad = [q for q in queues if not QUEUE_RE.fullmatch(q)]
        if bad:
            raise InvalidArgument(f"invalid queue name(s): {', '.join(bad)}", field="queues")
        if Scope.TASKS_WORK not in wanted:
            raise InvalidArgument("--queue scopes a task worker; it needs --task-worker", field="queues")
        others = [s for s in wanted if s != Scope.TASKS_WORK]
        if others:
            raise InvalidArgument(
                "a queue-restricted worker credential cannot also hold namespace-wide permissions "
                f"({', '.join(others)}); issue a separate credential",
                field="queues",
            )
    return wanted


def delegation_problem(
    issuer: Principal,
    scopes: Iterable[str],
    queues: Sequence[str] | None = None,
    *,
    platform: bool = False,
    namespace: str | None = None,
) -> str | None:
    """Why ``issuer`` may not issue (or revoke) a credential with these rights, or None when it may. A
    credential issued through the API never holds more than its issuer: every scope is one the issuer
    holds, the platform-wide reach only from a platform-wide issuer, a queue restriction at least as
    narrow as the issuer's, and only in the issuer's own namespace."""
    if namespace is not None and namespace != issuer.namespace:
        return f"a credential of namespace {issuer.namespace!r} issues credentials in that namespace only"
    beyond = sorted(set(scopes) - issuer.scopes)
    if beyond:
        return f"a credential cannot grant permissions it does not hold itself: {', '.join(beyond)}"
    if platform and not issuer.platform:
        return "only a platform-wide credential can issue a platform-wide one"
    if issuer.queues is not None and (queues is None or not set(queues) <= set(issuer.queues)):
        return f"the issuing credential is restricted to the queue(s) {', '.join(issuer.queues)}"
    return None


def scopes_from_switches(**switches: bool) -> tuple[str, ...]:
    out: set[str] = set()
    for name, on in switches.items():
        if name not in SWITCHES:
            raise InvalidArgument(f"unknown switch {name}", field=name)
        if on:
            out.update(SWITCHES[name])
    return tuple(sorted(out))


_NAMESPACE_INSERT = query(
    "namespace_insert",
    "INSERT INTO namespaces (id, name) VALUES (:id, :name) ON CONFLICT (name) DO NOTHING RETURNING id",
)


_NAMESPACE_ID_BY_NAME = query(
    "namespace_id_by_name",
    "SELECT id FROM namespaces WHERE name = :name",
)


def ensure_namespace(conn: Connection, name: str) -> str:
    """Return the id of namespace ``name``, creating it if missing (race-safe)."""
    if not NAME_RE.fullmatch(name):
        raise InvalidArgument(
            "namespace: 1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit", field="namespace"
        )
    row = run(
        conn,
        _NAMESPACE_INSERT,
        {"id": new_id(), "name": name},
    ).first()
    if row:
        return row.id
    return run(conn, _NAMESPACE_ID_BY_NAME, {"name": name}).scalar_one()


_CREDENTIAL_INSERT = query(
    "credential_insert",
    """
INSERT INTO credentials (id, namespace_id, name, token_hash, token_prefix, scopes, queues, platform, expires_at)
VALUES (:id, :ns, :name, :hash, :prefix, CAST(:scopes AS text[]), CAST(:queues AS text[]), :platform,
        now() + make_interval(secs => CAST(:expires_in AS double precision)))
ON CONFLICT (namespace_id, name) WHERE revoked_at IS NULL DO NOTHING
RETURNING created_at, expires_at
""",
)


def create_credential(
    conn: Connection,
    *,
    namespace: str,
    name: str,
    scopes: Iterable[str],
    queues: Sequence[str] | None = None,
    platform: bool = False,
    expires_in_seconds: int | None = None,
) -> IssuedCredential:
    """Validate the permission set, create the namespace if needed, issue a token (returned once).
    ``platform``: the ledger operator switches reach every namespace; ``expires_in_seconds``: the
    token stops authenticating after that long (database time)."""
    wanted = validate_permission_set(scopes, queues, platform=platform)
    if expires_in_seconds is not None and not 1 <= expires_in_seconds <= MAX_EXPIRES_IN_SECONDS:
        raise InvalidArgument(
            f"expiry must be from 1 second to {MAX_EXPIRES_IN_SECONDS} seconds", field="expires_in"
        )
    if not NAME_RE.fullmatch(name):
        raise InvalidArgument(
            "name: 1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit", field="name"
        )
    namespace_id = ensure_namespace(conn, namespace)
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    cred_id = new_id()
    row = run(
        conn,
        _CREDENTIAL_INSERT,
        {
            "id": cred_id,
            "ns": namespace_id,
            "name": name,
            "hash": hash_token(token),
            "prefix": token[:10],
            "scopes": list(wanted),
            "queues": None if queues is None else sorted(set(queues)),
            "platform": platform,
            "expires_in": expires_in_seconds,
        },
    ).first()
    if row is None:
        raise InvalidArgument(
            f"a live credential named {name!r} already exists in namespace {namespace!r}; revoke it first",
            field="name",
        )
    return IssuedCredential(
        token=token,
        credential_id=cred_id,
        name=name,
        namespace=namespace,
        namespace_id=namespace_id,
        scopes=wanted,
        queues=None if queues is None else tuple(sorted(set(queues))),
        created_at=row.created_at,
        platform=platform,
        expires_at=row.expires_at,
    )


# The credential columns a ``Principal`` is made of (``principal_of``) and the condition of a live
# credential, also for the reads that join them (the console's server-side sessions, ``app.sessions``).
PRINCIPAL_COLUMNS = "c.id, c.name, c.namespace_id, n.name AS namespace, c.scopes, c.queues, c.platform"
LIVE_CREDENTIAL = "c.revoked_at IS NULL AND (c.expires_at IS NULL OR c.expires_at > now())"
_FROM_LIVE = f"""
FROM credentials c JOIN namespaces n ON n.id = c.namespace_id
WHERE {LIVE_CREDENTIAL} AND """
_ACTING = query(
    "credential_acting",
    f"SELECT {PRINCIPAL_COLUMNS}" + _FROM_LIVE + "c.id = :id",
)

# A credential that expires within CACHE_SECONDS is never kept (``lasting``: database time).
_AUTH = query(
    "credential_authenticate",
    f"SELECT {PRINCIPAL_COLUMNS}, (c.expires_at IS NULL OR c.expires_at > now() + interval '{CACHE_SECONDS} "
    "seconds') AS lasting" + _FROM_LIVE + "c.token_hash = :hash",
)


principals: PrincipalCache[Principal] = PrincipalCache()


def _token_hash(token: str) -> str | None:
    """The SHA-256 a token is stored as, or None for what cannot be a token (empty, over 256 characters)."""
    return hash_token(token) if token and len(token) <= 256 else None


def authenticate(conn: Connection, token: str) -> Principal | None:
    """The principal of a live token, or None (unknown or revoked: the caller answers 401)."""
    token_hash = _token_hash(token)
    return None if token_hash is None else authenticate_hash(conn, token_hash)


def authenticate_hash(conn: Connection, token_hash: str) -> Principal | None:
    """The principal of the live token whose SHA-256 is ``token_hash`` (the console session keeps the
    hash, never the token), or None when it is unknown or revoked."""
    return principal_of(run(conn, _AUTH, {"hash": token_hash}).first())


def authenticate_kept(
    connect: Callable[[], AbstractContextManager[Connection]], url: str, token: str
) -> Principal | None:
    """``authenticate`` through this process's ``principals``: a token authenticated here within
    ``CACHE_SECONDS``, with no credential change heard since, reads nothing (``connect`` is not called);
    otherwise one read on ``connect()``, whose answer is kept when it may be. ``url``: the database
    ``connect`` reaches."""
    token_hash = _token_hash(token)
    if token_hash is None:
        return None
    principal = principals.get(url, token_hash)
    if principal is not None:
        return principal
    generation = principals.generation()
    with connect() as conn:
        row = run(conn, _AUTH, {"hash": token_hash}).first()
    principal = principal_of(row)
    if principal is not None and row.lasting:
        principals.put(url, token_hash, principal, generation)
    return principal


def principal_of(row: Any) -> Principal | None:
    """The principal of a row with ``PRINCIPAL_COLUMNS`` (None for no row)."""
    if row is None:
        return None
    return Principal(
        credential_id=row.id,
        name=row.name,
        namespace_id=row.namespace_id,
        namespace=row.namespace,
        scopes=frozenset(row.scopes),
        queues=None if row.queues is None else tuple(row.queues),
        platform=row.platform,
    )


def acting_principal(conn: Connection, credential_id: str | None) -> Principal | None:
    """The principal of the live credential ``credential_id`` (not revoked, not expired), or None.

    Rules, schedules and subscriptions act later on behalf of the credential that set them up (X-AUTO,
    X-SCHED); each time they act they ask this, so a revoked author's rule stops."""
    return principal_of(run(conn, _ACTING, {"id": credential_id}).first()) if credential_id else None


def authority_problem(
    principal: Principal | None, scopes: Iterable[str], queues: Sequence[str] = (), *, who: str = "the author"
) -> str | None:
    """Why ``principal`` may not do what needs ``scopes`` (and, for a start, the definition's task
    ``queues``: ``tasks:submit`` and each queue in its scope), or None when it may. ``principal`` None:
    the credential was revoked or has expired."""
    if principal is None:
        return f"{who}'s credential was revoked or has expired"
    needed = list(scopes) + ([Scope.TASKS_SUBMIT] if queues else [])
    missing = [s for s in dict.fromkeys(needed) if not principal.has(s)]
    if missing:
        return f"{who} ({principal.name}): {missing_permission_message(missing)}"
    outside = [q for q in queues if not principal.can_use_queue(q)]
    if outside:
        return f"{who} ({principal.name}) may not use the queue(s) {', '.join(outside)}"
    return None


_CREDENTIALS_LIST = query(
    "credentials_list",
    """
SELECT c.id, c.name, n.name AS namespace, c.namespace_id, c.token_prefix, c.scopes, c.queues,
       c.created_at, c.revoked_at, c.platform, c.expires_at
FROM credentials c JOIN namespaces n ON n.id = c.namespace_id
WHERE (CAST(:ns AS text) IS NULL OR n.name = :ns)
ORDER BY n.name, c.created_at, c.id
""",
)


def list_credentials(conn: Connection, namespace: str | None = None) -> list[dict]:
    rows = run(
        conn,
        _CREDENTIALS_LIST,
        {"ns": namespace},
    )
    return [dict(r._mapping) for r in rows]


_CREDENTIAL_REVOKE = query(
    "credential_revoke",
    """
UPDATE credentials SET revoked_at = COALESCE(revoked_at, now()) WHERE id = :id
RETURNING id, name, namespace_id, revoked_at
""",
)


def revoke_credential(conn: Connection, credential_id: str) -> dict:
    """Revoke by id; idempotent (an already revoked credential keeps its first revocation time). This
    process's ``principals`` are emptied now; every web process's, by the notification at commit."""
    row = run(
        conn,
        _CREDENTIAL_REVOKE,
        {"id": credential_id},
    ).first()
    if row is None:
        raise NotFound(f"no credential {credential_id}")
    principals.changed()
    return dict(row._mapping)
