"""Workflow definitions and versions (X-DEF): create, publish, read, contract."""

from __future__ import annotations

from flask import Blueprint

from app.auth import Scope
from app.db import get_engine
from app.engine import definitions
from schemas.definitions import (
    ContractResponse,
    CreateDefinitionRequest,
    DefinitionListQuery,
    DefinitionPageResponse,
    DefinitionResponse,
    DefinitionResultResponse,
    VersionDocument,
    VersionListQuery,
    VersionPageResponse,
    VersionResponse,
    VersionResultResponse,
)
from web.auth import current_principal, requires
from web.http import ok, success
from web.meta import doc
from web.mutation import idempotent, mutation
from web.strict import body, query
from web.workflow_control import HEX32

bp = Blueprint("definitions", __name__)


@bp.post("/v1/workflow-definitions")
@doc(
    summary="Create a workflow definition",
    status=201,
    response=DefinitionResultResponse,
    tags=["definitions"],
    errors=(400, 401, 403, 409),
)
@requires(Scope.DEFINITIONS_PUBLISH)
@mutation
@body(CreateDefinitionRequest)
def create_definition(body: dict):
    ns = current_principal().namespace_id

    def work(conn):
        d = definitions.create_definition(conn, ns, body["name"], body["description"])
        return 201, success({"definition": d, "deduplicated": False})

    return idempotent(work)


@bp.get("/v1/workflow-definitions/<definition_id>")
@doc(
    summary="Read a workflow definition and its versions",
    response=DefinitionResponse,
    tags=["definitions"],
    errors=(401, 403, 404),
)
@requires(Scope.DEFINITIONS_READ)
def get_definition(definition_id: str):
    with get_engine().connect() as conn:
        return ok(definitions.get_definition(conn, current_principal().namespace_id, definition_id))


@bp.post("/v1/workflow-definitions/<definition_id>/versions")
@doc(
    summary="Publish an immutable version",
    status=201,
    response=VersionResultResponse,
    tags=["definitions"],
    errors=(400, 401, 403, 404, 409),
)
@requires(Scope.DEFINITIONS_PUBLISH)
@mutation
@body(VersionDocument)
def publish_version(definition_id: str, body: dict):
    ns = current_principal().namespace_id

    def work(conn):
        v = definitions.publish_version(conn, ns, definition_id, body)
        return 201, success({"version": v, "deduplicated": False})

    return idempotent(work)


@bp.get("/v1/workflow-definitions/<definition_id>/versions/<version>")
@doc(
    summary="Read a published version document",
    response=VersionResponse,
    tags=["definitions"],
    errors=(401, 403, 404),
)
@requires(Scope.DEFINITIONS_READ)
def get_version(definition_id: str, version: str):
    with get_engine().connect() as conn:
        return ok(definitions.get_version(conn, current_principal().namespace_id, definition_id, version))


@bp.get("/v1/workflow-definitions/<definition_id>/versions/<version>/contract")
@doc(
    summary="The input and signal payload contracts of a version",
    response=ContractResponse,
    tags=["definitions"],
    errors=(401, 403, 404),
)
@requires(Scope.DEFINITIONS_READ)
def get_contract(definition_id: str, version: str):
    with get_engine().connect() as conn:
        return ok(definitions.get_contract(conn, current_principal().namespace_id, definition_id, version))


@bp.get("/v1/workflow-definitions")
@doc(
    summary="List workflow definitions (filter by exact name, newest first, cursor pagination)",
    tags=["definitions"],
    response=DefinitionPageResponse,
    errors=(400, 401, 403),
)
@requires(Scope.DEFINITIONS_READ)
@query(DefinitionListQuery)
def list_definitions(query: dict):
    limit, cursor = query["limit"], query.get("cursor")
    with get_engine().connect() as conn:
        return ok(
            definitions.list_definitions(
                conn, current_principal().namespace_id, query.get("name"), limit, cursor
            )
        )


@bp.get("/v1/workflow-definitions/<definition_id>/versions")
@doc(
    summary="List the published versions of a definition (newest first, cursor pagination)",
    tags=["definitions"],
    response=VersionPageResponse,
    errors=(400, 401, 403, 404),
    path_params={"definition_id": HEX32},
)
@requires(Scope.DEFINITIONS_READ)
@query(VersionListQuery)
def list_versions(definition_id: str, query: dict):
    limit, cursor = query["limit"], query.get("cursor")
    with get_engine().connect() as conn:
        return ok(
            definitions.list_versions(conn, current_principal().namespace_id, definition_id, limit, cursor)
        )
