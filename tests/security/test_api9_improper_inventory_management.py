"""OWASP API9:2023 Improper Inventory Management: every served route is in the OpenAPI document
(nothing undocumented to forget about), and every documented operation that needs a credential
says which scopes, so the inventory is also the permission map."""

from __future__ import annotations

import re

from web import create_app


def test_every_route_is_documented_with_its_security():
    app = create_app()
    doc = app.test_client().get("/openapi.json").json
    served = {
        (m.lower(), re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", r.rule))
        for r in app.url_map.iter_rules()
        if r.endpoint != "static"
        # HTML, not API: the operator console (its routes and scopes are inventoried by
        # tests/web/test_auth_permissions.py) and the problem-type documentation page
        and not r.rule.startswith(("/console", "/docs/problems"))
        for m in r.methods - {"HEAD", "OPTIONS"}
    }
    documented = {
        (m, p)
        for p, ops in doc["paths"].items()
        for m in ops
        if m in {"get", "post", "put", "patch", "delete"}
    }
    assert served - documented == set()
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if method in {"get", "post", "put", "patch", "delete"} and op.get("security") != []:
                assert op.get("security"), (method, path)
