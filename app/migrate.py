"""Apply Alembic migrations programmatically (used by the CLI, the Procfile's release phase and the
test suite). Concurrent upgrades are safe: every upgrade runs in one transaction that first takes a
transaction-level advisory lock (migrations/env.py), so a second one waits, then finds the schema at
head and does nothing. A transaction-level lock also holds through PgBouncer in transaction mode."""

from __future__ import annotations

import importlib.util
from types import ModuleType

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from app.files import ROOT


def alembic_config(url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.attributes["url"] = url
    return cfg


def upgrade(url: str, revision: str = "heads") -> None:
    command.upgrade(alembic_config(url), revision)


def head_revisions(url: str) -> tuple[str, ...]:
    """The revisions the code's migrations end at."""
    return tuple(ScriptDirectory.from_config(alembic_config(url)).get_heads())


def current_revisions(url: str) -> tuple[str, ...]:
    """The revisions the database at ``url`` is at (empty before the first upgrade)."""
    from app.db import connect_args

    engine = create_engine(url, connect_args=connect_args())
    try:
        with engine.connect() as conn:
            return tuple(MigrationContext.configure(conn).get_current_heads())
    finally:
        engine.dispose()


def migration_module(name: str) -> ModuleType:
    """The module of migration ``name`` (a file of ``migrations/versions`` without its ``.py``): its constants,
    for a later migration that restores or rewrites what it created, and for the migration tests."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "migrations" / "versions" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
