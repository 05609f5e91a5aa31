"""Every /v1 operation of /openapi.json types its request body and its success response:
no untyped ``{}`` / Raw shells at the top of a body, an object schema with declared properties."""

from __future__ import annotations

from typing import Any

import pytest

from web import create_app
from web.openapi import build_spec


@pytest.fixture(scope="module")
def doc() -> dict[str, Any]:
    app = create_app()
    with app.app_context():
        return build_spec(app)


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _typed_object(doc: dict[str, Any], schema: dict[str, Any], where: str) -> dict[str, Any]:
    schema = _resolve(doc, schema)
    assert schema.get("type") == "object" and schema.get("properties"), f"{where}: untyped {schema}"
    return schema


def _v1_operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (path, method, op)
        for path, ops in doc["paths"].items()
        if path.startswith("/v1/")
        for method, op in ops.items()
    ]


def test_every_v1_operation_types_its_bodies(doc):
    ops = _v1_operations(doc)
    assert len(ops) >= 25
    for path, method, op in ops:
        where = f"{method.upper()} {path}"
        if method == "post":
            body = op["requestBody"]["content"]["application/json"]["schema"]
            request = _typed_object(doc, body, where + " request")
            assert request.get("additionalProperties") is False, where
            for name, prop in request["properties"].items():
                assert prop != {}, f"{where} request field {name} is undocumented"
        successes = [code for code in op["responses"] if code.startswith("2")]
        assert successes, where
        for code in successes:
            content = op["responses"][code].get("content", {})
            assert "application/json" in content, f"{where} {code}: no response schema"
            envelope = _typed_object(doc, content["application/json"]["schema"], f"{where} {code}")
            assert set(envelope["required"]) == {"request_id", "data"}, where
            _typed_object(doc, envelope["properties"]["data"], f"{where} {code} data")


def test_the_request_constraints_reach_the_document(doc):
    schemas = doc["components"]["schemas"]
    start = schemas["StartRequest"]["properties"]
    assert start["definition_id"]["pattern"] == "^[0-9a-f]{32}$"
    assert set(schemas["StartRequest"]["required"]) == {"definition_id", "version", "input"}
    control = schemas["ControlRequest"]["properties"]
    assert control["operation"]["enum"] == ["PAUSE", "RESUME", "CANCEL"]
    signal = schemas["SignalRequest"]["properties"]["target_activation_sequence"]
    assert (signal["type"], signal["minimum"], signal["maximum"]) == ("integer", 1, 2**32 - 1)
    claim = schemas["ClaimRequest"]["properties"]["queues"]
    assert (claim["type"], claim["items"]["type"]) == ("array", "string")
