"""A server that stopped accepting writes (a primary demoted to a standby, or put read-only by the
failover manager) is a lost connection, not a bug (app.db ``server_not_writable``): the write's
SQLSTATE 25006 drops the connection and the pool's older ones, and the API answers 503 UNAVAILABLE with
``Retry-After`` (LEDGERFLOW_DB_RETRY_AFTER_SECONDS), never 500. A transaction the code itself declared
READ ONLY stays an error of its own."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from app.auth import Scope, create_credential
from app.db import get_engine, transaction


def _pid(engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


@pytest.fixture
def own_engine(engine):
    """An engine of the app's own making (app.db: its listeners) with a pool of its own, so that no pooled
    connection another test of this process left behind takes part."""
    url = engine.url.update_query_dict({"application_name": "lf-read-only-test"})
    mine = get_engine(url.render_as_string(hide_password=False))
    yield mine
    mine.dispose()


def test_a_write_refused_by_a_read_only_server_drops_the_connection(own_engine):
    engine = own_engine
    pid = _pid(engine)
    with engine.connect() as conn:
        conn.execute(text("SET default_transaction_read_only = on"))  # as a demoted primary answers
        conn.commit()
        with pytest.raises(DBAPIError) as e:
            conn.execute(text("CREATE TABLE lf_never_created (x int)"))
    assert getattr(e.value.orig, "sqlstate", None) == "25006"
    assert e.value.connection_invalidated  # dropped: the next checkout connects anew
    assert _pid(engine) != pid


def test_a_transaction_declared_read_only_by_the_code_stays_an_error(engine):
    with engine.connect() as conn:
        conn.execute(text("SET TRANSACTION READ ONLY"))
        with pytest.raises(DBAPIError) as e:
            conn.execute(text("CREATE TABLE lf_never_created (x int)"))
    assert getattr(e.value.orig, "sqlstate", None) == "25006"
    assert not e.value.connection_invalidated


@pytest.fixture
def read_only_database(engine):
    """The test database read-only for every new session (the pool's connections made anew)."""
    name = engine.url.database
    admin = create_engine(engine.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on'))
    engine.dispose()
    try:
        yield
    finally:
        with admin.connect() as conn:
            conn.execute(text("SET default_transaction_read_only = off"))
            conn.execute(text(f'ALTER DATABASE "{name}" RESET default_transaction_read_only'))
        admin.dispose()
        engine.dispose()


@pytest.fixture
def definitions_token(engine) -> str:
    with transaction(engine) as conn:
        return create_credential(
            conn,
            namespace="ro-" + uuid.uuid4().hex[:8],
            name="ro",
            scopes=[Scope.DEFINITIONS_READ, Scope.DEFINITIONS_PUBLISH],
        ).token


def test_the_api_answers_503_with_retry_after_while_the_server_takes_no_writes(
    definitions_token, read_only_database, monkeypatch
):
    from web import create_app

    monkeypatch.setenv("LEDGERFLOW_DB_RETRY_AFTER_SECONDS", "2")
    client = create_app().test_client()
    r = client.post(
        "/v1/workflow-definitions",
        headers={"Authorization": f"Bearer {definitions_token}", "Idempotency-Key": uuid.uuid4().hex},
        data=json.dumps({"name": "never-" + uuid.uuid4().hex[:8]}),
        content_type="application/json",
    )
    assert r.status_code == 503, r.data
    assert r.headers["Retry-After"] == "2"
    assert r.get_json(force=True)["code"] == "UNAVAILABLE"


def test_a_statement_run_through_app_sql_is_judged_the_same(engine):
    from app.sql import run

    with engine.connect() as conn:
        conn.execute(text("SET default_transaction_read_only = on"))
        conn.commit()
        with pytest.raises(DBAPIError) as e:
            run(conn, "CREATE TABLE lf_never_created (x int)")
    assert e.value.connection_invalidated
    with engine.connect() as conn:
        conn.execute(text("SET TRANSACTION READ ONLY"))
        with pytest.raises(DBAPIError) as e:
            run(conn, "CREATE TABLE lf_never_created (x int)")
    assert not e.value.connection_invalidated
