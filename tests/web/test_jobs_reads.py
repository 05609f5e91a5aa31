"""List / summary / detail / chain / bundle / failure clusters (SPEC L-OPS-1, L-API)."""

from __future__ import annotations

import json

from sqlalchemy import text

from tests.web.conftest import PREFIX, mutate


def test_list_filters_and_newest_first(client, monitor, make_job):
    a = make_job("dead", type="webhook_delivery", last_error="HTTP 503 from receiver", age=30)
    b = make_job("failed", type="delay_wake", instance_id="a" * 32, age=20)
    c = make_job("pending", payload={"order": "ORD-77"}, trace_id="tr-x", age=10)

    def ids(qs: str) -> list[str]:
        r = client.get(f"{PREFIX}/jobs{qs}", headers=monitor)
        assert r.status_code == 200, r.json
        return [j["id"] for j in r.json["data"]["items"]]

    assert ids("") == [str(c), str(b), str(a)]
    assert ids("?status=dead,failed") == [str(b), str(a)]
    assert ids("?type=webhook_delivery") == [str(a)]
    assert ids(f"?instance_id={'a' * 32}") == [str(b)]
    assert ids("?trace_id=tr-x") == [str(c)]
    # error text ("503" alone can also occur in a random 32-hex operation key: one run in ~150 failed)
    assert ids("?keyword=HTTP%20503") == [str(a)]
    assert ids("?keyword=ORD-77") == [str(c)]  # payload text
    assert str(a) in ids(f"?keyword={a}")  # id (digits may also match hex operation keys)
    assert ids("?min_age_seconds=15") == [str(b), str(a)]
    assert ids("?max_age_seconds=15") == [str(c)]


def test_cursor_pagination_bound_to_filters(client, monitor, make_job):
    made = [make_job("dead", age=100 - i) for i in range(5)]
    r = client.get(f"{PREFIX}/jobs?limit=2&status=dead", headers=monitor).json["data"]
    seen = [j["id"] for j in r["items"]]
    while "next_cursor" in r:
        r = client.get(f"{PREFIX}/jobs?limit=2&status=dead&cursor={r['next_cursor']}", headers=monitor).json[
            "data"
        ]
        seen += [j["id"] for j in r["items"]]
    assert seen == [str(i) for i in reversed(made)]
    first = client.get(f"{PREFIX}/jobs?limit=2&status=dead", headers=monitor).json["data"]
    other = client.get(f"{PREFIX}/jobs?limit=2&status=failed&cursor={first['next_cursor']}", headers=monitor)
    assert other.status_code == 400 and other.json["errors"][0]["field"] == "cursor"
    for bad in ("0", "101", "x"):
        assert client.get(f"{PREFIX}/jobs?limit={bad}", headers=monitor).status_code == 400


def test_summary_counts_by_type_and_status(client, monitor, make_job):
    make_job("dead", type="webhook_delivery")
    make_job("dead", type="webhook_delivery")
    make_job("pending", type="delay_wake")
    data = client.get(f"{PREFIX}/jobs/summary", headers=monitor).json["data"]
    assert data["by_type"] == {"delay_wake": {"pending": 1}, "webhook_delivery": {"dead": 2}}
    assert data["total"] == 3


def test_detail_has_every_attempt_of_every_generation_receipts_and_marker(client, monitor, make_job, clean):
    job_id = make_job("dead", generation=2, marker={"url": "https://x", "sent_at": "t"})
    with clean.begin() as conn:
        for gen, att, st in [(1, 1, "failed"), (1, 2, "failed"), (2, 1, "failed")]:
            conn.execute(
                text(
                    "INSERT INTO workflow_job_executions (job_id, generation, attempt, status, lease_token,"
                    " due_at,"
                    " error) VALUES (:j, :g, :a, :s, gen_random_uuid(), now(), 'boom')"
                ),
                {"j": job_id, "g": gen, "a": att, "s": st},
            )
        op = conn.execute(
            text("SELECT operation_key FROM workflow_jobs WHERE id = :i"), {"i": job_id}
        ).scalar()
        conn.execute(
            text(
                "INSERT INTO workflow_job_effects (operation_key, step_key, job_id, generation, result)"
                " VALUES (:o, 'write-back', :j, 1, '{\"ok\": true}')"
            ),
            {"o": op, "j": job_id},
        )
    data = client.get(f"{PREFIX}/jobs/{job_id}", headers=monitor).json["data"]
    assert [(a["generation"], a["attempt"]) for a in data["attempts_history"]] == [(1, 1), (1, 2), (2, 1)]
    assert data["receipts"][0]["step_key"] == "write-back" and data["receipts"][0]["result"] == {"ok": True}
    assert data["effect_marker"] == {"url": "https://x", "sent_at": "t"} and data["has_effect_marker"] is True
    assert client.get(f"{PREFIX}/jobs/999999", headers=monitor).status_code == 404


def test_chain_and_diagnostic_bundle(client, monitor, make_job):
    first = make_job("succeeded", trace_id="tr-chain", instance_id="1" * 32, age=20)
    second = make_job("dead", trace_id="tr-chain", instance_id="2" * 32, age=10, last_error="boom")
    make_job("dead", trace_id="other")
    chain = client.get(f"{PREFIX}/jobs/chain/tr-chain", headers=monitor).json["data"]
    assert [j["id"] for j in chain["jobs"]] == [str(first), str(second)]
    assert chain["instance_ids"] == ["1" * 32, "2" * 32]
    r = client.get(f"{PREFIX}/jobs/chain/tr-chain/diagnostic-bundle", headers=monitor)
    assert r.status_code == 200
    assert r.headers["Content-Disposition"].startswith("attachment; filename=")
    bundle = json.loads(r.data)
    assert bundle["trace_id"] == "tr-chain" and len(bundle["jobs"]) == 2
    assert "attempts_history" in bundle["jobs"][0] and "runtime_status" in bundle
    assert bundle["status_counts"] == {"succeeded": 1, "dead": 1}
    assert client.get(f"{PREFIX}/jobs/chain/none", headers=monitor).status_code == 404


def test_failure_clusters_fold_variable_parts_and_replay_selects_cluster(client, operator, make_job, clean):
    errs = [
        "POST https://hooks-1.example.com/x failed: 503 after 1200 ms (req 9f1c2d3e4f5a6b7c)",
        "POST https://hooks-2.example.org/x failed: 503 after 87 ms (req 0a0b0c0d0e0f1a2b)",
        "POST https://10.1.2.3:8443/x failed: 502 after 5 ms (req 1234abcd5678ef90)",
    ]
    members = [
        make_job("dead", type="webhook_delivery", last_error=e, trace_id=f"t{i}") for i, e in enumerate(errs)
    ]
    make_job("failed", type="webhook_delivery", last_error="subscription 'abc' disabled")
    make_job("failed", type="webhook_delivery", last_error="subscription 'xyz' disabled")
    make_job("dead", type="delay_wake", last_error="instance 3f2b8c1e-0000-4000-8000-000000000001 not found")
    data = client.get(f"{PREFIX}/jobs/failure-clusters", headers=operator).json["data"]
    clusters = data["clusters"]
    assert [c["count"] for c in clusters] == [3, 2, 1]
    top = clusters[0]
    assert top["reason"] == "POST https://<host>/x failed: <n> after <n> ms (req <id>)"
    assert top["type"] == "webhook_delivery" and top["dead"] == 3
    assert top["first_seen"] <= top["last_seen"] and len(top["sample_errors"]) == 3
    assert clusters[2]["reason"] == "instance <id> not found"
    by_trace = client.get(f"{PREFIX}/jobs/failure-clusters?group_by=reason,trace", headers=operator).json[
        "data"
    ]
    assert by_trace["group_by"] == ["reason", "trace"] and by_trace["cluster_count"] == 5
    # the cluster's replay conditions select exactly its members
    conditions = top["replay_conditions"]
    preview = client.post(f"{PREFIX}/jobs/replay-preview", headers=operator, json=conditions).json["data"]
    assert preview["count"] == 3
    r = mutate(client, "/jobs/replay-dead", operator, conditions)
    assert sorted(r.json["data"]["submitted_ids"]) == sorted(str(m) for m in members)
