"""`make run` / `ledgerflow dev` with a DATABASE_URL whose database does not exist (issue 45: it stopped
with `database "..." does not exist`): the database is created when the server lets the role, else one
line says the one command to run."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from ledgerflow.cli import ensure_database
from ledgerflow.cli_common import Failure


def _exists(engine, name: str) -> bool:
    with engine.connect() as conn:
        return bool(conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}).scalar())


def test_a_missing_database_is_created_once(engine):
    name = "lf_new_" + uuid.uuid4().hex[:8]
    url = make_url(str(engine.url.render_as_string(hide_password=False))).set(database=name)
    try:
        assert ensure_database(url.render_as_string(hide_password=False)) is True
        assert _exists(engine, name)
        assert ensure_database(url.render_as_string(hide_password=False)) is False  # there: nothing to do
    finally:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))


def test_a_role_that_may_not_create_it_is_told_the_one_command(engine):
    role, name = "lf_nocreate_" + uuid.uuid4().hex[:6], "lf_missing_" + uuid.uuid4().hex[:8]
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN NOCREATEDB"))
    url = make_url(engine.url.render_as_string(hide_password=False)).set(username=role, database=name)
    try:
        with pytest.raises(Failure) as exc:
            ensure_database(url.render_as_string(hide_password=False))
        message = exc.value.message
        assert f"the database '{name}' does not exist" in message
        assert f"-c 'CREATE DATABASE \"{name}\"'" in message and "psql '" in message
        assert "\n" not in message and not _exists(engine, name)
    finally:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text(f"DROP ROLE IF EXISTS {role}"))
