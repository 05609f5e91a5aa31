"""Strict parsing, one error shape, idempotency and request ids (SPEC W-API-2, W-ERR)."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from sqlalchemy import text

from app import jsonx
from tests.web.conftest import PREFIX, mutate

PROBLEM_KEYS = {"type", "title", "status", "code", "message", "request_id", "errors"}


def _post(client, path, headers, raw: bytes | str, *, key="k-1", content_type="application/json"):
    return client.post(
        PREFIX + path, data=raw, content_type=content_type, headers={**headers, "Idempotency-Key": key}
    )


def _assert_problem(r, status: int, code: str, field: str | None = None) -> None:
    assert r.status_code == status, r.data
    assert r.mimetype == "application/problem+json"
    body = r.json
    assert set(body) == PROBLEM_KEYS and body["code"] == code and body["status"] == status
    assert body["request_id"] == r.headers["X-Request-Id"]
    if field is not None:
        assert field in [e["field"] for e in body["errors"]], body


def test_duplicate_key_case_alias_unknown_field(client, operator, make_job):
    job_id = make_job("dead")
    _assert_problem(
        _post(client, f"/jobs/{job_id}/skip", operator, '{"reason":"a","reason":"b"}'),
        400,
        "INVALID_ARGUMENT",
        "reason",
    )
    r = _post(client, f"/jobs/{job_id}/skip", operator, '{"Reason":"a"}')
    _assert_problem(r, 400, "INVALID_ARGUMENT", "Reason")
    assert "case-variant" in r.json["errors"][0]["message"]
    _assert_problem(
        _post(client, f"/jobs/{job_id}/skip", operator, '{"why":"a"}'), 400, "INVALID_ARGUMENT", "why"
    )
    _assert_problem(
        _post(client, "/jobs/replay-dead", operator, '{"types":["dead_letter"]}'), 400, "INVALID_ARGUMENT"
    )
    _assert_problem(
        _post(client, "/jobs/batch-skip", operator, '{"job_ids":["1"],"Job_Ids":["2"]}'),
        400,
        "INVALID_ARGUMENT",
        "Job_Ids",
    )
    _assert_problem(_post(client, "/jobs/batch-skip", operator, "[1]"), 400, "INVALID_ARGUMENT", "body")
    _assert_problem(_post(client, "/jobs/batch-skip", operator, "{bad"), 400, "INVALID_ARGUMENT", "body")
    _assert_problem(
        _post(client, "/jobs/batch-skip", operator, '{"job_ids":["1"],"reason":NaN}'), 400, "INVALID_ARGUMENT"
    )


def test_unknown_and_repeated_query_params(client, monitor):
    _assert_problem(client.get(f"{PREFIX}/jobs?color=red", headers=monitor), 400, "INVALID_ARGUMENT", "color")
    _assert_problem(
        client.get(f"{PREFIX}/jobs?Status=dead", headers=monitor), 400, "INVALID_ARGUMENT", "Status"
    )
    _assert_problem(
        client.get(f"{PREFIX}/jobs?limit=1&limit=2", headers=monitor), 400, "INVALID_ARGUMENT", "limit"
    )
    _assert_problem(client.get(f"{PREFIX}/jobs/summary?x=1", headers=monitor), 400, "INVALID_ARGUMENT", "x")


def test_media_type_and_size(client, operator):
    _assert_problem(
        _post(client, "/jobs/batch-skip", operator, "{}", content_type="text/plain"),
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    )
    big = '{"reason": "' + "x" * (512 * 1024) + '"}'
    _assert_problem(_post(client, "/jobs/batch-skip", operator, big), 413, "BODY_TOO_LARGE")


def test_unknown_route_and_method(client, monitor):
    _assert_problem(client.get("/nowhere", headers=monitor), 404, "NOT_FOUND")
    _assert_problem(client.get(f"{PREFIX}/nothing/here", headers=monitor), 404, "NOT_FOUND")
    r = client.delete(f"{PREFIX}/jobs/summary", headers=monitor)
    assert r.status_code == 405 and r.mimetype == "application/problem+json" and "GET" in r.headers["Allow"]


def test_idempotency_key_required_and_validated(client, operator, make_job):
    job_id = make_job("dead")
    r = client.post(f"{PREFIX}/jobs/{job_id}/skip", json={}, headers=operator)
    _assert_problem(r, 400, "INVALID_ARGUMENT", "Idempotency-Key")
    for bad in ("x" * 129, "has space", "ü"):
        r = client.post(f"{PREFIX}/jobs/{job_id}/skip", json={}, headers={**operator, "Idempotency-Key": bad})
        assert r.status_code == 400


def test_idempotent_replay_and_conflict(client, operator, make_job, clean):
    job_id = make_job("dead")
    first = mutate(client, f"/jobs/{job_id}/retry", operator, {"reason": "r"}, key="same")
    again = mutate(client, f"/jobs/{job_id}/retry", operator, {"reason": "r"}, key="same")
    assert first.status_code == again.status_code == 200
    assert again.data == first.data and again.headers["Idempotent-Replayed"] == "true"
    conflict = mutate(client, f"/jobs/{job_id}/retry", operator, {"reason": "other"}, key="same")
    _assert_problem(conflict, 409, "IDEMPOTENCY_CONFLICT")
    with clean.connect() as conn:
        assert (
            conn.execute(text("SELECT generation FROM workflow_jobs WHERE id = :i"), {"i": job_id}).scalar()
            == 2
        )
        assert conn.execute(text("SELECT count(*) FROM operation_audit")).scalar() == 1


def test_concurrent_duplicates_apply_once(app, operator, make_job, clean):
    ids = [str(make_job("dead")) for _ in range(30)]
    results: list[int] = []

    def call() -> None:
        c = app.test_client()
        r = mutate(c, "/jobs/batch-retry", operator, {"job_ids": ids}, key="race")
        results.append(r.status_code)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 4
    with clean.connect() as conn:
        assert conn.execute(text("SELECT max(generation) FROM workflow_jobs")).scalar() == 2
        assert conn.execute(text("SELECT count(*) FROM idempotency_receipts")).scalar() == 1


def test_exact_numbers_round_trip():
    doc = jsonx.loads('{"big": 9007199254740993, "dec": 0.1000, "neg": -1e400}')
    assert doc["big"] == 9007199254740993 and isinstance(doc["dec"], Decimal)
    assert jsonx.dumps(doc) == '{"big":9007199254740993,"dec":0.1000,"neg":-1E+400}'
    with pytest.raises(jsonx.DuplicateKey):
        jsonx.loads('{"a": {"b": 1, "b": 2}}')


def test_database_unreachable_is_503_without_internals(app, monitor, monkeypatch):
    from sqlalchemy import create_engine

    import web.auth

    dead = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none", connect_args={"connect_timeout": 1})
    monkeypatch.setattr(web.auth, "get_engine", lambda: dead)
    r = app.test_client().get(f"{PREFIX}/jobs/summary", headers=monitor)
    _assert_problem(r, 503, "UNAVAILABLE")
    assert r.headers["Retry-After"]
    assert b"psycopg" not in r.data and b"127.0.0.1" not in r.data and b"Traceback" not in r.data


def test_unexpected_error_is_500_problem_without_trace(app, monitor, monkeypatch):
    import app.ledger.job_reads as ops

    def boom(conn):
        raise RuntimeError("secret internal detail")

    monkeypatch.setattr(ops, "summary", boom)
    app.config["PROPAGATE_EXCEPTIONS"] = False
    try:
        r = app.test_client().get(f"{PREFIX}/jobs/summary", headers=monitor)
    finally:
        app.config["PROPAGATE_EXCEPTIONS"] = None
    _assert_problem(r, 500, "INTERNAL")
    assert b"secret" not in r.data


def test_request_id_echoed(client):
    r = client.get("/healthz")
    assert r.headers["X-Request-Id"].startswith("req_")
