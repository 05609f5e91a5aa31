"""The one error handler: every error becomes ``application/problem+json`` (RFC 9457, SPEC W-ERR-1)
with ``type, title, status, code, message, request_id`` and ``errors: [{field, message}]``.
No stack trace, SQL or internal name ever reaches a client."""

from __future__ import annotations

import logging

from flask import Flask, Response
from gunicorn.http.errors import ParseException
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from app import jsonx
from app.errors import (
    BodyTooLarge,
    Internal,
    InvalidArgument,
    LedgerflowError,
    MethodNotAllowed,
    NotFound,
    Unavailable,
    UnsupportedMediaType,
)
from app.settings import DB_RETRY_AFTER_SECONDS
from web.http import PROBLEM_JSON, request_id
from web.problems import type_url

log = logging.getLogger(__name__)


def problem(err: LedgerflowError) -> Response:
    body = {
        "type": type_url(err.code),  # a section of GET /docs/problems
        "title": err.title,
        "status": err.status,
        "code": err.code,
        "message": err.message,
        "request_id": request_id(),
        "errors": [e.to_dict() for e in err.field_errors],
    }
    resp = Response(jsonx.dumps(body), status=err.status, mimetype=PROBLEM_JSON)
    for k, v in err.headers.items():
        resp.headers[k] = v
    return resp


def _from_http(exc: HTTPException) -> LedgerflowError:
    code = exc.code or 500
    if code == 404:
        return NotFound("no such resource")
    if code == 405:
        refused = MethodNotAllowed("method not allowed on this resource")
        allow = exc.get_headers() if hasattr(exc, "get_headers") else []
        for k, v in allow:
            if k.lower() == "allow":
                refused.headers["Allow"] = v
        return refused
    if code == 413:
        return BodyTooLarge("request body exceeds 512 KiB")
    if code == 415:
        return UnsupportedMediaType("Content-Type must be application/json")
    if code == 400:
        return InvalidArgument("malformed request")
    if code >= 500:
        return Internal("internal error")
    err = LedgerflowError(exc.description or "request refused")
    err.status, err.code, err.title = (
        code,
        "INVALID_ARGUMENT" if code < 500 else "INTERNAL",
        "Request refused",
    )
    return err


def register(app: Flask) -> None:
    @app.errorhandler(LedgerflowError)
    def _ledgerflow(exc: LedgerflowError) -> Response:
        return problem(exc)

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException) -> Response:
        return problem(_from_http(exc))

    @app.errorhandler(ParseException)
    def _bad_body(exc: ParseException) -> Response:
        # gunicorn parsed the line and headers before the app ran: what it raises while the app reads
        # the body is a body whose framing is broken (a chunk size that is off, a size that is not hex),
        # a body cut short as much as one that stops early; gunicorn closes the connection after it
        return problem(InvalidArgument("malformed request body"))

    # No writable PostgreSQL reachable (a restart, a failover: docs/operations.md, "High availability"):
    # 503 with Retry-After, never 500; the pool has dropped the dead connections (app/db.py) and a later
    # request connects to the new primary by itself.
    @app.errorhandler(OperationalError)
    @app.errorhandler(PoolTimeout)
    def _db_down(exc: Exception) -> Response:
        log.warning("database unavailable: %s", type(exc).__name__)
        return problem(Unavailable(retry_after=DB_RETRY_AFTER_SECONDS.get()))

    @app.errorhandler(DBAPIError)
    def _db_error(exc: DBAPIError) -> Response:
        if exc.connection_invalidated:
            log.warning("database connection lost: %s", type(exc.orig).__name__)
            return problem(Unavailable(retry_after=DB_RETRY_AFTER_SECONDS.get()))
        log.exception("database error")
        return problem(Internal("internal error"))

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception) -> Response:
        log.exception("unhandled error")
        return problem(Internal("internal error"))
