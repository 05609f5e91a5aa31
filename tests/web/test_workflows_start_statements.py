"""A workflow start in steady state costs at most 10 SQL statements, authentication included:
counted as the psycopg cursor executions they are (transaction control aside). The new instance's watch
is inserted with the start's other inserts, not looked up first (``jobs_and_tasks.watch_absent``)."""

from __future__ import annotations

import uuid

import psycopg
from sqlalchemy import text

from tests.engine.helpers import publish

DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [
        {"key": "a", "kind": "TASK", "queue": "st.q"},
        {"key": "b", "kind": "TASK", "queue": "st.q", "after": ["a"]},
    ],
}


def test_a_start_is_at_most_ten_statements(client, token, clean, monkeypatch):
    bearer = token("workflows:start", "workflows:read", "tasks:submit", namespace="stmts")
    from app.auth import ensure_namespace
    from app.db import transaction

    with transaction(clean) as conn:
        ns = ensure_namespace(conn, "stmts")
    def_id = publish(clean, ns, DOC)
    body = {"definition_id": def_id, "version": "v1", "input": {}}

    def start() -> str:
        h = {"Authorization": f"Bearer {bearer}", "Idempotency-Key": uuid.uuid4().hex}
        r = client.post("/v1/workflows", json=body, headers=h)
        assert r.status_code == 201, r.get_data(as_text=True)
        return r.get_json()["data"]["instance"]["id"]

    start()  # the pinned version is cached from now on
    sent: list[str] = []
    execute = psycopg.Cursor.execute

    def counted(self, query, *args, **kwargs):
        sent.append(str(query)[:80])
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", counted)
    iid = start()
    monkeypatch.undo()
    sent = [
        s for s in sent if s.strip() != ";"
    ]  # a pooled connection's ping after 2 s idle (app.db), not the start's
    assert len(sent) <= 10, sent
    assert not [q for q in sent if "WITH cur AS" in q], sent  # the arm's lookup of an existing watch
    with clean.connect() as conn:
        watches = conn.execute(
            text("SELECT count(*) FROM workflow_jobs WHERE instance_id = :i AND type = 'task_timeout'"),
            {"i": iid},
        ).scalar()
    assert watches == 1
