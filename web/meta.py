"""Endpoint metadata collected by the decorator stack (scopes, schemas, docs). The OpenAPI document
and the route-permission test read it; the decorators share one dict per view function."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

ATTR = "__ledgerflow_api__"


def meta(fn: Callable[..., Any]) -> dict[str, Any]:
    d = getattr(fn, ATTR, None)
    if d is None:
        d = {}
        setattr(fn, ATTR, d)
    return d


def doc(
    *,
    summary: str,
    response: Any = None,
    status: int = 200,
    tags: list[str] | None = None,
    errors: tuple[int, ...] = (),
    content_type: str = "application/json",
    description: str | None = None,
    path_params: dict[str, dict[str, Any]] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Describe an endpoint for the OpenAPI document: the success status and response schema (a
    marshmallow Schema class or instance), and the error statuses it can answer."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        m = meta(fn)
        m.update(
            summary=summary,
            response=response,
            status=status,
            tags=tags or [],
            errors=errors,
            content_type=content_type,
            description=description,
            path_params=path_params or {},
        )
        return fn

    return deco
