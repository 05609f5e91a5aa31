"""The tutorial's and the examples' workflows, tested with the test kit as their authors would test them:
the example's own definition and task functions (its ``worker``), a namespace of the test's own, and
time skipping where the workflow waits (a signal's 5 min timeout, the order example's timer and poll)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from examples import compensation, first_workflow, pause_cancel, recovery, signals, start_orders, task_worker

ROOT = Path(__file__).resolve().parents[2]


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tutorial_1_first_workflow(ledgerflow_env):
    env = ledgerflow_env
    env.register(first_workflow.wf)  # a workflow written in Python: its steps' functions
    wid = env.start(env.publish("hello", first_workflow.wf.document()), {"name": "Ada"})
    done = env.wait(wid)
    assert done.state == "SUCCEEDED"
    assert done.output == {"greeting": "Hello, Ada!", "note": "Hello, Ada! Your first workflow ran."}


def test_tutorial_2_retries_and_a_failure(ledgerflow_env):
    env = ledgerflow_env
    env.register(task_worker.worker)
    definition = env.publish("orders", start_orders.DEFINITION)
    good = env.start(definition, {"order_id": "A-1", "amount": 42})
    bad = env.start(definition, {"order_id": "A-2", "amount": 0})
    assert env.wait(good).output == {"charged": 42, "attempts": 2}  # the first charge failed, retried at once
    assert env.wait(bad).state == "FAILED"  # NonRetryableError: no retry
    assert "amount must be positive" in str(env.client.get_workflow_step(bad, "check").error)


def _approve(env, wid: str) -> None:
    env.client.send_workflow_signal(
        wid,
        name="approved",
        payload_version="v1",
        target_step_key="approval",
        target_activation_sequence=1,
        correlation_key="P-7",
        payload={"by": "grace"},
        reason="approved in the payout review",
    )


def test_tutorial_3_the_signal_arrives(ledgerflow_env):
    env = ledgerflow_env
    env.register(signals.worker)
    wid = env.start(env.publish("payouts", signals.DEFINITION), {"payout_id": "P-7", "amount": 120})
    env.wait_for_step(wid, "approval", "WAITING")
    _approve(env, wid)
    assert env.wait(wid).output == {"paid": 120, "approved_by": "grace"}


def test_tutorial_3_no_signal_within_five_minutes(ledgerflow_env):
    env = ledgerflow_env
    env.register(signals.worker)
    wid = env.start(env.publish("payouts", signals.DEFINITION), {"payout_id": "P-7", "amount": 120})
    env.wait_for_step(wid, "approval", "WAITING")
    env.skip_time(minutes=5)  # the step's timeout_seconds: 300
    assert env.wait(wid).state == "FAILED"
    assert "SIGNAL_TIMEOUT" in str(env.client.get_workflow_step(wid, "approval").error)


def test_tutorial_4_pause_resume(ledgerflow_env):
    env = ledgerflow_env
    wid = env.start(env.publish("reports", pause_cancel.DEFINITION), {})  # no worker yet: the task waits
    inst = env.client.get_workflow(wid)
    paused = env.client.control_workflow(wid, "PAUSE", inst.control_revision, "hold")
    assert paused.instance.paused
    env.register(pause_cancel.worker)
    env.start_worker()
    assert env.client.get_workflow_step(wid, "report").step.state == "ACTIVE"  # not handed out while paused
    resumed = env.client.control_workflow(wid, "RESUME", paused.instance.control_revision, "go on")
    assert not resumed.instance.paused
    done = env.wait(wid)
    assert (done.state, done.output) == ("SUCCEEDED", {"pages": 3})


def test_tutorial_5_compensation(ledgerflow_env):
    env = ledgerflow_env
    env.register(compensation.worker)
    wid = env.start(env.publish("trip", compensation.DEFINITION), {"trip": "Lisbon"})
    assert env.wait(wid).state == "FAILED"  # the payment fails: the hotel booked before it is undone


def test_tutorial_6_recovery_waits_for_a_person(ledgerflow_env):
    env = ledgerflow_env
    env.register(recovery.worker)
    wid = env.start(env.publish("shop", recovery.DEFINITION), {})
    assert env.wait(wid, states={"NEEDS_REVIEW"}).state == "NEEDS_REVIEW"
    env.client.resolve_workflow_instance(wid, "CONTINUE", "refunded by hand", evidence_ref="ticket:4711")
    assert env.wait(wid).state == "FAILED"


def test_docs_example_order_with_a_timer_a_child_and_a_poll(ledgerflow_env):
    env = ledgerflow_env
    env.register(_module(ROOT / "docs/examples/order_worker.py").worker)
    order, _ = _module(ROOT / "docs/examples/publish_and_start.py").publish(env.client, "kit")
    wid = env.start(order, {"order_id": "A-1", "amount": 12, "note": None})
    done = env.wait(wid)
    assert done.state == "SUCCEEDED"
    assert done.output == {"approved": True, "amount": 12, "reservation": "R-A-1", "tracking": "T-A-1"}


@pytest.mark.parametrize("module", [signals, task_worker])
def test_the_example_modules_worker_is_the_one_registered(module, ledgerflow_env):
    """``env.register(worker)`` takes every queue of the application's worker."""
    ledgerflow_env.register(module.worker)
    assert set(ledgerflow_env.worker.functions) == set(module.worker.functions)


def test_a_workflow_written_in_python_registers_its_steps_functions(ledgerflow_env):
    """``env.register(wf)`` takes the functions of a ``ledgerflow.workflow.Workflow``'s steps."""
    ledgerflow_env.register(first_workflow.wf)
    assert set(ledgerflow_env.worker.functions) == {"hello.greet", "hello.note"}
