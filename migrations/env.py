"""Alembic environment: the URL comes from the caller (app.migrate) or DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from app.db import connect_args
from app.schema import metadata
from app.settings import get_settings

config = context.config


def run_migrations_online() -> None:
    url = config.attributes.get("url") or get_settings().database_url
    # no prepared statements behind PgBouncer; named as the Procfile's release phase in pg_stat_activity
    engine = create_engine(url, connect_args={**connect_args(), "application_name": "ledgerflow-release"})
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata, compare_server_default=True)
        with context.begin_transaction():
            # Serialize concurrent upgrades (several processes starting at once, a release phase beside
            # `make run`): the second waits here, then finds the schema at head and does nothing. A
            # transaction-level lock, so it also holds through PgBouncer in transaction mode.
            connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7426001)")
            context.run_migrations()
    engine.dispose()


run_migrations_online()
