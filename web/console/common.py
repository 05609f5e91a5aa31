"""The console's shared machinery: the blueprint, the session login (the API's own tokens and scopes),
CSRF (Flask-WTF), the Content-Security-Policy, the page decorator and the form helpers.

The session cookie keeps ``sha256(token)`` only (the lookup key of ``app.auth``), never the token; every
request re-authenticates it, so a revoked credential is logged out on its next click."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from flask import Blueprint, Response, flash, g, redirect, render_template, request, session, url_for
from flask_wtf.csrf import CSRFError, CSRFProtect
from sqlalchemy import Connection
from werkzeug.datastructures import MultiDict

from app import jsonx
from app.auth import Principal, Scope, authenticate_hash
from app.db import get_engine
from app.errors import FieldError, InvalidArgument, LedgerflowError, PermissionDenied, Unauthenticated
from web.meta import meta

HTMX_VERSION = "2.0.11"  # vendored from the npm registry: `npm pack htmx.org@2.0.11` (dist/htmx.min.js)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SESSION_KEY = "th"  # sha256 of the API token
CLAIMED_KEY = "claimed"  # {task id: epoch} of the tasks claimed in this session (at most MAX_CLAIMED)
MAX_CLAIMED = 20
MAX_PRETTY = 20_000  # characters of one JSON block on a page

bp = Blueprint(
    "console",
    __name__,
    url_prefix="/console",
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)
csrf = CSRFProtect()

# Pages in the navigation: (endpoint, label, scope that shows it).
NAV = (
    ("console.jobs", "Job ledger", Scope.ENGINE_MONITOR),
    ("console.charts", "Charts", Scope.ENGINE_MONITOR),
    ("console.workflows", "Workflows", Scope.WORKFLOWS_READ),
    ("console.tasks_page", "Human tasks", Scope.TASKS_WORK),
    ("console.health", "Engine health", Scope.ENGINE_MONITOR),
)
# engine-wide pages: shown to (and allowed for) platform-wide operator credentials only
PLATFORM_PAGES = {"console.charts", "console.health"}
OPEN_ENDPOINTS = {"console.login", "console.static"}


def principal() -> Principal:
    p = g.get("principal")
    if p is None:
        raise Unauthenticated()
    return p


def job_scope() -> str | None:
    """The namespace whose ledger jobs this operator reaches (None: a platform-wide credential), as
    in the API (``principal.job_namespace``)."""
    return principal().job_namespace


def platform_view() -> None:
    """Engine-wide pages (runtime status, engine health, charts) need a platform-wide operator."""
    if job_scope() is not None:
        raise PermissionDenied(
            "this page is a platform-wide view: it needs a platform-wide operator credential "
            "(ledgerflow credentials create --platform)"
        )


def can(*scopes: str) -> bool:
    p = g.get("principal")
    return p is not None and p.has(*scopes)


def page(*scopes: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A console page or action needing *all* ``scopes`` of the logged-in credential (403 page
    otherwise). The scopes are declared like the API's (the route-permission test reads them)."""
    if not scopes:
        raise ValueError("page() needs at least one scope")

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            missing = [s for s in scopes if not principal().has(s)]
            if missing:
                raise PermissionDenied(f"this credential lacks the permission(s): {', '.join(missing)}")
            return fn(*args, **kwargs)

        meta(wrapper)["scopes"] = tuple(scopes)
        return wrapper

    return deco


def session_only(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A console route open to any logged-in credential (the index, logout) or to everyone (login):
    declared as such for the route-permission test."""
    meta(fn)["console_session"] = True
    return fn


@bp.before_request
def _authenticate() -> Response | None:
    if request.method == "POST":
        csrf.protect()  # every console form, the login form included
    if request.endpoint in OPEN_ENDPOINTS:
        return None
    token_hash = session.get(SESSION_KEY)
    found = None
    if isinstance(token_hash, str) and len(token_hash) == 64:
        with get_engine().connect() as conn:
            found = authenticate_hash(conn, token_hash)
    if found is None:
        session.pop(SESSION_KEY, None)
        if request.method == "GET":
            return redirect(url_for("console.login", next=request.full_path.rstrip("?")))
        raise Unauthenticated("log in first")
    g.principal = found
    return None


@bp.after_request
def _headers(resp: Response) -> Response:
    resp.headers["Content-Security-Policy"] = CSP
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["Referrer-Policy"] = "same-origin"
    resp.headers["X-Frame-Options"] = "DENY"
    return resp


@bp.app_context_processor
def _template_globals() -> dict[str, Any]:
    def shown(endpoint: str, scope: str) -> bool:
        p = g.get("principal")
        return can(scope) and (endpoint not in PLATFORM_PAGES or (p is not None and p.job_namespace is None))

    return {"can": can, "shown": shown, "NAV": NAV, "HTMX_VERSION": HTMX_VERSION, "Scope": Scope}


def _error_page(status: int, title: str, message: str, fields: Iterable[FieldError] = ()) -> Response:
    body = render_template(
        "console/error.html", status=status, title=title, message=message, fields=list(fields)
    )
    return Response(body, status=status, mimetype="text/html")


@bp.errorhandler(LedgerflowError)
def _ledgerflow_error(exc: LedgerflowError) -> Response:
    if isinstance(exc, Unauthenticated) and request.method == "GET":
        return redirect(url_for("console.login"))  # type: ignore[return-value]
    return _error_page(exc.status, exc.title, exc.message, exc.field_errors)


@bp.errorhandler(CSRFError)
def _csrf_error(exc: CSRFError) -> Response:
    return _error_page(400, "Form expired or forged", f"{exc.description} Reload the page and try again.")


# --------------------------------------------------------------------------- forms
_INT = re.compile(r"^-?[0-9]{1,19}$")


def clean_args(
    args: MultiDict[str, str], *, lists: Iterable[str] = (), ints: Iterable[str] = ()
) -> dict[str, Any]:
    """Form or query fields as the JSON shape the API schemas take: blank fields dropped, ``lists``
    as lists (repeated fields or one comma list), integer-looking ``ints`` as ints (anything else is
    left as text for the schema to refuse). The schema does the validation."""
    list_names, int_names = set(lists), set(ints)
    out: dict[str, Any] = {}
    for key in args:
        values = [v.strip() for v in args.getlist(key) if v.strip()]
        if not values:
            continue
        if key in list_names:
            out[key] = [p.strip() for v in values for p in v.split(",") if p.strip()]
        elif key in int_names and _INT.match(values[0]):
            out[key] = int(values[0])
        else:
            out[key] = values[0]
    return out


def require_confirmation(form: MultiDict[str, str]) -> None:
    if form.get("confirm") != "yes":
        raise InvalidArgument("tick the confirmation box to go ahead", field="confirm")


def json_field(raw: str | None, field: str) -> Any:
    """A JSON text area, parsed exactly (numbers never pass through float)."""
    if raw is None or not raw.strip():
        raise InvalidArgument("a JSON value is required (null is a value)", field=field)
    try:
        return jsonx.loads(raw)
    except (jsonx.BadJSON, jsonx.DuplicateKey) as exc:
        raise InvalidArgument(errors=[FieldError(field, f"not valid JSON: {exc}")]) from None


def done(message: str, endpoint: str, **values: Any) -> Response:
    """Post/redirect/get after a successful action."""
    flash(message)
    return redirect(url_for(endpoint, **values))  # type: ignore[return-value]


def read(fn: Callable[[Connection], Any]) -> Any:
    """One read-only transaction."""
    with get_engine().connect() as conn, conn.begin():
        return fn(conn)


@bp.app_template_filter("dt")
def _dt(value: Any) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS`` UTC (datetimes or RFC 3339 strings)."""
    if not value:  # None, "" or a missing (undefined) field
        return "—"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
    return str(value).replace("T", " ").removesuffix("Z")[:19]


@bp.app_template_filter("epoch")
def _epoch(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


@bp.app_template_filter("pretty")
def _pretty(value: Any) -> str:
    """JSON for a <pre> block, exact numbers (``jsonx``); bounded so one huge payload cannot bloat a page."""
    out = jsonx.dumps(value)
    return (
        out if len(out) <= MAX_PRETTY else out[:MAX_PRETTY] + f"\n… ({len(out) - MAX_PRETTY} more characters)"
    )
