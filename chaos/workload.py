"""The fault suite's workload: three-step workflows (a TASK served by an SDK task worker, a TIMER, a
SUBWORKFLOW whose child waits on its own TIMER — every step moves through the advance pool) and
outbound ledger jobs (``webhook_delivery``, a receipt-guarded business write), plus the SQL
invariants checked once the cluster is quiet."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, text

from app.auth import Scope, create_credential
from app.db import transaction
from app.ledger.enqueue import enqueue
from chaos.harness import retry_db
from ledgerflow.client import Client, Task, TaskWorker

QUEUE = "chaos.work"
CHILD = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 3600,
    "steps": [{"key": "pause", "kind": "TIMER", "delay_seconds": 1}],
}


SIGNAL = "approved"


def parent_doc(child_id: str, *, signal: bool = False) -> dict:
    """TASK -> TIMER -> SUBWORKFLOW; with ``signal`` the TIMER also waits for a SIGNAL step ``approve``
    (the signal is sent right after the start: accepted early, consumed when the step activates)."""
    gate = [
        {
            "key": "approve",
            "kind": "SIGNAL",
            "signal": SIGNAL,
            "payload_version": "v1",
            "correlation": "$.input.order",
            "after": ["work"],
        }
    ]
    return {
        "version": "v1",
        "input_schema": {},
        "deadline_seconds": 3600,
        **(
            {"signals": [{"name": SIGNAL, "payload_version": "v1", "schema": {"type": "object"}}]}
            if signal
            else {}
        ),
        "steps": [
            *(gate if signal else []),
            {
                "key": "work",
                "kind": "TASK",
                "queue": QUEUE,
                "timeout_seconds": 60,
                "input": {"n": "$.input.n"},
                "retry": {"max_attempts": 5, "backoff_seconds": 1},
            },
            {
                "key": "wait",
                "kind": "TIMER",
                "delay_seconds": 1,
                "after": ["work", *(["approve"] if signal else [])],
            },
            {
                "key": "child",
                "kind": "SUBWORKFLOW",
                "definition_id": child_id,
                "version": "v1",
                "after": ["wait"],
            },
        ],
    }


def _work(task: Task) -> dict:
    return {"done": task.input["n"]}


@dataclass
class Workload:
    engine: Engine
    web_url: str
    namespace: str = field(default_factory=lambda: "chaos-" + uuid.uuid4().hex[:8])
    token: str = ""
    definition_id: str = ""
    instance_ids: list[str] = field(default_factory=list)
    job_ids: list[int] = field(default_factory=list)
    worker: TaskWorker | None = None
    _thread: threading.Thread | None = None
    # the parent waits for a signal too (``send_signals``); the failover scenario's load
    with_signal: bool = False

    def setup(self) -> None:
        with transaction(self.engine) as conn:
            self.token = create_credential(
                conn,
                namespace=self.namespace,
                name="chaos",
                scopes=[
                    Scope.DEFINITIONS_READ,
                    Scope.DEFINITIONS_PUBLISH,
                    Scope.WORKFLOWS_READ,
                    Scope.WORKFLOWS_START,
                    Scope.TASKS_SUBMIT,
                    Scope.TASKS_WORK,
                    *([Scope.WORKFLOWS_SIGNAL] if self.with_signal else []),
                ],
            ).token
        client = self.client()
        child = client.ensure_definition(f"{self.namespace}-child", CHILD)
        parent = client.ensure_definition(
            f"{self.namespace}-parent", parent_doc(child["id"], signal=self.with_signal)
        )
        self.definition_id = parent["id"]

    def client(self) -> Client:
        return Client(self.web_url, self.token, timeout=10)

    def start_task_worker(self) -> None:
        self.worker = TaskWorker(self.client(), wait_seconds=1)
        self.worker.register(QUEUE, _work)
        self._thread = threading.Thread(target=self.worker.run, name="chaos-task-worker", daemon=True)
        self._thread.start()

    def stop_task_worker(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self._thread is not None:
            self._thread.join(15)

    def start_workflows(self, n: int, *, client: Client | None = None) -> None:
        c = client or self.client()
        for i in range(n):
            started = c.start_workflow(
                self.definition_id, "v1", {"n": i, "order": f"o-{i}"}, idempotency_key=uuid.uuid4().hex
            )
            self.instance_ids.append(started.instance.id)
            if self.with_signal:
                self.send_signal(c, started.instance.id, f"o-{i}")

    def send_signal(self, c: Client, instance_id: str, order: str) -> str:
        """The ``approve`` step's signal (one Idempotency-Key, resent by the SDK as needed); its id."""
        sent = c.send_workflow_signal(
            instance_id,
            name=SIGNAL,
            payload_version="v1",
            target_step_key="approve",
            target_activation_sequence=1,
            correlation_key=order,
            payload={"ok": True},
            reason="chaos load",
            idempotency_key=uuid.uuid4().hex,
        )
        return sent.signal.id

    def enqueue_jobs(self, n: int, work_seconds: float = 0.4) -> list[int]:
        """``n`` outbound jobs in one transaction (again, whole, if the connection is lost)."""

        def once() -> list[int]:
            with transaction(self.engine) as conn:
                return [
                    enqueue(conn, "webhook_delivery", {"work_seconds": work_seconds}).id for _ in range(n)
                ]

        ids = retry_db(once)
        self.job_ids.extend(ids)
        return ids

    def more_invariants(self, engine: Engine) -> dict[str, int]:
        """A scenario's own invariants beyond INVARIANTS (violation counts), checked with them."""
        return {}

    # ------------------------------------------------------------------ quiescence
    def unfinished(self) -> dict[str, int]:
        return retry_db(self._unfinished)

    def _unfinished(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            jobs = conn.execute(
                text("SELECT count(*) FROM workflow_jobs WHERE id = ANY(:ids) AND status <> 'succeeded'"),
                {"ids": self.job_ids},
            ).scalar_one()
            wfs = conn.execute(
                text("SELECT count(*) FROM workflow_instances WHERE id = ANY(:ids) AND state <> 'SUCCEEDED'"),
                {"ids": self.instance_ids},
            ).scalar_one()
        return {"jobs": int(jobs), "workflows": int(wfs)}


# ---------------------------------------------------------------------------------- invariants
INVARIANTS: list[tuple[str, str]] = [
    (
        "every ledger job of the workload succeeded",
        "SELECT count(*) FROM workflow_jobs WHERE id = ANY(:jobs) AND status <> 'succeeded'",
    ),
    (
        "no job left running past its lease plus one drain period",
        "SELECT count(*) FROM workflow_jobs WHERE status = 'running' "
        "AND lease_until < now() - make_interval(secs => :drain_seconds)",
    ),
    (
        "each (job, generation) succeeded at most once",
        "SELECT count(*) FROM (SELECT job_id, generation FROM workflow_job_executions WHERE status = 'succeeded' "
        "GROUP BY 1, 2 HAVING count(*) > 1) d",
    ),
    (
        "attempts never exceed the budget",
        "SELECT count(*) FROM workflow_jobs j WHERE j.attempts > j.max_attempts OR (SELECT count(*) "
        "FROM workflow_job_executions e WHERE e.job_id = j.id AND e.generation = j.generation) > j.max_attempts",
    ),
    (
        "every business effect written once (receipts reused after kills)",
        "SELECT count(*) FROM (SELECT operation_key FROM chaos_effects GROUP BY 1 HAVING count(*) > 1) d",
    ),
    (
        "every effect receipt unique",
        "SELECT count(*) FROM (SELECT operation_key, step_key FROM workflow_job_effects GROUP BY 1, 2 "
        "HAVING count(*) > 1) d",
    ),
    (
        "every fired timer's wait names the job operation that fired it (its receipt)",
        "SELECT count(*) FROM workflow_waits w WHERE w.kind = 'TIMER' AND w.state = 'RESOLVED' AND NOT EXISTS "
        "(SELECT 1 FROM workflow_jobs j WHERE j.type = 'delay_wake' AND j.operation_key = w.resolved_by_operation "
        "AND j.payload->>'activation_id' = w.activation_id)",
    ),
    (
        "every workflow of the workload SUCCEEDED",
        "SELECT count(*) FROM workflow_instances WHERE id = ANY(:wfs) AND state <> 'SUCCEEDED'",
    ),
    (
        "every instance ended exactly once (one end audit row each)",
        "SELECT count(*) FROM workflow_instances i WHERE i.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED') "
        "AND (SELECT count(*) FROM workflow_operations a WHERE a.workflow_id = i.id "
        "AND a.action IN ('workflow.succeeded', 'workflow.failed', 'workflow.cancelled')) <> 1",
    ),
    (
        "no activation doubled (one activation per step of a finished workflow)",
        "SELECT count(*) FROM (SELECT step_id FROM workflow_all_activations GROUP BY 1 HAVING count(*) > 1) d",
    ),
    (
        "at most one open activation per step",
        "SELECT count(*) FROM (SELECT step_id FROM workflow_all_activations WHERE state IN ('ACTIVE', 'WAITING') "
        "GROUP BY 1 HAVING count(*) > 1) d",
    ),
    (
        "no task completed twice",
        "SELECT count(*) FROM (SELECT activation_id FROM workflow_tasks WHERE state = 'COMPLETED' "
        "GROUP BY 1 HAVING count(*) > 1) d",
    ),
]


def check_invariants(engine: Engine, load: Workload, drain_seconds: float) -> dict[str, int]:
    """Every invariant's violation count (0 = holds)."""
    params: dict[str, Any] = {"jobs": load.job_ids, "wfs": load.instance_ids, "drain_seconds": drain_seconds}
    with engine.connect() as conn:
        found = {name: int(conn.execute(text(sql), params).scalar_one()) for name, sql in INVARIANTS}
    return {**found, **load.more_invariants(engine)}
