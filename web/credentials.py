"""Credentials through the operator API, mounted at ``/api/workflows/engine``: a credential with
``credentials:manage`` issues, lists and revokes its namespace's credentials, never with more rights than
its own (``app.audit.issue_credential_as``); each issue and revoke writes its audit row."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response

from app import audit
from app.auth import SWITCHES, Scope, validate_permission_set
from app.db import get_engine
from schemas.credentials import (
    CredentialPageResponse,
    IssueCredentialRequest,
    IssuedCredentialResponse,
    ListCredentialsQuery,
    RevokeCredentialRequest,
    RevokedCredentialResponse,
)
from web.auth import current_principal, requires
from web.http import ok, request_id, success
from web.meta import doc
from web.mutation import idempotent, mutation
from web.strict import body, query

bp = Blueprint("credentials", __name__)
MANAGE = Scope.CREDENTIALS_MANAGE
TAGS = ["credentials"]
CREDENTIAL_ID = {"credential_id": {"type": "string", "minLength": 1, "maxLength": 64}}


def _credential(conn: Any, credential_id: str) -> dict[str, Any]:
    principal = current_principal()
    page = audit.credentials_page(conn, principal, 1, None, credential_id=credential_id)
    return page["items"][0]


@bp.get("/credentials")
@requires(MANAGE)
@doc(
    summary="The namespace's credentials, oldest first (never a token)",
    tags=TAGS,
    response=CredentialPageResponse,
    errors=(400, 401, 403),
)
@query(ListCredentialsQuery)
def list_credentials(query: dict[str, Any]) -> Response:
    with get_engine().connect() as conn:
        return ok(audit.credentials_page(conn, current_principal(), query["limit"], query.get("cursor")))


@bp.post("/credentials")
@requires(MANAGE)
@mutation
@doc(
    summary="Issue a credential of this namespace with at most the calling credential's rights (token shown once)",
    status=201,
    tags=TAGS,
    response=IssuedCredentialResponse,
    errors=(400, 401, 403, 409, 415),
)
@body(IssueCredentialRequest)
def issue_credential(body: dict[str, Any]) -> Response:
    principal = current_principal()
    scopes = set(body["scopes"])
    for switch in body["switches"]:
        scopes.update(SWITCHES[switch])
    wanted = validate_permission_set(scopes, body["queues"], platform=body["platform"])

    def work(conn: Any) -> tuple[int, Any]:
        issued = audit.issue_credential_as(
            conn,
            principal,
            request_id=request_id(),
            name=body["name"],
            scopes=wanted,
            queues=body["queues"],
            platform=body["platform"],
            expires_in_seconds=body["expires_in_seconds"],
            namespace=body.get("namespace"),
        )
        return 201, success({"token": issued.token, "credential": _credential(conn, issued.credential_id)})

    # the answer carries the token: a replay answers the credential that asked only
    return idempotent(work, per_credential=True)


@bp.post("/credentials/<credential_id>/revoke")
@requires(MANAGE)
@mutation
@doc(
    summary="Revoke a credential of this namespace (requests with its token answer 401 from now on)",
    tags=TAGS,
    response=RevokedCredentialResponse,
    errors=(400, 401, 403, 404, 415),
    path_params=CREDENTIAL_ID,
)
@body(RevokeCredentialRequest)
def revoke_credential(credential_id: str, body: dict[str, Any]) -> Response:
    principal = current_principal()

    def work(conn: Any) -> tuple[int, Any]:
        audit.revoke_credential_as(
            conn, principal, credential_id, request_id=request_id(), reason=body.get("reason")
        )
        return 200, success({"credential": _credential(conn, credential_id)})

    return idempotent(work)
