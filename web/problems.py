"""The problem types of the API, documented where an error body's ``type`` points:
``GET /docs/problems`` (HTML), one section per code, e.g. ``/docs/problems#invalid-argument``.
docs/reference.md carries the same table (a test keeps them equal)."""

from __future__ import annotations

import html
from dataclasses import dataclass

from flask import Blueprint, Response, request

from web.auth import public
from web.meta import doc, meta


@dataclass(frozen=True)
class ProblemType:
    code: str
    status: int
    title: str
    meaning: str
    fix: str

    @property
    def slug(self) -> str:
        return self.code.lower().replace("_", "-")


PROBLEMS: tuple[ProblemType, ...] = (
    ProblemType("INVALID_ARGUMENT", 400, "Invalid argument",
        "A field, query parameter, cursor or the JSON itself is not acceptable; `errors` lists each "
        "field with its message (unknown, duplicate and case-variant fields are refused too).",
        "Fix the named fields and send the request again (with a new Idempotency-Key)."),
    ProblemType("UNAUTHENTICATED", 401, "Unauthenticated",
        "The `Authorization: Bearer <token>` header is missing, or the token is unknown or revoked.",
        "Issue a credential with `ledgerflow credentials create ... --token-only` and send its token "
        "(the SDK reads LEDGERFLOW_TOKEN)."),
    ProblemType("PERMISSION_DENIED", 403, "Permission denied",
        "The credential lacks a permission (scope) the endpoint needs; the message names the scope "
        "and the `ledgerflow credentials create` switch that grants it.",
        "Issue a credential with that switch (credentials are immutable)."),
    ProblemType("NOT_FOUND", 404, "Not found",
        "Nothing with that id (or version, key, name) exists in the credential's namespace, or the "
        "resource uses a task queue outside the credential's queue scope. The message names what "
        "was asked for.",
        "Check the id; list definitions with `GET /v1/workflow-definitions?name=...`."),
    ProblemType("METHOD_NOT_ALLOWED", 405, "Method not allowed",
        "The path exists but not with this HTTP method; the `Allow` header lists the methods it has.",
        "Use one of the methods in `Allow`."),
    ProblemType("STATE_CONFLICT", 409, "State conflict",
        "The request does not fit the resource's current state: a name or version that already "
        "exists, a stale `expected_control_revision` or task `epoch` (also a result for a claim that "
        "another key already ended), a finished workflow.",
        "Read the resource again and decide with its current state."),
    ProblemType("IDEMPOTENCY_CONFLICT", 409, "Idempotency conflict",
        "The Idempotency-Key was already used for a different request (a task result: the key that "
        "completed or failed the task, sent with another output, error or epoch), or the first request "
        "with this key is still running (then `Retry-After` is set).",
        "Use a new key for a new request; resend the same request with the same key to get the "
        "stored answer."),
    ProblemType("WORKFLOW_INSTANCE_LIMIT", 409, "Workflow instance limit",
        "The namespace has as many unfinished workflows as LEDGERFLOW_INSTANCE_LIMIT allows.",
        "Let workflows finish (or cancel some) before starting more."),
    ProblemType("WORKFLOW_SIGNAL_LIMIT", 409, "Workflow signal limit",
        "The workflow already received the most signals it may ever receive (LEDGERFLOW_SIGNAL_LIMIT).",
        "Nothing to retry: the workflow takes no more signals."),
    ProblemType("BODY_TOO_LARGE", 413, "Body too large",
        "The request body is larger than 512 KiB.",
        "Send less (keep large payloads elsewhere and pass a reference)."),
    ProblemType("UNSUPPORTED_MEDIA_TYPE", 415, "Unsupported media type",
        "A request with a body must be `Content-Type: application/json` in UTF-8.",
        "Set the header (the SDK does)."),
    ProblemType("QUEUE_FULL", 429, "Queue full",
        "The task queue has LEDGERFLOW_QUEUE_PENDING_LIMIT pending tasks; `Retry-After` says when to "
        "try again.",
        "Run more task workers for the queue; resend the same request with the same Idempotency-Key."),
    ProblemType("APPLICATION_FULL", 429, "Application full",
        "The namespace has LEDGERFLOW_APPLICATION_WORK_LIMIT unfinished workflows and tasks; "
        "`Retry-After` says when to try again.",
        "Let work finish; resend the same request with the same Idempotency-Key."),
    ProblemType("RATE_LIMITED", 429, "Rate limited",
        "The credential sent more requests than LEDGERFLOW_RATE_LIMIT allows, or has "
        "LEDGERFLOW_LONG_POLLS_PER_CREDENTIAL claims waiting already; `Retry-After` says when to try again.",
        "Slow down (or spread the work over more credentials); resend the same request with the same "
        "Idempotency-Key after Retry-After."),
    ProblemType("UNAVAILABLE", 503, "Unavailable",
        "The database could not be reached; the request may or may not have taken effect.",
        "Resend the same request with the same Idempotency-Key (the SDK does this by itself)."),
    ProblemType("INTERNAL", 500, "Internal error",
        "A bug. The body never carries details; the server log has them under the `request_id`.",
        "Report it with the request_id."),
)  # fmt: skip
BY_CODE = {p.code: p for p in PROBLEMS}
PATH = "/docs/problems"

bp = Blueprint("problems", __name__)


def type_url(code: str) -> str:
    """The ``type`` of a problem body: this app's documentation section for ``code``."""
    slug = code.lower().replace("_", "-")
    return f"{request.url_root.rstrip('/')}{PATH}#{slug}"


def _md(text: str) -> str:
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


@bp.get(PATH)
@public
@doc(summary="The problem types of error bodies (HTML)", tags=["meta"], content_type="text/html")
def problems_page():
    sections = "\n".join(
        f'<section id="{p.slug}"><h2>{p.code} <small>{p.status} {html.escape(p.title)}</small></h2>'
        f"<p>{_md(p.meaning)}</p><p><b>What to do:</b> {_md(p.fix)}</p></section>"
        for p in PROBLEMS
    )
    body = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Ledgerflow problem types'
        "</title><style>body{font-family:sans-serif;max-width:48rem;margin:2rem auto;line-height:1.4}"
        "small{color:#666;font-weight:normal}section{border-top:1px solid #ddd}</style></head><body>"
        "<h1>Problem types</h1><p>Every API error is <code>application/problem+json</code> with "
        "<code>type</code> (a link to a section below), <code>title</code>, <code>status</code>, "
        "<code>code</code>, <code>message</code>, <code>request_id</code> and <code>errors</code> "
        f'(one per field). The whole API: <a href="/openapi.json">/openapi.json</a>.</p>{sections}'
        "</body></html>"
    )
    return Response(body, mimetype="text/html")


meta(problems_page)["openapi"] = False  # HTML for people; not an API operation
