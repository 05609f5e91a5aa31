"""The operator console (SPEC L-UI-1): server-rendered pages under ``/console`` over the same domain
functions, schemas, scopes and audit writes as the API. ``install(app)`` wires it into the app."""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta

from flask import Flask, Request, has_request_context, request
from flask.sessions import SecureCookieSession, SecureCookieSessionInterface

from app import sessions
from app.settings import SECRET_KEY
from web.console import (
    definitions,
    forms,
    health,
    home,
    integrations,
    jobs,
    login,
    schedules,
    search,
    tasks,
    workflow_ops,
    workflows,
)
from web.console.common import bp, csrf

log = logging.getLogger(__name__)
SESSION_HOURS = sessions.SESSION_SECONDS // 3600
__all__ = [
    "definitions",
    "forms",
    "health",
    "home",
    "install",
    "integrations",
    "jobs",
    "login",
    "schedules",
    "search",
    "tasks",
    "workflow_ops",
    "workflows",
]


class _SessionInterface(SecureCookieSessionInterface):
    """``Secure`` exactly when the request came over https (behind a proxy: set ProxyFix). A request
    without the session cookie (every API request: the cookie's path is /console) gets its empty session
    without the signing serializer Flask builds first at every request (~50 µs of an API request's CPU)."""

    def get_cookie_secure(self, app: Flask) -> bool:
        return has_request_context() and request.is_secure

    def open_session(self, app: Flask, request: Request) -> SecureCookieSession | None:
        if app.secret_key and not request.cookies.get(self.get_cookie_name(app)):
            return self.session_class()  # what Flask's open_session answers then
        return super().open_session(app, request)


def install(app: Flask) -> None:
    # One key for every web process of a deployment: production refuses to start without it
    # (app.settings.production_problems); `ledgerflow dev` keeps one under .data/ and the gunicorn master
    # of the Procfile's `web` makes one for all its workers when none is set (web.gunicorn_conf).
    key = SECRET_KEY.get()
    if not key:
        key = secrets.token_hex(32)
        log.warning(
            "%s is not set: console sessions are signed with a key of this process only", SECRET_KEY.name
        )
    app.secret_key = key
    app.config.update(
        SESSION_COOKIE_NAME="ledgerflow_console",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_PATH="/console",
        PERMANENT_SESSION_LIFETIME=timedelta(hours=SESSION_HOURS),
        WTF_CSRF_CHECK_DEFAULT=False,  # only the console's forms; the API is bearer-token only
        WTF_CSRF_TIME_LIMIT=None,  # bounded by the session lifetime instead
    )
    app.session_interface = _SessionInterface()
    csrf.init_app(app)
    app.register_blueprint(bp)
