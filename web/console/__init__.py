"""The operator console (SPEC L-UI-1): server-rendered pages under ``/console`` over the same domain
functions, schemas, scopes and audit writes as the API. ``install(app)`` wires it into the app."""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta

from flask import Flask, has_request_context, request
from flask.sessions import SecureCookieSessionInterface

from app.settings import SECRET_KEY
from web.console import health, jobs, login, workflows
from web.console.common import bp, csrf

log = logging.getLogger(__name__)
SESSION_HOURS = 8
__all__ = ["health", "install", "jobs", "login", "workflows"]


class _SessionInterface(SecureCookieSessionInterface):
    """``Secure`` exactly when the request came over https (behind a proxy: set ProxyFix)."""

    def get_cookie_secure(self, app: Flask) -> bool:  # type: ignore[override]
        return has_request_context() and request.is_secure


def install(app: Flask) -> None:
    key = SECRET_KEY.get()
    if not key:
        key = secrets.token_hex(32)
        log.warning("LEDGERFLOW_SECRET_KEY is not set: console sessions last only as long as this process")
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
