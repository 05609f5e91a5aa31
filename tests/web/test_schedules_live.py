"""Schedules live (X-SCHED proof): the real ``ledgerflow scheduler`` and ``ledgerflow worker --pool
advance`` processes against a live API. An every-second schedule launches one instance per fire time
in a window with two schedulers racing (no fire time doubled, none lost); both schedulers killed for
10 s and one restarted -> ONE coalesced launch naming the skipped count; pause / resume / launch now;
``GET /v1/workflows?schedule_id=`` finds exactly the launched instances; the API's 400s name the field."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ledgerflow.client import InvalidArgument
from tests.conftest import ROOT
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import ENGINE_WORKER_ENV, ops, sql, until  # noqa: F401

DOC = {"steps": [{"key": "work", "kind": "TASK", "queue": "sched-live"}]}


@pytest.fixture
def spawn_scheduler(tmp_path: Path):
    started: list[subprocess.Popen] = []

    def _spawn() -> subprocess.Popen:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "LEDGERFLOW_SCHEDULE_TICK_SECONDS": "0.2",
            "LEDGERFLOW_DRAIN_INTERVAL_SECONDS": "600",
            "LOG_LEVEL": "INFO",
        }
        log = tmp_path / f"scheduler-{len(started)}.log"
        proc = subprocess.Popen(
            [sys.executable, "-m", "ledgerflow.cli", "scheduler"],
            env=env,
            stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        started.append(proc)
        until(lambda: "ready" in log.read_text(), timeout=30)
        return proc

    yield _spawn
    for p in started:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()


def _fires(sid: str) -> list:
    return sql(
        "SELECT fire_at, kind, status, skipped_count, instance_id FROM workflow_schedule_fires "
        "WHERE schedule_id = :s ORDER BY fire_at",
        s=sid,
    )


def _check_no_double(sid: str) -> None:
    jobs = sql(
        "SELECT payload->>'fire_at' AS f, count(*) AS n FROM workflow_jobs WHERE type = 'schedule_launch' "
        "AND payload->>'schedule_id' = :s GROUP BY 1 HAVING count(*) > 1",
        s=sid,
    )
    assert jobs == [], f"a fire time was handed out twice: {jobs}"
    inst = sql(
        "SELECT schedule_fire_at, count(*) FROM workflow_instances WHERE schedule_id = :s "
        "GROUP BY 1 HAVING count(*) > 1",
        s=sid,
    )
    assert inst == [], f"a fire time started two instances: {inst}"


def test_api_rejects_bad_rules_naming_the_field(ops) -> None:  # noqa: F811
    def_id = ops.define(DOC)
    for kw, field in (
        ({"cron": "0 25 * * *"}, "cron"),
        ({"cron": "0 8 * * *", "timezone": "Europe/Nowhere"}, "timezone"),
        ({"interval_seconds": 0}, "interval_seconds"),
        ({"interval_seconds": 5, "overlap": "sometimes"}, "overlap"),
    ):
        with pytest.raises(InvalidArgument) as err:
            ops.client.create_schedule("bad", def_id, "v1", {}, **kw)
        assert field in str(err.value.errors), (kw, err.value.errors)
    with pytest.raises(InvalidArgument) as err:
        ops.client.create_schedule("bad", def_id, "v2", {}, cron="@daily")
    assert "version" in str(err.value.errors)
    s = ops.client.create_schedule(
        "weekday-mornings", def_id, "v1", {}, cron="30 8 * * 1-5", timezone="Europe/Berlin"
    )
    got = ops.client.get_schedule(s["id"])
    assert got["cron"] == "30 8 * * 1-5" and len(got["next_fire_times"]) == 5 and got["overlap"] == "skip"
    assert [i["id"] for i in ops.client.list_schedules()["items"]] == [s["id"]]


def test_every_second_schedule_with_real_scheduler_and_worker(ops, spawn_worker, spawn_scheduler) -> None:  # noqa: F811
    c = ops.client
    def_id = ops.define(DOC)
    spawn_worker("advance", env=ENGINE_WORKER_ENV)
    s = c.create_schedule("every-second", def_id, "v1", {}, interval_seconds=1, overlap="allow")
    sid = s["id"]
    a, b = spawn_scheduler(), spawn_scheduler()  # two schedulers at once
    time.sleep(8)
    window = _fires(sid)
    # 1. one launch per fire time: on a loaded machine a tick may coalesce, never lose or double
    assert len(window) >= 4, window
    assert all(f.status == "LAUNCHED" for f in window)
    covered = sum(1 + f.skipped_count for f in window[1:])
    span = round((window[-1].fire_at - window[0].fire_at).total_seconds())
    assert covered == span, (covered, span)
    _check_no_double(sid)
    # 2. both schedulers die for 10 s; one comes back: ONE coalesced launch for the latest fire time
    a.kill(), b.kill()
    a.wait(), b.wait()
    until(
        lambda: (
            sql(
                "SELECT count(*) AS n FROM workflow_jobs WHERE type = 'schedule_launch' "
                "AND status IN ('pending', 'running')"
            )[0].n
            == 0
        ),
        timeout=30,
    )
    before = len(_fires(sid))
    time.sleep(10)
    assert len(_fires(sid)) == before  # nothing fires while no scheduler runs
    spawn_scheduler()
    first_back = until(lambda: _fires(sid)[before:] and _fires(sid)[before], timeout=30)
    assert first_back.skipped_count >= 8, first_back
    audit = sql(
        "SELECT after FROM operation_audit WHERE target_id = :s AND action = 'schedule.fire' "
        "AND (after->>'skipped_missed')::int >= 8",
        s=sid,
    )
    assert len(audit) == 1
    # 3. pause: nothing more; resume: the missed fire times are coalesced into one launch
    c.pause_schedule(sid)
    time.sleep(1.5)  # a fire handed out just before the pause may still run
    paused_count = len(_fires(sid))
    time.sleep(3)
    assert len(_fires(sid)) == paused_count
    resumed = c.resume_schedule(sid)
    assert resumed["missed"]["fire_times"] >= 2
    coalesced = until(lambda: len(_fires(sid)) > paused_count and _fires(sid)[paused_count], timeout=30)
    assert coalesced.skipped_count >= 1
    # 4. launch now
    c.pause_schedule(sid)
    launched = c.launch_schedule(sid)
    manual = until(lambda: [f for f in _fires(sid) if f.kind == "MANUAL"], timeout=30)
    assert manual[0].status == "LAUNCHED" and manual[0].instance_id
    assert c.get_schedule(sid)["paused"] and launched["job_id"]
    _check_no_double(sid)
    # 5. the list filter finds exactly the launched instances, each with its fire time
    launched_ids = {f.instance_id for f in _fires(sid) if f.status == "LAUNCHED"}
    listed, cursor = [], None
    while True:
        page = c.list_workflows(schedule_id=sid, limit=100, cursor=cursor)
        listed += page.items
        cursor = page.next_cursor
        if not cursor:
            break
    assert {i.id for i in listed} == launched_ids
    assert all(i.schedule_id == sid and i.schedule_fire_at is not None for i in listed)
    c.delete_schedule(sid)
