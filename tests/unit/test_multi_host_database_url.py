"""DATABASE_URL in libpq's multi-host form (a primary and its standbys: docs/operations.md, "High
availability") becomes SQLAlchemy's form with one ``host=`` query parameter per host, which psycopg
tries in order (``app.settings.normalize_database_url``); the LISTEN connection gets the same hosts."""

from __future__ import annotations

from sqlalchemy import make_url

from app.db import psycopg_conninfo, with_connect_timeout
from app.settings import normalize_database_url


def test_libpq_multi_host_url_becomes_host_query_parameters():
    url = "postgresql://app:s%40cret@10.0.0.1:5432,10.0.0.2:5433/ledger?target_session_attrs=read-write"
    assert normalize_database_url(url) == (
        "postgresql+psycopg://app:s%40cret@/ledger?host=10.0.0.1:5432&host=10.0.0.2:5433"
        "&target_session_attrs=read-write"
    )
    parsed = make_url(normalize_database_url(url))
    assert parsed.query["host"] == ("10.0.0.1:5432", "10.0.0.2:5433")
    assert parsed.password == "s@cret" and parsed.database == "ledger"


def test_a_host_without_a_port_gets_5432_and_single_hosts_are_unchanged():
    assert normalize_database_url("postgres://u@db-a,db-b:6000/x") == (
        "postgresql+psycopg://u@/x?host=db-a:5432&host=db-b:6000"
    )
    assert normalize_database_url("postgresql://u@h:5/db?sslmode=require") == (
        "postgresql+psycopg://u@h:5/db?sslmode=require"
    )
    assert normalize_database_url("postgresql+psycopg://u@a:1,b:2/db") == (
        "postgresql+psycopg://u@/db?host=a:1&host=b:2"
    )


def test_the_listen_connection_and_the_engine_get_every_host_and_a_connect_timeout(monkeypatch):
    url = "postgresql://app@10.0.0.1:5432,10.0.0.2:5433/ledger?target_session_attrs=read-write"
    monkeypatch.setenv("LEDGERFLOW_DB_CONNECT_TIMEOUT_SECONDS", "3")
    conninfo = dict(part.split("=", 1) for part in psycopg_conninfo(url).split())
    assert conninfo["host"] == "10.0.0.1,10.0.0.2" and conninfo["port"] == "5432,5433"
    assert conninfo["target_session_attrs"] == "read-write" and conninfo["connect_timeout"] == "3"
    assert with_connect_timeout(url + "&connect_timeout=9").query["connect_timeout"] == "9"
