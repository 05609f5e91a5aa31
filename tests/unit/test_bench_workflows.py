"""The workflow benchmark's pure helpers (bench/workflows.py, bench/wf_common.py, bench/pg_cpu.py): shapes,
the counting arithmetic of ``--counts-only`` and its table, the offered rate's pacing (a lower bound only).
No database, no timing assertion a busy machine could break: the benchmark itself only prints."""

from __future__ import annotations

import time

import pytest

from app.engine.documents import validate_document
from bench import pg_cpu, wf_common, workflows
from bench.wf_common import (
    SHAPES,
    Counts,
    RunResult,
    Snapshot,
    counts_table,
    delta,
    further_step,
    mapped_value,
    parse_shapes,
    per_workflow,
)
from bench.wf_ledgerflow import definition, worker_has_concurrency


def test_shapes_plan_the_steps_in_order() -> None:
    assert [k for k, _ in SHAPES["task-task"].plan()] == ["task", "task"]
    assert SHAPES["task-timer-task"].plan() == [("task", "s1"), ("timer", "wait"), ("task", "s2")]
    assert [key for _, key in SHAPES["chain10"].plan()] == [f"s{i}" for i in range(1, 11)]
    assert SHAPES["fanout"].plan() == [("task", "s1"), ("fanout", "each"), ("task", "s2")]
    assert (SHAPES["fanout"].units, SHAPES["chain10"].units, SHAPES["task-timer-task"].units) == (102, 10, 3)
    assert [s.name for s in parse_shapes("all")] == list(SHAPES)
    with pytest.raises(ValueError, match="unknown shape"):
        parse_shapes("task-task,nope")


@pytest.mark.parametrize("name", [n for n, s in SHAPES.items() if not s.fanout])
def test_ledgerflow_definitions_are_valid_chains(name: str) -> None:
    doc, queues = validate_document(definition(SHAPES[name]))
    steps = doc["steps"]
    assert queues == ["bench_wf"]
    assert [s["key"] for s in steps] == [key for _, key in SHAPES[name].plan()]
    assert all(s["after"] == [prev["key"]] for prev, s in zip(steps, steps[1:], strict=False))


def test_the_fanout_definition_runs_one_task_per_item_of_the_first_output() -> None:
    shape = SHAPES["fanout"]
    doc, queues = validate_document(definition(shape))
    s1, each, s2 = doc["steps"]
    assert queues == ["bench_wf", "bench_wf_elements"]
    assert (s1["queue"], each["queue"], s2["queue"]) == ("bench_wf", "bench_wf_elements", "bench_wf")
    assert each["for_each"] == {"items": "$.steps.s1.output.items", "max_items": 100, "max_parallel": 100}
    assert (each["after"], s2["after"]) == (["s1"], ["each"])


def test_the_fanout_shape_runs_a_tenth_of_n_and_reports_elements() -> None:
    fan, chain = SHAPES["fanout"], SHAPES["chain10"]
    assert (workflows.shape_n(fan, 300), workflows.shape_n(fan, 30), workflows.shape_n(fan, 5)) == (30, 3, 2)
    assert (
        workflows.shape_n(chain, 300),
        workflows.shape_warmup(fan, 5),
        workflows.shape_warmup(chain, 5),
    ) == (
        300,
        2,
        5,
    )
    assert [s.name for s in workflows.parse(["--shapes", "fanout"]).shapes] == ["fanout"]
    a = workflows.parse(["--shape", "fanout", "--engines", "ledgerflow,dbos"])
    lf = RunResult(
        engine="ledgerflow", shape="fanout", n=30, wall=10.0, counts=Counts({"t": (3000, 6000, 0)}, 3300)
    )
    db = RunResult(
        engine="dbos", shape="fanout", n=30, wall=20.0, counts=Counts({"t": (9000, 6000, 0)}, 30000)
    )
    text = workflows.report({"fanout": {"ledgerflow": lf, "dbos": db}}, a)
    rows = {
        line.split("  ")[1].strip(): line.split()[-2:] for line in text.splitlines() if line.startswith("  ")
    }
    assert rows["elements/s"] == ["300", "150"]  # 30 workflows x 100 elements in 10 s / 20 s
    assert rows["row writes / element (all / elements)"] == ["3.00", "5.00"]  # 300 / 100, 500 / 100
    assert rows["transactions / element (all / elements)"] == ["1.10", "10.00"]
    assert "2.00x DBOS start_wf" in text and "N / 10 workflows" in text


def test_the_mapping_shape_maps_the_previous_tasks_value_into_the_next_input() -> None:
    steps = definition(SHAPES["mapping"])["steps"]
    assert "input" not in steps[0]
    assert steps[1]["input"] == {"x": "$.steps.s1.output.value"}
    assert "input" not in definition(SHAPES["task-task"])["steps"][1]  # the other shapes map nothing
    assert mapped_value(None) == {"ok": True, "value": 1}
    assert mapped_value(1) == {"ok": True, "value": 2}


def test_delta_subtracts_per_table_and_own_transactions() -> None:
    before = Snapshot({"a": (10, 5, 0), "b": (1, 1, 1)}, xacts=100)
    after = Snapshot({"a": (16, 9, 0), "b": (1, 1, 1), "new": (3, 0, 2)}, xacts=130)
    c = delta(before, after, own_xacts=4)
    assert c.tables == {"a": (6, 4, 0), "new": (3, 0, 2)}  # unchanged tables are left out
    assert (c.inserts, c.updates, c.deletes, c.writes, c.xacts) == (9, 4, 2, 13, 26)


def test_counts_minus_an_empty_window() -> None:
    run = Counts({"jobs": (40, 50, 0), "nodes": (0, 7, 0), "receipts": (104, 0, 0)}, 480)
    empty = Counts({"nodes": (0, 7, 0), "receipts": (4, 0, 0)}, 60)
    net = run.minus(empty)
    assert net.tables == {"jobs": (40, 50, 0), "receipts": (100, 0, 0)} and net.xacts == 420


def test_per_workflow_and_each_further_step() -> None:
    short = per_workflow(Counts({"jobs": (4, 6, 0), "events": (6, 0, 0)}, 20), 2)
    long = per_workflow(Counts({"jobs": (20, 38, 0), "events": (22, 0, 0), "extra": (8, 0, 0)}, 84), 2)
    assert (short.writes, short.xacts) == (8.0, 10.0)
    step = further_step(long, short, 8)
    assert (step.inserts, step.updates, step.xacts) == (2.5, 2.0, 4.0)
    assert step.tables == {"events": (1.0, 0.0, 0.0), "extra": (0.5, 0.0, 0.0), "jobs": (1.0, 2.0, 0.0)}


def test_each_further_step_cpu_is_the_difference_per_extra_step() -> None:
    long = {"postgres": 24.0, "engine": 41.0, "client": 6.2}
    short = {"postgres": 7.2, "engine": 9.0, "client": 1.4}
    assert workflows.further_cpu(long, short, 8) == "2.1+4.0+0.6"
    assert workflows.further_cpu({}, short, 8) == "-"  # a run without CPU figures


def test_counts_table_lists_tables_and_totals() -> None:
    pw = per_workflow(Counts({"workflow_jobs": (8, 10, 0), "idle": (0, 0, 0)}, 40), 2)
    text = "\n".join(counts_table({"task-task": pw}))
    assert "workflow_jobs" in text and "4.0 + 5.0" in text
    assert "idle" not in text  # a table with nothing per workflow is left out
    assert "9.0 (4.0+5.0)" in text and "20.0" in text


def test_result_json_round_trip_keeps_counts() -> None:
    r = RunResult(engine="ledgerflow", shape="task-task", n=2, wall=1.0, counts=Counts({"t": (1, 2, 0)}, 3))
    r.cpu_ms = {"postgres": 1.25, "engine": 2.0, "client": 0.5}
    back = RunResult.from_json(r.to_json())
    assert back.counts == r.counts and back.rate == 2.0
    assert workflows._cpu(back) == "1.2+2.0+0.5"


def test_counts_only_arguments_and_report() -> None:
    a = workflows.parse(["--counts-only", "--shape", "task-timer-task", "--baseline"])
    assert (a.n, a.warmup, a.baseline, [s.name for s in a.shapes]) == (20, 2, True, ["task-timer-task"])
    full = workflows.parse(["--engines", "ledgerflow,absurd", "--no-rate-limit"])
    assert (full.n, full.variants) == (300, ["ledgerflow", "ledgerflow-nolimit", "absurd"])
    res = {
        s: RunResult(engine="ledgerflow", shape=s, n=10, counts=Counts({"t": (k * 10, k * 20, 0)}, k * 30))
        for s, k in (("task-task", 1), ("chain10", 5))
    }
    text = workflows.counts_report(res, 10)
    assert "each further step" in text and "0.5 + 1.0" in text  # (5 - 1) * (10, 20) / 10 / 8
    assert isinstance(worker_has_concurrency(), bool)


def test_an_offered_rate_paces_the_starts(monkeypatch) -> None:
    """``--rate``: start i is made no earlier than i / rate s after the first (a lower bound only: a busy
    machine may make it later), from the client threads together; without it they go as fast as they can."""
    a = workflows.parse(["--rate", "200", "--shape", "task-task"])
    assert a.rate == 200.0
    with pytest.raises(SystemExit):
        workflows.parse(["--rate", "0"])
    monkeypatch.setattr(wf_common, "OFFERED_RATE", 200.0)
    made: dict[int, float] = {}
    began = time.monotonic()

    def start(_client: object, i: int) -> str:
        made[i] = time.monotonic()
        return f"wf-{i}"

    out = wf_common.start_all(12, lambda: None, start, lambda _c: None)
    assert sorted(wid for wid, _, _ in out) == sorted(f"wf-{i}" for i in range(12))
    assert all(made[i] - began >= i / 200.0 - 0.001 for i in range(12))


def test_pg_cpu_reads_a_process_cpu_and_asks_for_work() -> None:
    """``bench.pg_cpu``: nothing to do is an error, not an empty report (a process's CPU is
    ``bench.run.cpu_seconds``)."""
    with pytest.raises(SystemExit):
        pg_cpu.main([])
    with pytest.raises(SystemExit):
        pg_cpu.main(["--probe", "--n", "2"])


def test_hot_updates_are_counted_per_table_and_shown_beside_the_updates() -> None:
    """Of each table's updates, the HOT ones (``n_tup_hot_upd``: no index entry written) are counted in the
    window, per workflow, and printed as "HOT / updates"; a result saved without them reads back."""
    before = Snapshot({"tasks": (10, 5, 0), "steps": (4, 4, 0)}, 100, {"tasks": 0, "steps": 3})
    after = Snapshot({"tasks": (14, 13, 0), "steps": (10, 10, 0)}, 120, {"tasks": 0, "steps": 8})
    c = delta(before, after)
    assert c.hot == {"steps": 5}  # tasks: no HOT update in the window
    pw = per_workflow(c, 2)
    assert pw.hot == {"steps": 2.5}
    text = "\n".join(counts_table({"task-task": pw}))
    assert "updates that were HOT" in text
    assert [line.split()[-3:] for line in text.splitlines() if line.startswith("    ")] == [
        ["2.5", "/", "3.0"],
        ["0.0", "/", "4.0"],
    ]
    assert c.minus(Counts({"steps": (2, 2, 0)}, 4, {"steps": 1})).hot == {"steps": 4}
    r = RunResult(engine="ledgerflow", shape="task-task", n=2, wall=1.0, counts=c)
    assert RunResult.from_json(r.to_json()).counts == c
    old = r.to_json()
    del old["counts"]["hot"]
    assert RunResult.from_json(old).counts.hot == {}  # type: ignore[union-attr]


def test_the_wal_written_is_counted_per_workflow_and_never_holds_the_final_snapshot() -> None:
    """The window's WAL (the server's position at both ends) per workflow, in the counts table and in a
    saved result; two snapshots that differ only in it are equal, or ``final_snapshot`` (which waits for
    two equal ones) would wait out its timeout on a server whose other databases write."""
    before = Snapshot({"tasks": (10, 5, 0)}, 100, {}, wal=1_000_000)
    after = Snapshot({"tasks": (14, 13, 0)}, 120, {}, wal=1_046_000)
    assert Snapshot({"tasks": (10, 5, 0)}, 100, {}, wal=7) == before
    c = delta(before, after)
    assert c.wal == 46_000 and c.minus(Counts({}, 0, {}, 6_000)).wal == 40_000
    pw = per_workflow(c, 2)
    assert pw.wal == 23_000.0
    assert further_step(pw, per_workflow(Counts({}, 0, {}, 10_000), 2), 2).wal == 9_000.0
    assert "23,000" in "\n".join(counts_table({"task-task": pw}))
    r = RunResult(engine="ledgerflow", shape="task-task", n=2, wall=1.0, counts=c)
    assert RunResult.from_json(r.to_json()).counts.wal == 46_000  # type: ignore[union-attr]


def test_payload_bytes_pad_inputs_and_outputs_alike_and_are_refused_where_they_do_not_apply(
    monkeypatch,
) -> None:
    """``--payload-bytes``: every engine's workflow input and task outputs carry the same number of random
    characters (random: no engine's storage compresses them away); 0 leaves the payloads as every earlier run
    had them; the fan-out and mapping shapes, whose outputs are their data, refuse it."""
    monkeypatch.setattr(wf_common, "PAYLOAD_BYTES", 0)
    assert wf_common.padded({"ok": True}) == {"ok": True}
    monkeypatch.setattr(wf_common, "PAYLOAD_BYTES", 1001)
    a, b = wf_common.padded({"ok": True}), wf_common.padded({"i": 3})
    assert a["ok"] is True and b["i"] == 3 and len(a["pad"]) == len(b["pad"]) == 1001 and a["pad"] != b["pad"]
    assert workflows.parse(["--shape", "task-timer-task", "--payload-bytes", "4096"]).payload_bytes == 4096
    for bad in (["--shape", "mapping", "--payload-bytes", "10"], ["--shape", "all", "--payload-bytes", "10"]):
        with pytest.raises(SystemExit):
            workflows.parse(bad)
    with pytest.raises(SystemExit):
        workflows.parse(["--shape", "task-task", "--payload-bytes", "-1"])


def test_rounds_alternate_the_engines_and_report_each_engines_median_round_and_the_paired_ratios() -> None:
    """``--rounds K``: the engines run in the order given, then reversed, round after round; the table takes
    each engine's median round by workflows/s (a failed round only when all failed), and lists every round
    with Ledgerflow's workflows/s against each peer's of the same round."""
    assert workflows.round_order(["ledgerflow", "dbos", "absurd"], 0) == ["ledgerflow", "dbos", "absurd"]
    assert workflows.round_order(["ledgerflow", "dbos", "absurd"], 1) == ["absurd", "dbos", "ledgerflow"]
    assert workflows.round_order(["ledgerflow", "dbos"], 2) == ["ledgerflow", "dbos"]

    def run(engine: str, wall: float, late: list[float] | None = None) -> RunResult:
        return RunResult(engine=engine, shape="task-timer-task", n=100, wall=wall, timer_late_ms=late or [])

    lf = [run("ledgerflow", 1.0, [1.0, 2.0]), run("ledgerflow", 0.5, [3.0]), run("ledgerflow", 2.0)]
    dbos = [run("dbos", 2.0), run("dbos", 1.0), run("dbos", 0.0)]  # the third round failed
    assert workflows.median_round(lf) is lf[0]  # 100, 200 and 50 workflows/s: the median is 100
    assert workflows.median_round(dbos[:2]) is dbos[0]  # 50 and 100: the lower middle
    assert workflows.median_round([dbos[2]]) is dbos[2]
    lines = workflows.rounds_lines(SHAPES["task-timer-task"], {"ledgerflow": lf, "dbos": dbos})
    text = "\n".join(lines)
    assert lines[0] == "  3 rounds (engines alternated), workflows/s of each round:"
    assert "100.0, 200.0, 50.0" in text and "50.0, 100.0, -" in text
    assert "1.5 / 2.0, 3.0 / 3.0, -" in text  # the timer's p50 / p99 of each of Ledgerflow's rounds
    # 100 / 50 and 200 / 100 in the two rounds both ran; the failed round is left out
    assert "against DBOS start_wf, round by round: 2.00x, 2.00x (median 2.00x, lowest 2.00x)" in text

    a = workflows.parse(["--shape", "task-task", "--rounds", "3"])
    assert a.rounds == 3 and workflows.parse(["--shape", "task-task"]).rounds == 1
    for bad in (
        ["--rounds", "0"],
        ["--rounds", str(workflows.MAX_ROUNDS + 1)],
        ["--counts-only", "--rounds", "2"],
    ):
        with pytest.raises(SystemExit):
            workflows.parse(bad)
    report = workflows.report(
        {"task-timer-task": {"ledgerflow": lf[0], "dbos": dbos[0]}},
        a,
        {"task-timer-task": {"ledgerflow": lf, "dbos": dbos}},
    )
    assert "3 rounds, each engine its median round" in report and "round by round" in report
