"""A web process keeps the principal of a token it authenticated (``app.principal_cache.PrincipalCache``) while its
LISTEN connection (``web.listener``) hears every credential change: a known token's request reads no
credential row; a revocation reaches it at commit however it is made; an expiring credential, or a
process that hears nothing, reads every time. Real PostgreSQL, the app in this process."""

from __future__ import annotations

import os
import time

import psycopg
import pytest
from sqlalchemy import make_url, text

from app.auth import Scope, create_credential, hash_token, principals, revoke_credential
from app.db import transaction
from app.principal_cache import CACHE_SECONDS
from app.settings import get_settings
from tests.engine.helpers import statements_seen
from tests.ledger_helpers import credential_change_heard, wait_for
from tests.web.conftest import PREFIX

SUMMARY = f"{PREFIX}/jobs/summary"


def _url() -> str:
    return get_settings().database_url


@pytest.fixture
def heard(client):
    """The test client, once this process's LISTEN connection hears credential changes."""
    client.get(SUMMARY, headers={"Authorization": "Bearer lf_unknown"})  # 401; starts the listener
    wait_for(lambda: principals.hears(_url()))
    return client


def _issue(engine, name: str = "op", **kw) -> tuple[str, str]:
    with transaction(engine) as conn:
        c = create_credential(conn, namespace="ops", name=name, scopes=[Scope.ENGINE_MONITOR], **kw)
    return c.token, c.credential_id


def _credential_reads(client, token: str, engine, n: int = 3, during=None) -> list[int]:
    """The statuses of ``n`` requests of ``token``, and how many statements read ``credentials``
    (``during()`` runs after the first request of the first try).

    A try during which the process heard a credential change, or that lasted ``CACHE_SECONDS`` or more,
    emptied the cache for a reason of its own and is made again from an empty cache: the notification of
    the ``clean`` fixture's TRUNCATE (committed before the test, heard by a listener an earlier test
    started whenever its thread gets to it) emptied the cache between two requests on a loaded machine,
    and the token was read twice (``make test``, once)."""
    for attempt in range(5):
        generation, started = principals.generation(), time.monotonic()
        with statements_seen(engine) as seen:
            statuses = []
            for i in range(n):
                statuses.append(client.get(SUMMARY, headers={"Authorization": f"Bearer {token}"}).status_code)
                if i == 0 and attempt == 0 and during is not None:
                    during()
        if principals.generation() == generation and time.monotonic() - started < CACHE_SECONDS:
            break
        principals.changed()  # measured again, from an empty cache
    return statuses + [sum("FROM credentials" in s for s in seen)]


def test_a_known_token_is_read_once(heard, clean):
    token, _ = _issue(clean)
    assert _credential_reads(heard, token, clean) == [200, 200, 200, 1]


def test_a_change_heard_while_a_known_token_is_read_is_not_counted_as_a_second_read(heard, clean):
    """What made ``test_a_known_token_is_read_once`` fail under load, made to happen every time: a change
    to credentials (here a statement changing no row, which notifies as the fixture's TRUNCATE does)
    heard between the first and the second request."""
    token, _ = _issue(clean)

    def change() -> None:
        with credential_change_heard(), clean.begin() as conn:
            conn.execute(text("UPDATE namespaces SET name = name WHERE false"))

    assert _credential_reads(heard, token, clean, during=change) == [200, 200, 200, 1]


def test_a_revocation_in_plain_sql_reaches_the_cache_at_its_commit(heard, clean):
    token, cred = _issue(clean)
    assert _credential_reads(heard, token, clean) == [200, 200, 200, 1]  # kept
    with credential_change_heard(), clean.begin() as conn:
        conn.execute(text("UPDATE credentials SET revoked_at = now() WHERE id = :i"), {"i": cred})
    assert _credential_reads(heard, token, clean, 2) == [401, 401, 2]


def test_the_revoking_process_drops_what_it_kept_at_once(heard, clean):
    token, cred = _issue(clean)
    assert _credential_reads(heard, token, clean) == [200, 200, 200, 1]
    assert principals.get(_url(), hash_token(token)) is not None
    with transaction(clean) as conn:
        revoke_credential(conn, cred)
        # before its commit, so before any notification: this process emptied its cache as it revoked
        assert principals.get(_url(), hash_token(token)) is None
    assert heard.get(SUMMARY, headers={"Authorization": f"Bearer {token}"}).status_code == 401


def test_a_credential_that_expires_within_the_cache_seconds_is_read_every_time(heard, clean):
    token, _ = _issue(clean, expires_in_seconds=CACHE_SECONDS)
    assert _credential_reads(heard, token, clean) == [200, 200, 200, 3]
    lasting, _ = _issue(clean, name="lasting", expires_in_seconds=CACHE_SECONDS + 60)
    assert _credential_reads(heard, lasting, clean) == [200, 200, 200, 1]


def test_a_process_whose_listen_connection_is_lost_keeps_nothing_until_it_listens_again(heard, clean):
    token, _ = _issue(clean)
    assert _credential_reads(heard, token, clean) == [200, 200, 200, 1]
    with clean.connect() as conn:
        pid = conn.execute(
            text(
                "SELECT pid FROM pg_stat_activity WHERE application_name = :name AND query = 'LISTEN lf_credentials'"
            ),
            {"name": f"ledgerflow-listener-{os.getpid()}"},  # this process's (web.listener names it)
        ).scalar_one()
        conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
    wait_for(lambda: not principals.hears(_url()))  # the kept principal went with the connection
    assert principals.get(_url(), hash_token(token)) is None
    wait_for(lambda: principals.hears(_url()))  # made again a second later
    assert _credential_reads(heard, token, clean) == [200, 200, 200, 1]


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE credentials SET revoked_at = now() WHERE false",  # a statement, even one changing no row
        "DELETE FROM credentials WHERE false",
        "UPDATE namespaces SET name = name WHERE false",
        "DELETE FROM namespaces WHERE false",
    ],
)
def test_every_change_to_credentials_or_namespaces_notifies_at_commit(clean, change):
    conninfo = make_url(_url()).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(conninfo, autocommit=True) as listening:
        listening.execute("LISTEN lf_credentials")
        with clean.begin() as conn:
            conn.execute(text(change))
            assert not list(listening.notifies(timeout=0.2, stop_after=1))  # nothing before the commit
        assert [n.channel for n in listening.notifies(timeout=10, stop_after=1)] == ["lf_credentials"]
