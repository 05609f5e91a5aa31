"""A console scenario built once through the domain functions (no server needed): two namespaces, their
credentials, workflows that ran for real in every state the workflow page must explain (running with a
TIMER to fire, failed, failed after its compensations ran, in NEEDS_REVIEW, waiting for a signal), a
dead job with its attempts, a schedule, a subscription with its delivery log and an automation rule
with its executions. Used by tests/web/test_console_pages.py (Flask test client) and the browser
suite (the Procfile's gunicorn over the same database)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import app.engine.handlers.compensation  # noqa: F401 - registers the compensation_action handler
from app import audit
from app.auth import ALL_SCOPES, Principal, Scope, authenticate, create_credential
from app.db import get_engine, transaction
from app.engine import audit_entries, definitions, instances, operator_commands, task_protocol, traces
from app.ids import new_id
from app.integrations import automation, schedules, subscriptions
from app.ledger import handlers
from app.ledger.enqueue import enqueue
from app.ledger.outcome import PermanentError
from app.ledger.pool import LedgerPool
from app.ledger.states import Pool
from app.settings import TASK_LEASE_SECONDS, get_settings
from tests.web.wf_ops import sql, until

ORDER_INPUT_SCHEMA = {
    "type": "object",
    "required": ["order_id", "amount"],
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "integer"}},
}
RECEIPT_DOC = {
    "signals": [{"name": "done", "payload_version": "v1", "schema": {"type": "object"}}],
    "steps": [
        {
            "key": "receipt",
            "kind": "SIGNAL",
            "after": [],
            "signal": "done",
            "payload_version": "v1",
            "correlation": "$.input.order",
            "timeout_seconds": 3000,
        },
        {"key": "ship", "kind": "TASK", "queue": "ship", "after": ["receipt"]},
    ],
}
AUDIT_ROWS = 25  # more than one page (20) of the workflow page's audit timeline


@dataclass
class Scenario:
    ns: str
    other_ns: str
    tokens: dict[str, str]
    principals: dict[str, Principal]
    defs: dict[str, str] = field(default_factory=dict)
    wf: dict[str, str] = field(
        default_factory=dict
    )  # running, awaiting (a task), failed, compensated, review, ...
    dead_job: int = 0
    other_job: int = 0  # a job of the other namespace's workflow
    trace_id: str = ""
    business_key: str = ""
    schedule_id: str = ""
    subscription_id: str = ""
    delivery_id: str = ""
    rule_id: str = ""


def run_pool(pool: Pool, done: Callable[[], Any], timeout: float = 60.0) -> None:
    """Run one in-process pool of the real ledger (its registered handlers) until ``done()``."""
    fast = replace(get_settings(), poll_seconds=0.1, renew_seconds=0.5, lease_seconds=5.0)
    p = LedgerPool(pool, settings=fast, engine=get_engine(), worker_id=new_id())
    p.start()
    try:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "the pool did not finish in time"
            p.nudge()
            time.sleep(0.05)
    finally:
        p.stop(timeout=10)


def _define(p: Principal, name: str, doc: dict) -> str:
    with transaction() as conn:
        d = definitions.create_definition(conn, p.namespace_id, name, f"the console scenario's {name}")
        definitions.publish_version(
            conn,
            p.namespace_id,
            d["id"],
            {"version": "v1", "input_schema": {}, "deadline_seconds": 86400, **doc},
        )
    return d["id"]


def _start(p: Principal, def_id: str, inp: Any, business_key: str = "") -> str:
    with transaction() as conn:
        inst = instances.start_workflow(
            conn,
            p.namespace_id,
            {"definition_id": def_id, "version": "v1", "input": inp, "business_key": business_key},
        )
    return inst["id"]


def _work(
    p: Principal, queue: str, *, output: Any = None, fail: str | None = None, stack: str | None = None
) -> str:
    """Claim the next task of ``queue`` and complete it (or fail it, not retryable; with ``stack``, as the
    SDK's TaskWorker reports a failure: the exception's type, its stack trace and the worker)."""
    with transaction() as conn:
        [task] = task_protocol.claim(conn, p.namespace_id, [queue], 1, TASK_LEASE_SECONDS.get())
    with transaction() as conn:
        if fail is None:
            task_protocol.complete(
                conn, p.namespace_id, task["id"], task["epoch"], output if output is not None else {}
            )
        else:
            error = {"message": fail, "retryable": False}
            task_protocol.fail(conn, p.namespace_id, task["id"], task["epoch"], error)
            if stack is not None:
                worker = {"host": "worker-7.internal", "pid": 4242, "sdk": "ledgerflow-sdk test"}
                failure = traces.failure_of({**error, "type": "ScoreServiceError", "stack": stack}, worker)
                traces.record_failure(conn, task["id"], task["epoch"], failure)
    return task["id"]


SCORE_STACK = """Traceback (most recent call last):
  File "/srv/risk/worker.py", line 41, in score
    answer = client.score(customer)
  File "/srv/risk/client.py", line 88, in score
    raise ScoreServiceError(f"score service answered {status} twice")
ScoreServiceError: score service answered 503 twice: customer C-7 not scored"""


def _state(iid: str) -> str:
    return sql("SELECT state FROM workflow_instances WHERE id = :i", i=iid)[0][0]


def _job_status(job_id: int) -> str:
    return sql("SELECT status FROM workflow_jobs WHERE id = :i", i=job_id)[0][0]


def build() -> Scenario:
    suffix = uuid.uuid4().hex[:6]
    ns, other = f"console-{suffix}", f"other-{suffix}"
    tokens: dict[str, str] = {}
    with transaction() as conn:
        for who, scopes, space, platform in (
            ("admin", sorted(ALL_SCOPES), ns, True),  # a platform-wide operator with every scope
            ("monitor", [Scope.ENGINE_MONITOR], ns, True),
            ("tenant", sorted(ALL_SCOPES), ns, False),  # every scope, its own namespace only
            ("other", sorted(ALL_SCOPES), other, False),
        ):
            tokens[who] = create_credential(
                conn, namespace=space, name=who, scopes=scopes, platform=platform
            ).token
    with get_engine().connect() as conn:
        principals = {who: authenticate(conn, tok) for who, tok in tokens.items()}
    admin, other_p = principals["admin"], principals["other"]
    s = Scenario(ns, other, tokens, principals)  # type: ignore[arg-type]

    # workflows, each moved for real through the engine
    s.defs["order"] = _define(
        admin,
        "order-fulfilment",
        {
            "input_schema": ORDER_INPUT_SCHEMA,
            "steps": [
                {
                    "key": "approve",
                    "kind": "TASK",
                    "queue": "approvals",
                    "after": [],
                    "input": {"order_id": "$.input.order_id", "amount": "$.input.amount"},
                },
                {"key": "cool_off", "kind": "TIMER", "after": ["approve"], "delay_seconds": 3600},
                {"key": "ship", "kind": "TASK", "queue": "shipping", "after": ["cool_off"]},
            ],
        },
    )
    s.business_key = f"order-{suffix}"
    s.wf["running"] = _start(admin, s.defs["order"], {"order_id": "A-1", "amount": 1250}, s.business_key)
    _work(admin, "approvals", output={"approved": True, "by": "maria"})
    s.wf["awaiting"] = _start(admin, s.defs["order"], {"order_id": "A-2", "amount": 80}, f"order-{suffix}-2")
    s.defs["risk"] = _define(
        admin,
        "risk-check",
        {
            "steps": [{"key": "score", "kind": "TASK", "queue": "risk", "after": []}],
        },
    )
    s.wf["failed"] = _start(admin, s.defs["risk"], {"customer": "C-7"})
    _work(admin, "risk", fail="score service answered 503 twice: customer C-7 not scored", stack=SCORE_STACK)
    s.defs["payment"] = _define(
        admin,
        "payment",
        {
            "steps": [
                {
                    "key": "reserve",
                    "kind": "TASK",
                    "queue": "payments",
                    "after": [],
                    "compensation": {"queue": "undo"},
                },
                {"key": "charge", "kind": "TASK", "queue": "payments", "after": ["reserve"]},
            ],
        },
    )
    s.wf["compensated"] = _start(admin, s.defs["payment"], {"amount": 99})
    _work(admin, "payments", output={"reservation": "R-1"})
    _work(admin, "payments", fail="card declined: insufficient funds")
    run_pool(
        Pool.OUTBOUND,
        lambda: sql(
            "SELECT 1 FROM workflow_tasks WHERE instance_id = :i AND purpose = 'COMPENSATION'",
            i=s.wf["compensated"],
        ),
    )
    _work(admin, "undo", output={"released": "R-1"})
    until(lambda: _state(s.wf["compensated"]) == "FAILED", timeout=60)
    # the same saga whose undo fails: NEEDS_REVIEW because of the compensation (issue 47, point 9)
    s.wf["undo_failed"] = _start(admin, s.defs["payment"], {"amount": 250})
    _work(admin, "payments", output={"reservation": "R-2"})
    _work(admin, "payments", fail="card declined: card expired")
    run_pool(
        Pool.OUTBOUND,
        lambda: sql(
            "SELECT 1 FROM workflow_tasks WHERE instance_id = :i AND purpose = 'COMPENSATION'",
            i=s.wf["undo_failed"],
        ),
    )
    _work(admin, "undo", fail="release of R-2 refused: the reservation service is read-only")
    until(lambda: _state(s.wf["undo_failed"]) == "NEEDS_REVIEW", timeout=60)
    s.defs["receipt"] = _define(admin, "receipt", RECEIPT_DOC)
    s.wf["review"] = _start(admin, s.defs["receipt"], {"order": "A-1"})
    sql(
        "INSERT INTO workflow_jobs (type, queue, status, instance_id, step_key, max_attempts, operation_key, "
        "trace_id, lease_token, lease_until, execution_deadline, effect_marker, attempts, attempt_id, "
        "attempt_started_at) VALUES ('external_dispatch', 'workflow-ledger-outbound', 'running', :i, 'receipt', 3, "
        ":op, 't', gen_random_uuid(), now() + interval '1 hour', now() + interval '1 hour', '{\"sent\": true}', 1, "
        "nextval('workflow_job_executions_id_seq'), now())",
        i=s.wf["review"],
        op=uuid.uuid4().hex,
    )
    with transaction() as conn:
        operator_commands.control_workflow(
            conn,
            admin,
            s.wf["review"],
            {
                "operation": "PAUSE",
                "expected_control_revision": 1,
                "reason": "freeze while the receipt is checked",
            },
            request_id="req_console",
        )
    for i in range(AUDIT_ROWS):  # one transaction each: entries of one transaction share their time
        with transaction() as conn:
            audit_entries.operation(
                conn,
                admin,
                s.wf["review"],
                "workflow.note",
                request_id="req_console",
                reason=f"checked with the carrier, call {i + 1}",
                evidence_ref=f"ticket:{100 + i}",
            )
    s.wf["signal"] = _start(admin, s.defs["receipt"], {"order": "B-2"})
    # a branch not taken (SKIPPED, with its reason) and a fan-out with one of three elements done
    branched = _define(
        admin,
        "order-branches",
        {
            "steps": [
                {"key": "check", "kind": "TASK", "queue": "branch.check"},
                {
                    "key": "manual_approval",
                    "kind": "TASK",
                    "queue": "branch.manual",
                    "after": ["check"],
                    "condition": {">": ["$.input.amount", 1000]},
                },
                {
                    "key": "reserve_lines",
                    "kind": "TASK",
                    "queue": "branch.lines",
                    "after": ["check"],
                    "for_each": {"items": "$.input.lines", "max_parallel": 2},
                },
            ]
        },
    )
    s.wf["branched"] = _start(
        admin, branched, {"amount": 20, "lines": [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}]}
    )
    _work(admin, "branch.check", output={"ok": True})
    _work(admin, "branch.lines", output={"reserved": "a"})
    s.trace_id = sql("SELECT trace_id FROM workflow_instances WHERE id = :i", i=s.wf["running"])[0][0]

    # the other namespace: a workflow whose job a platform-wide operator sees in the ledger
    other_def = _define(
        other_p,
        "other-tenant-flow",
        {
            "steps": [{"key": "wait", "kind": "TIMER", "after": [], "delay_seconds": 7200}],
        },
    )
    s.wf["other"] = _start(other_p, other_def, {"tenant": "B"})
    s.other_job = sql(
        "SELECT id FROM workflow_jobs WHERE instance_id = :i ORDER BY id LIMIT 1", i=s.wf["other"]
    )[0][0]
    other_tasks = _define(
        other_p,
        "other-approvals",
        {
            "steps": [{"key": "ok", "kind": "TASK", "queue": "b-queue", "after": []}],
        },
    )
    _start(other_p, other_tasks, {"tenant": "B"})

    # a job that died for real (its handler refused it), then succeeds when retried
    s.dead_job = _dead_job()

    # a schedule, a subscription with its delivery log, a rule with its executions (created last: from
    # here on, the namespace's events are dispatched to listeners)
    with transaction() as conn:
        sch = schedules.create_schedule(
            conn,
            admin,
            {
                "name": "nightly-orders",
                "definition_id": s.defs["order"],
                "version": "v1",
                "input": {"order_id": "N-1", "amount": 1},
                "interval_seconds": 3600,
                "timezone": "UTC",
                "overlap": "skip",
                "paused": False,
                "fire_time_field": None,
                "cron": None,
            },
            request_id="req_console",
        )
        s.schedule_id = sch["id"]
        sub = subscriptions.create(
            conn,
            admin,
            "req_console",
            {
                "url": "https://93.184.215.14/hooks/ledgerflow?token=s3cret",
                "event_types": ["workflow.*"],
                "definition_id": None,
                "description": "the warehouse system",
            },
        )
        s.subscription_id = sub["id"]
        rule = automation.create_rule(
            conn,
            admin,
            "req_console",
            {
                "name": "restart-failed-risk",
                "event_type": "workflow.failed",
                "definition_id": s.defs["risk"],
                "conditions": [],
                "action": {
                    "kind": "start_workflow",
                    "definition_id": s.defs["risk"],
                    "version": "v1",
                    "input": {"customer": "$.event.workflow_id"},
                },
            },
        )
        s.rule_id = rule["id"]
    s.delivery_id = new_id()
    sql(
        "INSERT INTO webhook_deliveries (id, namespace_id, subscription_id, event_id, event_type, status, attempts, "
        "response_code, latency_ms, last_error) VALUES (:id, :ns, :sub, :ev, 'workflow.failed', 'failed', 3, 502, "
        "812, 'HTTP 502 from the receiver: Bad Gateway'), (:id2, :ns, :sub, :ev2, 'workflow.started', "
        "'succeeded', 1, 200, 41, NULL)",
        id=s.delivery_id,
        id2=new_id(),
        ns=admin.namespace_id,
        sub=s.subscription_id,
        # the failed delivery is of a real event (its page links the event's workflow)
        ev=sql(
            "SELECT id FROM workflow_events WHERE instance_id = :i AND type = 'workflow.failed'",
            i=s.wf["failed"],
        )[0][0],
        ev2=new_id(),
    )
    sql(
        "INSERT INTO automation_executions (id, namespace_id, rule_id, event_id, status, result, last_error) VALUES "
        "(:id, :ns, :r, :ev, 'succeeded', CAST(:res AS jsonb), NULL), (:id2, :ns, :r, :ev2, 'failed', NULL, "
        "'the pinned version refused the input: customer is required')",
        id=new_id(),
        id2=new_id(),
        ns=admin.namespace_id,
        r=s.rule_id,
        ev=new_id(),
        ev2=new_id(),
        res='{"workflow_id": "' + s.wf["failed"] + '"}',
    )
    with transaction() as conn:
        audit.record(
            conn,
            principal=admin,
            request_id="req_console",
            action="console.scenario",
            target_type="note",
            target_id=ns,
        )
    return s


def _dead_job() -> int:
    calls: list[int] = []
    real = handlers.registered().get("event_dispatch")

    def handler(ctx) -> dict:
        if ctx.payload.get("order") != 42 and real is not None:
            return real(ctx)
        calls.append(1)
        if len(calls) == 1:
            raise PermanentError("receiver returned 410 Gone for order 42")
        return {"delivered": True}

    handlers.register("event_dispatch", handler, replace=True)
    try:
        with transaction() as conn:
            job = enqueue(conn, "event_dispatch", {"event": "order.created", "order": 42}, max_attempts=3)
        run_pool(Pool.OUTBOUND, lambda: _job_status(job.id) == "dead")
    finally:
        if real is not None:
            handlers.register("event_dispatch", real, replace=True)
    return job.id


def pages(s: Scenario) -> list[tuple[str, str]]:
    """Every page of the console, (screenshot name, path), for an operator with every scope (the Flask
    client test renders them all; the browser suite checks each with axe-core and screenshots it)."""
    wf, order = s.wf, s.defs["order"]
    return [
        ("overview", "/console/overview"),
        ("overview-other-namespace", f"/console/overview?ns={s.other_ns}"),
        ("jobs", "/console/jobs"),
        ("jobs-dead", "/console/jobs?status=dead"),
        ("job-dead", f"/console/jobs/{s.dead_job}"),
        ("chain", f"/console/chain/{s.trace_id}"),
        ("clusters", "/console/jobs/clusters"),
        ("replay-preview", "/console/jobs/replay?statuses=dead&preview=1"),
        ("charts", "/console/charts"),
        ("health", "/console/health"),
        ("workflows", "/console/workflows"),
        ("workflows-other-namespace", f"/console/workflows?ns={s.other_ns}"),
        ("failure-groups", "/console/workflows/failure-groups"),
        ("workflow-running", f"/console/workflows/{wf['running']}"),
        ("workflow-failed", f"/console/workflows/{wf['failed']}"),
        ("workflow-compensated", f"/console/workflows/{wf['compensated']}"),
        ("workflow-needs-review", f"/console/workflows/{wf['review']}"),
        ("workflow-compensation-failed", f"/console/workflows/{wf['undo_failed']}"),
        ("step-compensation-failed", f"/console/workflows/{wf['undo_failed']}/steps/reserve"),
        ("step-failed-with-trace", f"/console/workflows/{wf['failed']}/steps/score"),
        ("workflow-waiting-for-signal", f"/console/workflows/{wf['signal']}"),
        ("workflow-other-namespace", f"/console/workflows/{wf['other']}"),
        ("workflow-branched", f"/console/workflows/{wf['branched']}"),
        ("step-skipped", f"/console/workflows/{wf['branched']}/steps/manual_approval"),
        ("step-fan-out", f"/console/workflows/{wf['branched']}/steps/reserve_lines"),
        ("step", f"/console/workflows/{wf['running']}/steps/cool_off"),
        ("signal-form", f"/console/workflows/{wf['signal']}/signal"),
        ("start-form", f"/console/workflows/start?definition_id={order}&version=v1"),
        ("tasks", "/console/tasks"),
        ("tasks-other-namespace", f"/console/tasks?ns={s.other_ns}"),
        ("schedules", "/console/schedules"),
        ("schedule", f"/console/schedules/{s.schedule_id}"),
        ("definitions", "/console/definitions"),
        ("definition", f"/console/definitions/{order}"),
        ("version", f"/console/definitions/{order}/versions/v1"),
        ("integrations", "/console/integrations"),
        ("subscription", f"/console/integrations/subscriptions/{s.subscription_id}"),
        ("rule", f"/console/integrations/rules/{s.rule_id}"),
        ("search", f"/console/search?q={s.business_key}-none"),
    ]
