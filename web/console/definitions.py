"""Definition pages (X-DEF): the namespace's definitions with their versions; one definition; one
published version with its graph (SVG), steps, input contract and signal contracts, and its document.
Read with ``definitions:read`` through ``app.engine.definitions``, as the API reads them."""

from __future__ import annotations

from typing import Any

from flask import render_template, request

from app.auth import Scope
from app.engine import definitions, overview
from web.console.common import bp, page, pager, principal, read
from web.console.diagrams import graph

READ = Scope.DEFINITIONS_READ
PAGE_SIZE = 50


@bp.get("/definitions", endpoint="definitions")
@page(READ)
def definitions_page() -> str:
    ns = principal().namespace_id
    cursor = request.args.get("cursor") or None
    data = read(lambda c: definitions.list_definitions(c, ns, None, PAGE_SIZE, cursor))
    return render_template(
        "console/definitions.html",
        items=data["items"],
        pages=pager(request.args, data.get("next_cursor"), len(data["items"]), PAGE_SIZE),
    )


@bp.get("/definitions/<definition_id>")
@page(READ)
def definition(definition_id: str) -> str:
    ns = principal().namespace_id
    d = read(lambda c: definitions.get_definition(c, ns, definition_id))
    return render_template("console/definition.html", d=d)


@bp.get("/definitions/<definition_id>/versions/<version>")
@page(READ)
def version(definition_id: str, version: str) -> str:
    ns = principal().namespace_id

    def load(c: Any) -> dict[str, Any]:
        return {
            "d": definitions.get_definition(c, ns, definition_id),
            "v": definitions.get_version(c, ns, definition_id, version),
            "contract": definitions.get_contract(c, ns, definition_id, version),
        }

    data = read(load)
    steps_doc = data["v"]["document"]["steps"]
    layers = overview.graph_layers(steps_doc)
    ordered = [
        {**s, "state": "BLOCKED"}
        for key in overview.graph_order(steps_doc)
        for s in steps_doc
        if s["key"] == key
    ]
    return render_template("console/version.html", **data, steps=ordered, graph=graph(ordered, layers))
