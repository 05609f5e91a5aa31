"""The instance lookup of W-API-1 for the workflow blueprints, as the request's credential sees it
(``app.engine.operations.visible_instance``)."""

from __future__ import annotations

from sqlalchemy import Connection

from app.engine.operations import visible_instance
from web.auth import current_principal


def load_instance(conn: Connection, instance_id: str) -> dict:
    """W-API-1: an instance of the caller's namespace whose pinned definition's queues are all in
    the credential's scope; anything else is 404."""
    return visible_instance(conn, current_principal(), instance_id)
