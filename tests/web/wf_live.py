"""Live-server fixtures of the workflow API tests: the real WSGI app on a real port (werkzeug in a
thread) over the session's PostgreSQL, a fresh namespace + credentials per test, and SDK clients."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from ledgerflow.client import Client


@pytest.fixture(scope="session")
def wf_server() -> Iterator[str]:
    from werkzeug.serving import make_server

    from web import create_app

    server = make_server("127.0.0.1", 0, create_app(), threaded=True)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


AUTHOR_SCOPES = (
    "definitions:read",
    "definitions:publish",
    "workflows:read",
    "workflows:start",
    "tasks:submit",
)


def author_token(prefix: str, *extra: str) -> str:
    """A token of a fresh namespace (``<prefix>-<8 hex>``) that may publish, start and read workflows
    (and ``extra`` scopes): the credential a workflow author's shell holds."""
    from app.auth import create_credential
    from app.db import transaction

    with transaction() as conn:
        return create_credential(
            conn, namespace=f"{prefix}-{uuid.uuid4().hex[:8]}", name="me", scopes=[*AUTHOR_SCOPES, *extra]
        ).token


@dataclass
class Namespace:
    name: str
    url: str
    tokens: dict[str, str]

    def client(self, who: str = "all", **kw) -> Client:
        return Client(self.url, self.tokens[who], **kw)


def make_namespace(url: str) -> Namespace:
    from app.auth import Scope, create_credential
    from app.db import transaction

    name = "wf-" + uuid.uuid4().hex[:10]
    sets = {
        "all": [
            Scope.DEFINITIONS_READ,
            Scope.DEFINITIONS_PUBLISH,
            Scope.WORKFLOWS_READ,
            Scope.WORKFLOWS_START,
            Scope.TASKS_SUBMIT,
            Scope.TASKS_WORK,
        ],
        "start_only": [Scope.WORKFLOWS_START, Scope.WORKFLOWS_READ],
        "worker": [Scope.TASKS_WORK],
    }
    tokens = {}
    with transaction() as conn:
        for who, scopes in sets.items():
            tokens[who] = create_credential(conn, namespace=name, name=who, scopes=scopes).token
        tokens["worker_q1"] = create_credential(
            conn, namespace=name, name="worker-q1", scopes=[Scope.TASKS_WORK], queues=["q1"]
        ).token
    return Namespace(name, url, tokens)


@pytest.fixture
def wf_ns(wf_server: str) -> Namespace:
    return make_namespace(wf_server)


def waiting_long_polls(token: str) -> int:
    """How many long-poll claims of ``token``'s credential wait right now, as every web process counts
    them in Redis (web/long_poll.py): a test waits for this instead of sleeping and hoping."""
    import os

    import redis

    from app.auth import authenticate
    from app.db import get_engine
    from app.settings import get_settings

    with get_engine().connect() as conn:
        principal = authenticate(conn, token)
    key = f"{get_settings().redis_namespace}:longpoll:{principal.credential_id}"
    return int(redis.Redis.from_url(os.environ["REDIS_URL"]).get(key) or 0)
