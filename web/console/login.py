"""Login with an API token, logout, and the index (the first page the credential may see)."""

from __future__ import annotations

from flask import Response, redirect, render_template, request, session, url_for

from app.auth import authenticate, hash_token
from app.db import get_engine
from web.console.common import NAV, SESSION_KEY, bp, principal, session_only


def _safe_next(target: str | None) -> str | None:
    # only a path of this console (never another host, never a scheme-relative //host)
    if target and target.startswith("/console/") and not target.startswith("//"):
        return target
    return None


@bp.route("/login", methods=["GET", "POST"])
@session_only
def login() -> Response | str:
    error = None
    if request.method == "POST":
        token = (request.form.get("token") or "").strip()
        with get_engine().connect() as conn:
            found = authenticate(conn, token)
        if found is not None:
            session.clear()  # a fresh session (and CSRF token) for the new identity
            session[SESSION_KEY] = hash_token(token)
            session.permanent = True
            return redirect(_safe_next(request.form.get("next")) or url_for("console.index"))
        error = "That token is unknown or revoked."
    status = 401 if error else 200
    return render_template("console/login.html", error=error, next=request.args.get("next", "")), status


@bp.post("/logout")
@session_only
def logout() -> Response:
    session.clear()
    return redirect(url_for("console.login"))


@bp.get("/")
@session_only
def index() -> Response | tuple[str, int]:
    p = principal()
    for endpoint, _label, scope in NAV:
        if p.has(scope):
            return redirect(url_for(endpoint))
    return render_template("console/nothing.html"), 200
