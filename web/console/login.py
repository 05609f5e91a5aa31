"""Login with an API token, logout (which ends the session on the server), and the index (the first
page the credential may see)."""

from __future__ import annotations

from flask import Response, redirect, render_template, request, session, url_for

from app import sessions
from app.auth import authenticate
from app.db import get_engine, transaction
from web.console.common import NAV, SESSION_KEY, bp, principal, safe_next, session_only


@bp.route("/login", methods=["GET", "POST"])
@session_only
def login() -> Response | tuple[str, int]:
    error = None
    if request.method == "POST":
        token = (request.form.get("token") or "").strip()
        with get_engine().connect() as conn:
            found = authenticate(conn, token)
        if found is not None:
            with transaction() as conn:
                sid = sessions.start_session(conn, found)
            session.clear()  # a fresh session (and CSRF token) for the new identity
            session[SESSION_KEY] = sid
            session.permanent = True
            return redirect(safe_next(request.form.get("next")) or url_for("console.index"))  # type: ignore[return-value]  # a werkzeug Response
        error = "That token is unknown or revoked."
    status = 401 if error else 200
    nxt = safe_next(request.values.get("next")) or ""
    return render_template("console/login.html", error=error, next=nxt), status


@bp.post("/logout")
@session_only
def logout() -> Response:
    with transaction() as conn:
        sessions.end_session(conn, session.get(SESSION_KEY))
    session.clear()
    return redirect(url_for("console.login"))  # type: ignore[return-value]  # a werkzeug Response


@bp.get("/")
@session_only
def index() -> Response | tuple[str, int]:
    p = principal()
    for endpoint, _label, scope in NAV:
        if p.has(scope):
            return redirect(url_for(endpoint))  # type: ignore[return-value]  # a werkzeug Response
    return render_template("console/nothing.html"), 200
