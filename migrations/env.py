"""Alembic environment: the URL comes from the caller (app.migrate) or DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from app.schema import metadata
from app.settings import get_settings

config = context.config


def run_migrations_online() -> None:
    url = config.attributes.get("url") or get_settings().database_url
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata, compare_server_default=True)
        with context.begin_transaction():
            # Serialize concurrent upgrades (several processes starting at once).
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7426001)")
            context.run_migrations()
    engine.dispose()


run_migrations_online()
