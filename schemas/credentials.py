"""marshmallow schemas of the credentials API (issue, list, revoke a namespace's bearer tokens through
the operator API). What a credential may issue is checked by ``app.audit.issue_credential_as``; the
permission set's own rules (no empty set, queues only for a worker) by ``app.auth``, as for the CLI."""

from __future__ import annotations

from marshmallow import fields, validate

from app.auth import ALL_SCOPES, MAX_EXPIRES_IN_SECONDS, NAME_RE, QUEUE_RE, SWITCHES
from schemas.base import Boolean, Loose, Strict, envelope, integer, page, text
from schemas.workflows import limit

_NAME = "1-64 characters: a letter or digit first, then also . _ -"
_QUEUE = "1-128 characters: a letter or digit first, then also . _ : -"
MAX_QUEUES = 64


def _one_of(allowed: frozenset[str] | set[str], what: str) -> fields.String:
    listed = ", ".join(sorted(allowed))
    return text(f"{what}: one of {listed}", lambda v: None if v in allowed else f"one of {listed}")


class IssueCredentialRequest(Strict):
    name = text(
        _NAME,
        lambda v: None if NAME_RE.fullmatch(v) else _NAME,
        missing="required",
        metadata={"pattern": NAME_RE.pattern},
    )
    scopes = fields.List(
        _one_of(ALL_SCOPES, "a scope"),
        load_default=list,
        validate=validate.Length(max=len(ALL_SCOPES)),
        metadata={"description": "explicit scopes; each must be one the calling credential holds"},
    )
    switches = fields.List(
        _one_of(set(SWITCHES), "a permission switch"),
        load_default=list,
        validate=validate.Length(max=len(SWITCHES)),
        metadata={"description": "the `ledgerflow credentials create` switches, e.g. workflow_run_access"},
    )
    queues = fields.List(
        text(_QUEUE, lambda v: None if QUEUE_RE.fullmatch(v) else _QUEUE),
        allow_none=True,
        load_default=None,
        validate=validate.Length(min=1, max=MAX_QUEUES),
        metadata={"description": "restricts a tasks:work credential to these queues"},
    )
    platform = Boolean(load_default=False)
    expires_in_seconds = integer(
        1,
        MAX_EXPIRES_IN_SECONDS,
        f"an integer from 1 to {MAX_EXPIRES_IN_SECONDS}",
        allow_none=True,
        load_default=None,
    )
    namespace = text(_NAME, metadata={"description": "when given, the calling credential's own namespace"})


class RevokeCredentialRequest(Strict):
    reason = fields.String(
        validate=validate.Length(min=1, max=1024), metadata={"description": "why (audited)"}
    )


class ListCredentialsQuery(Strict):
    limit = limit()
    cursor = fields.String()


class Credential(Loose):
    id = fields.String(required=True)
    name = fields.String(required=True)
    namespace = fields.String(required=True)
    token_prefix = fields.String(required=True)
    scopes = fields.List(fields.String(), required=True)
    queues = fields.List(fields.String(), allow_none=True, required=True)
    platform = fields.Boolean(required=True)
    created_at = fields.String(required=True)
    expires_at = fields.String(allow_none=True, required=True)
    revoked_at = fields.String(allow_none=True, required=True)


class IssuedCredential(Loose):
    token = fields.String(required=True, metadata={"description": "shown once; only its hash is stored"})
    credential = fields.Nested(Credential, required=True)


CredentialPageResponse = envelope(page(Credential, "CredentialPage"), "CredentialPageResponse")
IssuedCredentialResponse = envelope(IssuedCredential, "IssuedCredentialResponse")
RevokedCredentialResponse = envelope(
    Loose.from_dict({"credential": fields.Nested(Credential, required=True)}, name="RevokedCredential"),
    "RevokedCredentialResponse",
)
