"""The ledger's reads with ``status`` / ``type`` / ``queue`` as enum types (migration 0016): what a
text column did implicitly (sort by name, match nothing for an unknown value, mix with text) still
holds."""

from __future__ import annotations

from app.db import transaction
from app.ledger import job_reads, replay
from tests.ledger_helpers import OUTBOUND, add_job, claim_one, settle, settlement


def _jobs(db) -> dict[str, int]:
    """A succeeded timer, a dead webhook delivery, a pending event dispatch, a running timer, a
    pending task timeout and a pending webhook delivery."""
    done = add_job(db, "delay_wake", {})
    settle(db, [settlement(claim_one(db), "succeeded")])
    dead = add_job(db, "webhook_delivery", {})
    settle(db, [settlement(claim_one(db, OUTBOUND), "dead", error="receiver said no")])
    pending = add_job(db, "event_dispatch", {})
    running = add_job(db, "delay_wake", {})
    assert claim_one(db, worker_id="w-open")["id"] == running
    add_job(db, "task_timeout", {})  # declared before event_dispatch in the type enum
    add_job(db, "webhook_delivery", {})  # pending: declared before dead in the status enum
    return {"done": done, "dead": dead, "pending": pending, "running": running}


def test_the_summary_is_sorted_by_name_not_by_the_enums_order(db):
    _jobs(db)
    with transaction(db) as conn:
        items = job_reads.summary(conn)["items"]
    assert [(i["type"], i["status"]) for i in items] == [
        ("delay_wake", "running"),
        ("delay_wake", "succeeded"),
        ("event_dispatch", "pending"),
        ("task_timeout", "pending"),
        ("webhook_delivery", "dead"),
        ("webhook_delivery", "pending"),
    ]  # in the enums' order task_timeout would come first of the pending ones, pending before dead


def test_an_unknown_type_or_status_in_a_filter_matches_nothing_instead_of_failing(db):
    ids = _jobs(db)
    with transaction(db) as conn:
        assert job_reads.list_jobs(conn, job_reads.JobFilter(types=("no_such_type",))).items == []
        assert job_reads.list_jobs(conn, job_reads.JobFilter(statuses=("no_such_status",))).items == []
        mixed = job_reads.list_jobs(conn, job_reads.JobFilter(statuses=("dead", "no_such_status")))
        assert [j["id"] for j in mixed.items] == [str(ids["dead"])]
        assert replay.preview(conn, replay.ReplayFilter(types=("no_such_type",)))["count"] == 0
        assert replay.preview(conn, replay.ReplayFilter(types=("webhook_delivery",)))["count"] == 1
        clusters = replay.failure_clusters(conn, types=("webhook_delivery", "no_such_type"))
    assert [(c["type"], c["count"]) for c in clusters["clusters"]] == [("webhook_delivery", 1)]


def test_a_running_jobs_open_attempt_is_listed_with_its_final_ones(db):
    """The job detail reads the final attempts (enum status) and the open attempt on the job row
    (a literal ``'running'``) in one UNION."""
    ids = _jobs(db)
    with transaction(db) as conn:
        running = job_reads.job_detail(conn, ids["running"])["attempts_history"]
        done = job_reads.job_detail(conn, ids["done"])["attempts_history"]
    assert [(a["status"], a["worker_id"]) for a in running] == [("running", "w-open")]
    assert [a["status"] for a in done] == ["succeeded"]
