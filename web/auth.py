"""Bearer authentication and per-endpoint scopes: ``@requires(Scope.X, ...)`` or ``@public``.

Every route of the app carries one of the two (a test enumerates the url map). 401 with
``WWW-Authenticate: Bearer`` for a missing, unknown or revoked token; 403 for a missing scope. A token
this process authenticated in the last few seconds is not read again while no credential changed
(``app.principal_cache.PrincipalCache``; the changes are heard on ``web.listener``'s connection)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from flask import g, request
from sqlalchemy import Connection

import web.ratelimit as ratelimit
from app.auth import Principal, authenticate_kept, missing_permission_message
from app.db import get_engine
from app.errors import PermissionDenied, Unauthenticated
from app.settings import get_settings
from web.listener import listener
from web.meta import meta
from web.strict import reject_undeclared_query


def _bearer() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthenticated("Authorization: Bearer <token> is required")
    return token.strip()


def current_principal() -> Principal:
    principal = g.get("principal")
    if principal is None:
        raise Unauthenticated()
    return principal


def require_platform(what: str) -> None:
    """403 unless the caller is a platform-wide operator: ``what`` (the runtime status, ``/metrics``)
    shows every namespace's figures, which a namespace-scoped credential may not read."""
    if not current_principal().platform:
        raise PermissionDenied(
            f"{what} is a platform-wide view: it needs a platform-wide operator credential "
            "(ledgerflow credentials create --platform)"
        )


def autocommit_connection() -> Connection:
    """A connection for one read in autocommit: no BEGIN / ROLLBACK round trips around it."""
    return get_engine().connect().execution_options(isolation_level="AUTOCOMMIT")


def requires(*scopes: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Authenticate the caller and require *all* ``scopes``; sets ``g.principal``."""
    if not scopes:
        raise ValueError("requires() needs at least one scope; use @public for open endpoints")

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            token = _bearer()
            listener.ensure_started()  # its LISTEN is what lets this process keep principals
            principal = authenticate_kept(autocommit_connection, get_settings().database_url, token)
            if principal is None:
                raise Unauthenticated("the bearer token is unknown or revoked")
            missing = [s for s in scopes if s not in principal.scopes]
            if missing:
                raise PermissionDenied(missing_permission_message(missing))
            g.principal = principal
            ratelimit.check(principal)  # 429 + Retry-After past the credential's limits
            reject_undeclared_query(meta(wrapper))
            return fn(*args, **kwargs)

        meta(wrapper)["scopes"] = tuple(scopes)
        return wrapper

    return deco


def public(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark an endpoint as open (health, readiness, the OpenAPI document)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        reject_undeclared_query(meta(wrapper))
        return fn(*args, **kwargs)

    meta(wrapper)["public"] = True
    return wrapper
