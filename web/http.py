"""Response helpers shared by every blueprint: exact JSON bodies and the request id."""

from __future__ import annotations

from typing import Any

from flask import Response, g

from app import jsonx
from app.ids import new_request_id

JSON = "application/json"
PROBLEM_JSON = "application/problem+json"


def request_id() -> str:
    rid = g.get("request_id")
    if rid is None:
        rid = g.request_id = new_request_id()
    return rid


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Serialise with ``jsonx.dumps`` (numbers exact, times RFC 3339 UTC)."""
    return raw_json_response(jsonx.dumps(body), status, headers)


def raw_json_response(text: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    resp = Response(text, status=status, mimetype=JSON)
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


def success(data: Any) -> dict[str, Any]:
    """The success body of every API: ``{"request_id", "data"}``."""
    return {"request_id": request_id(), "data": data}


def ok(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """The one success response helper."""
    return json_response(success(data), status, headers)
