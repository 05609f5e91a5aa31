"""The console's shared machinery: the blueprint, the session login (the API's own tokens and scopes,
sessions kept on the server by ``app.sessions``), CSRF (Flask-WTF), the Content-Security-Policy, the
page decorator, forms that show their errors in place, paging and the template filters.

The cookie keeps a random session id only (never the token, nor its hash); every request reads the
session and its credential (``app.sessions.session_principal``), so logging out, a revoked credential
or an expired session ends it on its next click, for every copy of the cookie."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode, urlsplit

from flask import (
    Blueprint,
    Response,
    flash,
    g,
    make_response,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask_wtf.csrf import CSRFError, CSRFProtect
from markupsafe import Markup
from sqlalchemy import Connection
from werkzeug.datastructures import MultiDict

from app import jsonx, sessions
from app.auth import Principal, Scope
from app.db import get_engine
from app.errors import FieldError, InvalidArgument, LedgerflowError, PermissionDenied, Unauthenticated
from app.ledger.states import Pool
from web.meta import meta

HTMX_VERSION = "2.0.11"  # vendored from the npm registry: `npm pack htmx.org@2.0.11` (dist/htmx.min.js)
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
SESSION_KEY = "sid"  # the random session id of app.sessions (the cookie never holds the token)
CLAIMED_KEY = "claimed"  # {task id: epoch} of the tasks claimed in this session (at most MAX_CLAIMED)
MAX_CLAIMED = 20
MAX_PRETTY = 20_000  # characters of one JSON block on a page
FOLD_LINES = 12  # a JSON block longer than this is folded (<details>)
REFRESH_SECONDS = 5  # live regions (job table, workflow page, task list) poll this often

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
    ("console.overview", "Overview", Scope.WORKFLOWS_READ),
    ("console.jobs", "Job ledger", Scope.ENGINE_MONITOR),
    ("console.workflows", "Workflows", Scope.WORKFLOWS_READ),
    ("console.tasks_page", "Human tasks", Scope.TASKS_WORK),
    ("console.schedules", "Schedules", Scope.WORKFLOWS_READ),
    ("console.definitions", "Definitions", Scope.DEFINITIONS_READ),
    ("console.subscriptions", "Integrations", Scope.INTEGRATIONS_MANAGE),
    ("console.charts", "Charts", Scope.ENGINE_MONITOR),
    ("console.health", "Engine health", Scope.ENGINE_MONITOR),
)
# engine-wide pages: shown to (and allowed for) platform-wide operator credentials only
PLATFORM_PAGES = {"console.charts", "console.health"}
OPEN_ENDPOINTS = {"console.login", "console.static"}
# the pages a navigation entry stands for (aria-current), beyond its own endpoint prefix
NAV_SECTIONS = {
    "console.subscriptions": ("console.subscription", "console.rule"),
    "console.definitions": ("console.definition",),
    "console.schedules": ("console.schedule",),
    "console.jobs": ("console.job", "console.clusters", "console.replay", "console.chain"),
    "console.workflows": ("console.workflow", "console.start_form", "console.signal_form"),
    "console.health": ("console.node",),
}
# one name per pool everywhere (the queue names are the ledger's storage detail)
POOL_OF_QUEUE = {p.queue: p.value for p in Pool}


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
    """A console route open to any logged-in credential (the index, logout, search) or to everyone
    (login): declared as such for the route-permission test."""
    meta(fn)["console_session"] = True
    return fn


def safe_next(target: str | None) -> str | None:
    """A path of this console (never another host, never a scheme-relative //host), else None."""
    if target and target.startswith("/console/") and not target.startswith("//") and "\\" not in target:
        return target
    return None


def _htmx_origin() -> str | None:
    """The console page an htmx request was made from (``HX-Current-URL``), as a path."""
    current = request.headers.get("HX-Current-URL", "")
    parts = urlsplit(current)
    if parts.netloc and parts.netloc != request.host:
        return None
    return safe_next(parts.path + (f"?{parts.query}" if parts.query else ""))


def _login_redirect() -> Response:
    """Where a request without a live session goes: the login page, then back. An htmx request (the
    panel refresh, a live region) gets ``HX-Redirect`` so that the whole page moves to the login
    page, never the login page's HTML swapped into a fragment."""
    if request.headers.get("HX-Request") == "true":
        resp = Response("", status=401)
        resp.headers["HX-Redirect"] = url_for("console.login", next=_htmx_origin() or "")
        return resp
    return redirect(url_for("console.login", next=request.full_path.rstrip("?")))  # type: ignore[return-value]  # a werkzeug Response


@bp.before_request
def _authenticate() -> Response | None:
    if request.method == "POST":
        csrf.protect()  # every console form, the login form included
    if request.endpoint in OPEN_ENDPOINTS:
        return None
    found = None
    sid = session.get(SESSION_KEY)
    if sid is not None:
        with get_engine().connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            found = sessions.session_principal(conn, sid)
    if found is None:
        session.pop(SESSION_KEY, None)
        if request.method == "GET" or request.headers.get("HX-Request") == "true":
            return _login_redirect()
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


def _nav_current(endpoint: str) -> bool:
    here = request.endpoint or ""
    return here.startswith(endpoint) or any(here.startswith(e) for e in NAV_SECTIONS.get(endpoint, ()))


@bp.app_context_processor
def _template_globals() -> dict[str, Any]:
    def shown(endpoint: str, scope: str) -> bool:
        p = g.get("principal")
        return can(scope) and (endpoint not in PLATFORM_PAGES or (p is not None and p.job_namespace is None))

    return {
        "can": can,
        "shown": shown,
        "NAV": NAV,
        "HTMX_VERSION": HTMX_VERSION,
        "Scope": Scope,
        "form_of": form_of,
        "nav_current": _nav_current,
        "REFRESH": REFRESH_SECONDS,
        "pool_name": pool_name,
        "here": here,
    }


def here() -> str:
    """This page's path and query (the ``back`` of its forms: an action returns to it)."""
    return (
        request.full_path.rstrip("?")
        if request.method == "GET"
        else safe_next(request.form.get("back")) or ""
    )


def pool_name(queue: str) -> str:
    return POOL_OF_QUEUE.get(queue, queue)


bp.add_app_template_filter(pool_name, "pool")


# --------------------------------------------------------------------------- errors
def _error_page(status: int, title: str, message: str, fields: Iterable[FieldError] = ()) -> Response:
    body = render_template(
        "console/error.html", status=status, title=title, message=message, fields=list(fields)
    )
    return Response(body, status=status, mimetype="text/html")


@bp.errorhandler(LedgerflowError)
def _ledgerflow_error(exc: LedgerflowError) -> Response:
    if isinstance(exc, Unauthenticated):
        return _login_redirect() if request.method == "GET" else _error_page(401, exc.title, exc.message)
    return _error_page(exc.status, exc.title, exc.message, exc.field_errors)


@bp.errorhandler(CSRFError)
def _csrf_error(exc: CSRFError) -> Response:
    return _error_page(400, "Form expired or forged", f"{exc.description} Reload the page and try again.")


# --------------------------------------------------------------------------- forms
@dataclass
class FormState:
    """What a form shows: the values typed (kept after an error) and the errors beside their fields."""

    name: str = ""
    values: MultiDict[str, str] = field(default_factory=MultiDict)
    errors: dict[str, list[str]] = field(default_factory=dict)
    message: str | None = None  # the error that belongs to no field of the form

    def value(self, key: str, default: Any = "") -> Any:
        return self.values.get(key, default) if key in self.values else default

    def all(self, key: str) -> list[str]:
        return self.values.getlist(key)

    def error(self, key: str) -> str | None:
        found = self.errors.get(key)
        return "; ".join(found) if found else None

    @property
    def failed(self) -> bool:
        return bool(self.errors or self.message)


EMPTY_FORM = FormState()


def form_of(name: str) -> FormState:
    """The state of form ``name`` on this page: what was typed and its errors after a refused
    submit, else empty (the template's defaults apply)."""
    state = g.get("form")
    return state if state is not None and state.name == name else EMPTY_FORM


def in_place(
    name: str, fields: Iterable[str], work: Callable[[], Response], rerender: Callable[[], Any]
) -> Response:
    """Run an action; when it is refused (400 / 404 / 409 / 429 ...) show the page again with the
    error beside its field and every value the operator typed, under the status of the refusal."""
    try:
        return work()
    except (Unauthenticated, PermissionDenied):
        raise
    except LedgerflowError as exc:
        known = set(fields)
        values = MultiDict([(k, v) for k, v in request.form.items(multi=True) if k != "csrf_token"])
        errors: dict[str, list[str]] = {}
        loose = []
        for fe in exc.field_errors:
            key = re.split(r"[.\[]", fe.field, maxsplit=1)[0]
            if key in known:
                errors.setdefault(key, []).append(
                    fe.message if key == fe.field else f"{fe.field}: {fe.message}"
                )
            else:
                loose.append(f"{fe.field}: {fe.message}")
        message = None if errors and not loose else exc.message if not loose else "; ".join(loose)
        g.form = FormState(name, values, errors, message)
        resp = make_response(rerender(), exc.status)
        for k, v in exc.headers.items():
            if k.lower() == "retry-after":
                resp.headers[k] = v
        return resp


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


def json_field(raw: str | None, field: str, *, required: bool = True) -> Any:
    """A JSON text area, parsed exactly (numbers never pass through float)."""
    if raw is None or not raw.strip():
        if not required:
            return None
        raise InvalidArgument("a JSON value is required (null is a value)", field=field)
    try:
        return jsonx.loads(raw)
    except (jsonx.BadJSON, jsonx.DuplicateKey) as exc:
        raise InvalidArgument(errors=[FieldError(field, f"not valid JSON: {exc}")]) from None


def done(message: str, endpoint: str, **values: Any) -> Response:
    """Post/redirect/get after a successful action: back to the page the form was on (its filters
    and paging kept) when it was a page of this console, else to ``endpoint``."""
    flash(message)
    back = safe_next(request.form.get("back"))
    return redirect(back or url_for(endpoint, **values))  # type: ignore[return-value]  # a werkzeug Response


def read(fn: Callable[[Connection], Any]) -> Any:
    """One read-only transaction (one snapshot: a page shows one moment)."""
    with get_engine().connect() as conn, conn.begin():
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        return fn(conn)


def rfc3339_of_local(value: str) -> str:
    """A ``datetime-local`` value (no zone, no seconds when they are 0; the forms say UTC) as RFC 3339;
    anything else is left for the schema to judge."""
    v = value.strip()
    if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d", v):
        v += ":00"
    if re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?", v):
        v += "Z"
    return v


# --------------------------------------------------------------------------- paging
TRAIL_MAX = 40  # pages remembered for "previous" (older ones lead back to the first page)
FIRST = "0"  # the trail's mark of the first page (a cursor always holds a ".")


@dataclass(frozen=True)
class Pager:
    """Previous / next links over cursor pages: the cursors of the pages before this one travel in
    the URL (``trail``), so "previous" is one click like "next"."""

    number: int
    size: int
    shown: int
    total: int | None
    total_capped: bool
    prev_url: str | None
    next_url: str | None
    uncounted: bool = False  # the total was not counted (over its time budget)

    @property
    def first(self) -> int:
        return (self.number - 1) * self.size + (1 if self.shown else 0)

    @property
    def last(self) -> int:
        return (self.number - 1) * self.size + self.shown


def pager(
    args: MultiDict[str, str],
    next_cursor: str | None,
    shown: int,
    size: int,
    total: int | None = None,
    cap: int | None = None,
    *,
    cursor_key: str = "cursor",
    uncounted: bool = False,
) -> Pager:
    kept = [(k, v) for k, v in args.items(multi=True) if k not in (cursor_key, "trail")]
    trail = [t for t in (args.get("trail") or "").split("~") if t][-TRAIL_MAX:]
    cursor = args.get(cursor_key) or None

    def url(cur: str | None, tr: list[str]) -> str:
        q = kept + ([(cursor_key, cur)] if cur else []) + ([("trail", "~".join(tr))] if tr else [])
        return "?" + urlencode(q) if q else request.path

    prev_url = None
    if cursor is not None:
        prev = trail[-1] if trail else FIRST
        prev_url = url(None if prev == FIRST else prev, trail[:-1])
    next_url = url(next_cursor, [*trail, cursor or FIRST][-TRAIL_MAX:]) if next_cursor else None
    number = len(trail) + 1 if cursor is not None else 1
    capped = cap is not None and total is not None and total > cap
    shown_total = min(total, cap) if capped and cap and total is not None else total
    return Pager(number, size, shown, shown_total, capped, prev_url, next_url, uncounted)


# --------------------------------------------------------------------------- template filters
def _as_datetime(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    if isinstance(value, str) and value:
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
        except ValueError:
            return None
    return None


@bp.app_template_filter("dt")
def _dt(value: Any) -> str:
    """A timestamp as ``YYYY-MM-DD HH:MM:SS`` UTC (datetimes or RFC 3339 strings)."""
    if not value:  # None, "" or a missing (undefined) field
        return "—"
    when = _as_datetime(value)
    return when.strftime("%Y-%m-%d %H:%M:%S") if when else str(value)[:19]


def relative(when: datetime, now: datetime) -> str:
    """``3 min ago`` / ``in 2 h`` (pure; the unit unit-tested)."""
    seconds = (now - when).total_seconds()
    future = seconds < 0
    s = abs(seconds)
    if s < 1:
        return "now"
    for limit, div, unit in ((60, 1, "s"), (3600, 60, "min"), (86400, 3600, "h"), (86400 * 60, 86400, "d")):
        if s < limit:
            text = f"{int(s // div)} {unit}"
            break
    else:
        text = f"{int(s // (86400 * 30))} mo"
    return f"in {text}" if future else f"{text} ago"


@bp.app_template_filter("ago")
def _ago(value: Any) -> Markup:
    """A relative time with the exact UTC time on hover (``title``) and for machines (``datetime``)."""
    when = _as_datetime(value)
    if when is None:
        return Markup("—")
    exact = when.strftime("%Y-%m-%d %H:%M:%S UTC")
    iso = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        iso, exact, relative(when, datetime.now(UTC))
    )


@bp.app_template_filter("at")
def _at(value: Any, with_date: bool = True) -> Markup:
    """An exact UTC time as visible text (``2026-12-05 11:49:22.123``, or the time of day alone when
    ``with_date`` is false) with the relative time beside it, for rows read in order (event history,
    audit): no hover needed, so a phone shows it too."""
    when = _as_datetime(value)
    if when is None:
        return Markup("—")
    shown = (
        when.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S") + f".{when.microsecond // 1000:03d}"
    )
    return Markup('<time datetime="{}">{}</time> <small class="ago">{}</small>').format(
        when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), shown, relative(when, datetime.now(UTC))
    )


def duration(seconds: float | None) -> str:
    """``850 ms`` / ``12.4 s`` / ``3 min 5 s`` / ``2 h 4 min``."""
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60)} min"


bp.add_app_template_filter(duration, "duration")


@bp.app_template_filter("epoch")
def _epoch(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


@bp.app_template_filter("pretty")
def _pretty(value: Any) -> str:
    """JSON for a <pre> block, exact numbers (``jsonx``), indented; bounded so one huge payload
    cannot bloat a page."""
    out = _indent(value)
    return (
        out if len(out) <= MAX_PRETTY else out[:MAX_PRETTY] + f"\n… ({len(out) - MAX_PRETTY} more characters)"
    )


def _indent(value: Any, depth: int = 0) -> str:
    """Indented JSON with ``jsonx``'s exact scalars (two spaces a level)."""
    pad, inner = "  " * depth, "  " * (depth + 1)
    if isinstance(value, dict) and value:
        items = [f"{inner}{jsonx.dumps(str(k))}: {_indent(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value:
        if all(not isinstance(v, dict | list) for v in value) and len(jsonx.dumps(value)) <= 60:
            return jsonx.dumps(value)
        return "[\n" + ",\n".join(inner + _indent(v, depth + 1) for v in value) + f"\n{pad}]"
    return jsonx.dumps(value)


@bp.app_template_filter("foldable")
def _foldable(text: str) -> bool:
    """A block long enough to be folded behind its summary."""
    return text.count("\n") >= FOLD_LINES or len(text) > 600


@bp.app_template_filter("qs")
def _qs(pairs: dict[str, Any]) -> str:
    return urlencode([(k, v) for k, v in pairs.items() if v not in (None, "")])
