"""The OpenAPI 3.1 document at ``/openapi.json``, generated from the app's url map and the marshmallow
schemas each endpoint declares (``web.strict``, ``web.meta.doc``, ``web.auth``). Request schemas
disallow unknown fields (``additionalProperties: false``)."""

from __future__ import annotations

import re
from typing import Any

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import Blueprint, Flask, current_app
from marshmallow import Schema, fields

from web.auth import public
from web.http import json_response
from web.meta import ATTR, doc
from web.strict import MAX_BODY_BYTES

bp = Blueprint("openapi", __name__)

TITLES = {
    400: "Invalid argument (INVALID_ARGUMENT)",
    401: "Missing, unknown or revoked credential (UNAUTHENTICATED)",
    403: "Missing permission (PERMISSION_DENIED)",
    404: "Not found (NOT_FOUND)",
    405: "Method not allowed",
    409: "State or idempotency conflict",
    413: f"Body larger than {MAX_BODY_BYTES} bytes (BODY_TOO_LARGE)",
    415: "Content-Type is not application/json (UNSUPPORTED_MEDIA_TYPE)",
    429: "Quota exhausted (QUEUE_FULL / APPLICATION_FULL)",
    503: "Unavailable; resend with the same Idempotency-Key (UNAVAILABLE)",
}
_CONVERTER = re.compile(r"<(?:(?P<conv>[a-z]+):)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)>")


class FieldErrorSchema(Schema):
    field = fields.String(required=True)
    message = fields.String(required=True)


class ProblemSchema(Schema):
    type = fields.String(required=True)
    title = fields.String(required=True)
    status = fields.Integer(required=True)
    code = fields.String(required=True)
    message = fields.String(required=True)
    request_id = fields.String(required=True)
    errors = fields.List(fields.Nested(FieldErrorSchema), required=True)


def _path(rule: str) -> tuple[str, list[dict[str, Any]]]:
    params: list[dict[str, Any]] = []

    def repl(m: re.Match[str]) -> str:
        schema: dict[str, Any] = {"type": "string", "minLength": 1}
        if m.group("conv") == "int":
            schema = {"type": "integer", "minimum": 0}
        params.append({"in": "path", "name": m.group("name"), "required": True, "schema": schema})
        return "{" + m.group("name") + "}"

    return _CONVERTER.sub(repl, rule), params


def build_spec(app: Flask) -> dict[str, Any]:
    spec = APISpec(
        title="Ledgerflow API",
        version="1.0.0",
        openapi_version="3.1.0",
        plugins=[MarshmallowPlugin()],
        info={
            "description": "Job ledger operator API and public workflow API. Errors are "
            "application/problem+json (RFC 9457) with a stable `code`."
        },
    )
    spec.components.security_scheme("bearerAuth", {"type": "http", "scheme": "bearer"})
    spec.components.schema("Problem", schema=ProblemSchema)
    problem_content = {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}}
    paths: dict[str, dict[str, Any]] = {}
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if rule.endpoint == "static" or rule.endpoint.startswith("console."):
            continue  # the console's HTML pages are not part of the API
        view = app.view_functions[rule.endpoint]
        m = getattr(view, ATTR, {})
        if m.get("openapi") is False:  # pages for people (e.g. /docs/problems), not API operations
            continue
        path, path_params = _path(rule.rule)
        for p in path_params:
            p["schema"] = m.get("path_params", {}).get(p["name"], p["schema"])
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            op: dict[str, Any] = {
                "operationId": f"{rule.endpoint.replace('.', '_')}_{method.lower()}",
                "summary": m.get("summary") or rule.endpoint,
                "tags": m.get("tags") or [rule.endpoint.split(".")[0]],
                "parameters": list(path_params),
                "responses": {},
            }
            if m.get("description"):
                op["description"] = m["description"]
            scopes = m.get("scopes")
            if scopes:
                op["security"] = [{"bearerAuth": list(scopes)}]
                op["x-required-scopes"] = list(scopes)
            else:
                op["security"] = []
            if m.get("query") is not None:
                op["parameters"].append({"in": "query", "schema": m["query"]})
            if m.get("idempotency_key"):
                op["parameters"].append(
                    {
                        "in": "header",
                        "name": "Idempotency-Key",
                        "required": True,
                        "description": "1-128 bytes of printable ASCII token characters",
                        "schema": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 128,
                            "pattern": r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,128}$",
                        },
                    }
                )
            if m.get("body") is not None:
                op["requestBody"] = {"required": True, "content": {"application/json": {"schema": m["body"]}}}
            ok: dict[str, Any] = {"description": "OK"}
            if m.get("response") is not None:
                ok["content"] = {m.get("content_type", "application/json"): {"schema": m["response"]}}
            op["responses"][str(m.get("status", 200))] = ok
            codes = set(m.get("errors", ())) | {400, 404, 503}
            if scopes:
                codes |= {401, 403}
            if m.get("body") is not None:
                codes |= {409, 413, 415}
            for code in sorted(codes):
                op["responses"][str(code)] = {
                    "description": TITLES.get(code, "Error"),
                    "content": problem_content,
                }
            op["responses"]["default"] = {"description": "Error", "content": problem_content}
            paths.setdefault(path, {})[method.lower()] = op
    for path, ops in paths.items():
        spec.path(path=path, operations=ops)
    return spec.to_dict()


@bp.get("/openapi.json")
@public
@doc(summary="This OpenAPI 3.1 document", tags=["meta"])
def openapi_json():
    cached = current_app.extensions.get("ledgerflow_openapi")
    if cached is None:
        cached = current_app.extensions["ledgerflow_openapi"] = build_spec(current_app)
    return json_response(cached)
