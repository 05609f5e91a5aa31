"""Schedules against real PostgreSQL (X-SCHED): validation naming the field, the tick (coalescing,
exactly one job per fire time, also with concurrent ticks), the launch (schedule id + fire time on
the instance, overlap policies, quota refusals recorded as skipped fires), pause / resume, audit."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import text

from app.auth import Principal
from app.db import transaction
from app.errors import InvalidArgument
from app.ids import new_id
from app.integrations import schedule_fires, schedule_jobs, schedules
from app.ledger import handlers
from tests.engine.helpers import author, publish, run_jobs

NS = "ns-" + new_id()[:8]
DOC = {
    "version": "v1",
    "input_schema": {"type": "object", "required": ["region"]},
    "deadline_seconds": 3600,
    "steps": [{"key": "work", "kind": "TASK", "queue": "sched-q", "input": {"r": "$.input.region"}}],
}


def principal(ns: str = NS) -> Principal:
    return author(ns)


@pytest.fixture
def sched(eng):
    handlers.register("schedule_launch", schedule_jobs.schedule_launch, replace=True)
    with eng.begin() as conn:
        conn.execute(text("TRUNCATE workflow_schedules, workflow_schedule_fires, operation_audit CASCADE"))
    return eng


def create(eng, def_id: str, **kw) -> dict:
    body = {
        "name": "s-" + new_id()[:8],
        "definition_id": def_id,
        "version": "v1",
        "input": {"region": "eu"},
        "interval_seconds": 60,
        **kw,
    }
    with transaction(eng) as conn:
        return schedules.create_schedule(conn, principal(), body)


def backdate(eng, sid: str, seconds: float) -> None:
    """Time travel: the schedule's anchor and next fire time move ``seconds`` into the past."""
    with eng.begin() as conn:
        conn.execute(
            text(
                "UPDATE workflow_schedules SET anchor_at = anchor_at - make_interval(secs => :s), "
                "next_fire_at = next_fire_at - make_interval(secs => :s) WHERE id = :id"
            ),
            {"id": sid, "s": seconds},
        )


def tick(eng) -> list:
    with transaction(eng) as conn:
        return schedules.tick(conn)


def fires(eng, sid: str) -> list:
    with eng.connect() as conn:
        return conn.execute(
            text(
                "SELECT f.*, i.schedule_id AS i_sched, i.schedule_fire_at AS i_fire FROM workflow_schedule_fires f "
                "LEFT JOIN workflow_instances i ON i.id = f.instance_id WHERE f.schedule_id = :s ORDER BY f.created_at"
            ),
            {"s": sid},
        ).all()


def test_create_validates_and_names_the_field(sched) -> None:
    def_id = publish(sched, NS, DOC)
    cases = [
        ({"cron": "61 * * * *", "interval_seconds": None}, "cron"),
        ({"cron": "@sometimes", "interval_seconds": None}, "cron"),
        ({"cron": "0 8 * * *", "timezone": "Mars/Base", "interval_seconds": None}, "timezone"),
        ({"definition_id": new_id()}, "definition_id"),
        ({"version": "v9"}, "version"),
        ({"input": {"nope": 1}}, "input"),
        ({"input": [1], "fire_time_field": "at"}, "fire_time_field"),
    ]
    for changes, field in cases:
        with pytest.raises(InvalidArgument) as err:
            create(sched, def_id, **changes)
        assert any(field in e.field for e in err.value.field_errors), (changes, err.value.field_errors)
    view = create(sched, def_id, cron="30 2 * * *", timezone="Europe/Berlin", interval_seconds=None)
    assert view["cron"] == "30 2 * * *" and len(view["next_fire_times"]) == 5
    assert view["next_fire_times"][0] == view["next_fire_at"]


def test_tick_coalesces_missed_periods_into_one_launch(sched) -> None:
    def_id = publish(sched, NS, DOC)
    s = create(sched, def_id, fire_time_field="fired_at")
    assert tick(sched) == []  # nothing due yet
    backdate(sched, s["id"], 60 * 5 + 30)  # five fire times are due now
    handed = tick(sched)
    assert len(handed) == 1 and handed[0]["skipped"] == 4
    assert tick(sched) == []  # next_fire_at moved past now: nothing is handed out twice
    assert run_jobs(sched, queue="workflow-ledger") == [("schedule_launch", "succeeded")]
    [f] = fires(sched, s["id"])
    assert (f.status, f.kind, f.skipped_count) == ("LAUNCHED", "SCHEDULED", 4)
    assert f.i_sched == s["id"] and f.i_fire == f.fire_at
    with sched.connect() as conn:
        inp = conn.execute(
            text("SELECT input FROM workflow_instances WHERE id = :i"), {"i": f.instance_id}
        ).scalar()
        actions = conn.execute(
            text("SELECT action, after FROM operation_audit WHERE target_id = :s ORDER BY created_at"),
            {"s": s["id"]},
        ).all()
    assert inp["region"] == "eu" and inp["fired_at"].startswith(f.fire_at.strftime("%Y-%m-%dT%H:%M"))
    assert [a.action for a in actions] == ["schedule.create", "schedule.fire"]
    assert actions[1].after["skipped_missed"] == 4 and actions[1].after["status"] == "LAUNCHED"
    # the instance's own audit: its start (by the engine, an entry of its start's event batch, not an
    # operation_audit row) first, then the schedule's fire, then its first activation
    with sched.connect() as conn:
        ops = conn.execute(
            text(
                "SELECT action, actor_id, actor_name, batch_id IS NOT NULL AS in_batch, after "
                "FROM workflow_operations WHERE workflow_id = :i ORDER BY created_at, id"
            ),
            {"i": f.instance_id},
        ).all()
    assert [o.action for o in ops][:2] == ["workflow.start", "schedule.fire"]
    start = ops[0]
    assert (start.actor_id, start.actor_name, start.in_batch) == ("system:engine", "ledgerflow engine", True)
    assert start.after["id"] == f.instance_id and start.after["schedule_id"] == s["id"]


def test_one_fire_time_starts_one_instance_even_when_handed_out_twice(sched) -> None:
    def_id = publish(sched, NS, DOC)
    s = create(sched, def_id, overlap="allow")
    backdate(sched, s["id"], 61)
    # many concurrent ticks: SKIP LOCKED + the guarded move of next_fire_at -> exactly one job
    results: list = []
    barrier = threading.Barrier(4)

    def run() -> None:
        barrier.wait()
        results.extend(tick(sched))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 1
    # the same fire time handed out again (a replayed tick): the job's idempotency key dedups it ...
    with transaction(sched) as conn:
        s_row = schedules.read_schedule(conn, NS, s["id"])
        again = schedules._enqueue_launch(conn, s_row, results[0]["fire_at"], "SCHEDULED", 0, False)
    assert not again.created
    # ... and even a second job for it (different key) starts nothing: the fire row is unique
    with transaction(sched) as conn:
        conn.execute(
            text(
                "UPDATE workflow_jobs SET idempotency_key = 'x', operation_key = 'x' WHERE type = 'schedule_launch'"
            )
        )
        schedules._enqueue_launch(conn, s_row, results[0]["fire_at"], "SCHEDULED", 0, False)
    outcomes = run_jobs(sched, queue="workflow-ledger")
    assert sorted(o for _, o in outcomes) == ["skipped", "succeeded"]
    assert len(fires(sched, s["id"])) == 1
    with sched.connect() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM workflow_instances WHERE schedule_id = :s"), {"s": s["id"]}
        )
        assert n.scalar() == 1


def _fire_once(eng, sid: str) -> None:
    # 61 s: every call lands on a different absolute fire time (60 s would repeat the previous one)
    backdate(eng, sid, 61)
    assert len(tick(eng)) == 1
    run_jobs(eng, queue="workflow-ledger")


def test_overlap_policies(sched) -> None:
    def_id = publish(sched, NS, DOC)
    skip = create(sched, def_id)  # default: skip
    _fire_once(sched, skip["id"])
    _fire_once(sched, skip["id"])
    assert [(f.status, (f.reason or "")[:7]) for f in fires(sched, skip["id"])] == [
        ("LAUNCHED", ""),
        ("SKIPPED", "OVERLAP"),
    ]
    allow = create(sched, def_id, overlap="allow")
    _fire_once(sched, allow["id"])
    _fire_once(sched, allow["id"])
    assert [f.status for f in fires(sched, allow["id"])] == ["LAUNCHED", "LAUNCHED"]
    cancel = create(sched, def_id, overlap="cancel_previous")
    _fire_once(sched, cancel["id"])
    _fire_once(sched, cancel["id"])
    first, second = fires(sched, cancel["id"])
    assert first.status == second.status == "LAUNCHED"
    with sched.connect() as conn:
        states = dict(
            conn.execute(
                text("SELECT id, state FROM workflow_instances WHERE schedule_id = :s"), {"s": cancel["id"]}
            ).all()
        )
    assert states[first.instance_id] == "CANCELLED" and states[second.instance_id] == "RUNNING"


def test_quota_refusal_is_a_skipped_fire_with_the_reason(sched, monkeypatch) -> None:
    def_id = publish(sched, NS, DOC)
    s = create(sched, def_id, overlap="allow")
    monkeypatch.setenv("LEDGERFLOW_QUEUE_PENDING_LIMIT", "0")  # every queue is full
    _fire_once(sched, s["id"])
    [f] = fires(sched, s["id"])
    assert f.status == "SKIPPED" and f.reason.startswith("QUEUE_FULL") and f.instance_id is None
    # settled, not retried: the job succeeded with the skipped fire as its result
    with sched.connect() as conn:
        assert conn.execute(
            text("SELECT status FROM workflow_jobs WHERE type = 'schedule_launch'")
        ).scalar() == ("succeeded")


def test_pause_resume_coalesces_and_says_how_many_were_missed(sched) -> None:
    def_id = publish(sched, NS, DOC)
    s = create(sched, def_id)
    with transaction(sched) as conn:
        schedules.set_paused(conn, principal(), s["id"], True)
    backdate(sched, s["id"], 60 * 3 + 10)
    assert tick(sched) == []  # paused: nothing fires
    with transaction(sched) as conn:
        out = schedules.set_paused(conn, principal(), s["id"], False)
    assert out["missed"]["fire_times"] == 3 and out["missed"]["skipped"] == 2
    assert _launch_payloads(sched, s["id"]) == [
        (out["missed"]["coalesced_into"], 2)
    ]  # launched by the resume
    assert tick(sched) == []
    # launch now works whatever the overlap policy says
    with transaction(sched) as conn:
        launched = schedules.launch_now(conn, principal(), s["id"])
    run_jobs(sched, queue="workflow-ledger")
    statuses = [(f.kind, f.status) for f in fires(sched, s["id"])]
    assert statuses == [("SCHEDULED", "LAUNCHED"), ("MANUAL", "LAUNCHED")]
    assert launched["job_id"]


def _launch_payloads(eng, sid: str) -> list[tuple[str, int]]:
    with eng.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT payload FROM workflow_jobs WHERE type = 'schedule_launch' AND payload->>'schedule_id' = :s "
                "ORDER BY id"
            ),
            {"s": sid},
        ).scalars()
        return [(p["fire_at"], p["skipped"]) for p in rows]


def test_resuming_just_before_a_fire_time_launches_the_fire_time_it_names(sched) -> None:
    """resumed about a second before a fire time, the answer named a missed fire time that
    never launched: the next tick, after that fire time, folded it in and launched the later one."""
    def_id = publish(sched, NS, DOC)
    s = create(sched, def_id)
    with transaction(sched) as conn:
        schedules.set_paused(conn, principal(), s["id"], True)
    backdate(sched, s["id"], 60 * 3 - 1)  # fire times 119 s and 59 s ago were missed; the next is in 1 s
    with transaction(sched) as conn:
        missed = schedules.set_paused(conn, principal(), s["id"], False)["missed"]
    assert missed["fire_times"] == 2
    backdate(sched, s["id"], 2)  # the tick runs after the next fire time
    tick(sched)
    launched = [fire_at for fire_at, _ in _launch_payloads(sched, s["id"])]
    assert launched[0] == missed["coalesced_into"]
    assert len(launched) == 2 and launched[1] > launched[0]  # the next fire time launches on its own


def test_update_rule_restarts_counting_and_delete_skips_queued_launches(sched) -> None:
    def_id = publish(sched, NS, DOC)
    s = create(sched, def_id)
    with transaction(sched) as conn:
        view = schedules.update_schedule(
            conn, principal(), s["id"], {"cron": "@hourly", "timezone": "Europe/Berlin"}
        )
    assert view["cron"] == "0 * * * *" and "interval_seconds" not in view and view["revision"] == "2"
    nxt = view["next_fire_times"]
    assert all(b - a == timedelta(hours=1) for a, b in zip(*(map(_t, (nxt[:-1], nxt[1:]))), strict=True))
    with transaction(sched) as conn:
        schedules.launch_now(conn, principal(), s["id"])
        schedules.delete_schedule(conn, principal(), s["id"])
    assert run_jobs(sched, queue="workflow-ledger") == [("schedule_launch", "skipped")]


def _t(values: list[str]) -> list:
    from datetime import datetime

    return [datetime.fromisoformat(v.replace("Z", "+00:00")) for v in values]


def test_cli_schedules_commands(sched) -> None:
    import json

    from click.testing import CliRunner

    from app.auth import Scope, create_credential, ensure_namespace
    from ledgerflow.cli import main

    ns = "cli-" + new_id()[:8]
    with transaction(sched) as conn:
        ns_id = ensure_namespace(conn, ns)
    def_id = publish(sched, ns_id, DOC)
    with transaction(sched) as conn:
        token = create_credential(
            conn,
            namespace=ns,
            name="op",
            scopes=[Scope.WORKFLOWS_READ, Scope.WORKFLOWS_START, Scope.TASKS_SUBMIT],
        ).token
    env = {"LEDGERFLOW_TOKEN": token}
    run = CliRunner().invoke
    bad = run(
        main,
        [
            "schedules",
            "create",
            "--name",
            "x",
            "--definition-id",
            def_id,
            "--version",
            "v1",
            "--input",
            '{"region": "eu"}',
            "--cron",
            "0 8 * * *",
            "--timezone",
            "Nowhere/X",
        ],
        env=env,
    )
    assert bad.exit_code == 2 and "timezone" in bad.output  # an invalid argument: 2
    out = run(
        main,
        [
            "schedules",
            "create",
            "--json",
            "--name",
            "nightly",
            "--definition-id",
            def_id,
            "--version",
            "v1",
            "--input",
            '{"region": "eu"}',
            "--cron",
            "@daily",
            "--timezone",
            "Europe/Berlin",
        ],
        env=env,
    )
    assert out.exit_code == 0, out.output
    sid = json.loads(out.output)["id"]
    shown = run(main, ["schedules", "show", sid], env=env)
    assert shown.exit_code == 0 and "0 0 * * *" in shown.output and "Europe/Berlin" in shown.output
    assert run(main, ["schedules", "pause", sid], env=env).exit_code == 0
    resumed = run(main, ["schedules", "resume", "--json", sid], env=env)
    assert json.loads(resumed.output)["schedule"]["paused"] is False
    assert "launch queued" in run(main, ["schedules", "launch", sid], env=env).output
    run_jobs(sched, queue="workflow-ledger")
    fires_out = json.loads(run(main, ["schedules", "fires", "--json", sid], env=env).output)
    assert [f["kind"] for f in fires_out["items"]] == ["MANUAL"] and fires_out["items"][0][
        "status"
    ] == "LAUNCHED"
    listed = run(main, ["schedules", "list"], env=env)
    assert "nightly" in listed.output
    assert run(main, ["schedules", "delete", "-y", sid], env=env).exit_code == 0


def test_fire_history_is_bounded(sched, monkeypatch) -> None:
    monkeypatch.setattr(schedule_fires, "FIRES_KEPT", 2)
    def_id = publish(sched, NS, DOC)
    s = create(sched, def_id, overlap="allow")
    for _ in range(4):
        _fire_once(sched, s["id"])
    kept = fires(sched, s["id"])
    assert len(kept) == 2 and all(f.status == "LAUNCHED" for f in kept)
    with sched.connect() as conn:
        n = conn.execute(
            text("SELECT count(*) FROM workflow_instances WHERE schedule_id = :s"), {"s": s["id"]}
        )
        assert n.scalar() == 4
