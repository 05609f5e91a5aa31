"""Tables of the workflow engine (SPEC W-*, X-DEF, X-TASK, W-SIG, X-AUTO): today's schema, which the
migrations ``0003``-``0005`` build (``tests/db/test_schema.py`` compares them).

JSON documents (inputs, outputs, definition documents) are ``jsonb``: PostgreSQL keeps numeric
precision, and the engine reads them back as text and parses them with ``Decimal`` for non-integers
(``app.engine.jsonutil``) so no number ever passes through a float. SQL ``NULL`` means "absent";
the JSON value ``null`` is stored as ``'null'::jsonb`` (explicit null kept).
"""

from __future__ import annotations

from enum import StrEnum

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSON, JSONB

from app.engine.states import (
    InstanceState,
    SignalState,
    StepKind,
    StepState,
    TaskPurpose,
    TaskState,
    WaitState,
    values,
)
from app.ledger.replay import normalized_error_sql
from app.metadata import metadata

# the normalised message of an instance's error (``app.engine.finding.ERROR_GROUP_SQL``: the same expression)
ERROR_GROUP_SQL = normalized_error_sql("error->>'message'")


def _in(column: str, enum: type[StrEnum]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values(enum))})"


definitions = Table(
    "workflow_definitions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("namespace_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("description", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("namespace_id", "name", name="uq_workflow_definitions_name"),
)

definition_versions = Table(
    "workflow_definition_versions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("definition_id", Text, ForeignKey("workflow_definitions.id"), nullable=False),
    Column("namespace_id", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("document", JSONB, nullable=False),
    Column("queues", ARRAY(Text), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("definition_id", "version", name="uq_workflow_definition_versions_version"),
)

instances = Table(
    "workflow_instances",
    metadata,
    Column("id", Text, primary_key=True),
    Column("namespace_id", Text, nullable=False),
    # the definition and version it runs: no foreign key (migration 0035: a start would lock both rows,
    # shared by every instance of the definition); neither table ever loses a row (trigger ``never_deleted``)
    Column("definition_id", Text, nullable=False),
    Column("definition_version_id", Text, nullable=False),
    Column("version", Text, nullable=False),
    Column("state", Text, nullable=False),
    Column("revision", BigInteger, nullable=False, server_default=text("1")),
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    Column("paused_at", DateTime(timezone=True)),  # when it was paused (its resume moves task deadlines on)
    Column("control_revision", BigInteger, nullable=False, server_default=text("1")),
    Column("input", JSONB, nullable=False),
    Column("business_key", Text, nullable=False, server_default=text("''")),
    Column("queues", ARRAY(Text), nullable=False),
    Column("deadline_at", DateTime(timezone=True), nullable=False),
    Column("output", JSONB),
    Column("cancel_requested_at", DateTime(timezone=True)),
    Column("stop_kind", Text),
    Column("stop_requested_at", DateTime(timezone=True)),
    Column("completed_at", DateTime(timezone=True)),
    Column("error", JSONB),
    Column("trace_id", Text, nullable=False),
    # saga progress (X-AUTO, app.engine.stopping): {"plan": [{step_key, activation_id, queue}], "index": k,
    # "task_id", "state": RUNNING | FAILED | DONE | ABANDONED, "final": CANCELLED | FAILED}; NULL otherwise
    Column("compensation", JSONB),
    Column("parent_instance_id", Text),
    Column("parent_step_key", Text),
    # a child started by a fan-out (a SUBWORKFLOW step with ``for_each``, migration 0031): the parent step's
    # activation and the element's index; NULL for every other instance
    Column("parent_activation_id", Text),
    Column("parent_element", Integer),
    # X-SCHED: the schedule (app.integrations) and the fire time that launched the instance; no foreign
    # key: an instance outlives a deleted schedule
    Column("schedule_id", Text),
    Column("schedule_fire_at", DateTime(timezone=True)),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # X-AUTO: the automation rules that led to an instance a rule started, oldest first (the last
    # one started it; the length is its automation depth); NULL when no rule started it
    Column("automation_chain", ARRAY(Text)),
    # W-START-7: the Idempotency-Key of the ``POST /v1/workflows`` request that created the instance and
    # that request's fingerprint (migration 0021); NULL for a start without a key (console, schedule,
    # rule, child) and once a start with the same key, after the key's retention, took it over
    Column("start_key", Text),
    Column("start_fingerprint", Text),
    # an operator's hold: retention keeps the finished workflow at least until then (migration 0030)
    Column("hold_until", DateTime(timezone=True)),
    # the failure group of its error (issue 47, migration 0026): generated by PostgreSQL from ``error``
    Column("fail_step", Text, Computed("error->>'step_key'", persisted=True)),
    Column("fail_code", Text, Computed("error->>'code'", persisted=True)),
    Column("fail_group", Text, Computed(ERROR_GROUP_SQL, persisted=True)),
    # the state while FAILED or NEEDS_REVIEW, else NULL (migration 0034): kept by the trigger
    # ``workflow_instances_fail_state``, so that the failure groups' index need not read ``state``
    Column("fail_state", Text),
    CheckConstraint(_in("state", InstanceState), name="ck_workflow_instances_state"),
    CheckConstraint(
        "(completed_at IS NOT NULL) = (state IN ('SUCCEEDED', 'FAILED', 'CANCELLED'))",
        name="ck_workflow_instances_ended",
    ),
    CheckConstraint(
        "fail_state IS NOT DISTINCT FROM (CASE WHEN state IN ('FAILED', 'NEEDS_REVIEW') THEN state END)",
        name="ck_workflow_instances_fail_state",
    ),
    CheckConstraint(
        "stop_kind IS NULL OR stop_kind IN ('CANCEL', 'FAILURE')", name="ck_workflow_instances_stop"
    ),
)
Index("ix_workflow_instances_list", instances.c.namespace_id, instances.c.created_at, instances.c.id)
# No index reads ``state`` (migration 0034): a move between open states (RUNNING <-> WAITING) is then a HOT
# update, written on the row's page without an entry in any index. ``completed_at`` is set exactly when the
# state is terminal and ``fail_state`` is the state while FAILED or NEEDS_REVIEW (both checked by constraints;
# ``fail_state`` kept by a trigger): the partial indexes say "unfinished", "finished" and "failing" by them.
Index(
    "ix_workflow_instances_unfinished",
    instances.c.namespace_id,
    postgresql_where=text("completed_at IS NULL"),
)
Index("ix_workflow_instances_business_key", instances.c.namespace_id, instances.c.business_key)
Index(  # finished workflows by end, per namespace (app.engine.retention, app.engine.summary)
    "ix_workflow_instances_finished",
    instances.c.namespace_id,
    instances.c.completed_at,
    instances.c.id,
    postgresql_where=text("completed_at IS NOT NULL"),
)
Index(
    "ix_workflow_instances_schedule",
    instances.c.schedule_id,
    instances.c.created_at,
    postgresql_where=text("schedule_id IS NOT NULL"),
)
Index(
    "uq_workflow_instances_start_key",
    instances.c.namespace_id,
    instances.c.start_key,
    unique=True,
    postgresql_where=text("start_key IS NOT NULL"),
)
Index(
    "ix_workflow_instances_parent",
    instances.c.parent_instance_id,
    postgresql_where=text("parent_instance_id IS NOT NULL"),
)
Index(  # a fan-out activation's children in element order (migration 0031)
    "ix_workflow_instances_fanout",
    instances.c.parent_activation_id,
    instances.c.parent_element,
    postgresql_where=text("parent_activation_id IS NOT NULL"),
)
# Find by what operators see (migration 0026, ``app.engine.finding``): an id prefix of >= 8 hex characters
# and a business-key prefix in any case are range scans of these; the failure groups read the FAILED and
# NEEDS_REVIEW instances of a namespace from the partial index.
Index(
    "ix_workflow_instances_key_lower",
    instances.c.namespace_id,
    func.lower(instances.c.business_key).label("business_key_lower"),
    postgresql_ops={"business_key_lower": "text_pattern_ops"},
)
Index(
    "ix_workflow_instances_failed",
    instances.c.namespace_id,
    instances.c.definition_id,
    instances.c.fail_step,
    instances.c.fail_code,
    instances.c.fail_group,
    instances.c.fail_state,
    instances.c.completed_at,
    postgresql_where=text("fail_state IS NOT NULL"),
)

# A rerun (``app.engine.rerun``, migration 0026): the new instance, the one it reruns (FAILED / CANCELLED),
# the step it reran from (NULL: from the start), the steps whose outputs it copied, the reason and who asked.
reruns = Table(
    "workflow_reruns",
    metadata,
    Column("instance_id", Text, ForeignKey("workflow_instances.id"), primary_key=True),
    Column("namespace_id", Text, nullable=False),
    Column("rerun_of", Text, ForeignKey("workflow_instances.id"), nullable=False),
    Column("from_step", Text),
    Column("reason", Text, nullable=False),
    Column("actor_id", Text, nullable=False),
    Column("copied_steps", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
)
Index("ix_workflow_reruns_of", reruns.c.rerun_of, reruns.c.created_at)


def _poll_columns() -> list[Column]:
    """POLL bookkeeping (W-STEP-3) of an activation."""
    return [
        Column("poll_used_rounds", Integer),
        Column("poll_first_round", Integer),
        Column("poll_first_round_attempts_used", Integer),
        Column("poll_round_attempts", Integer),
        Column("poll_deadline_at", DateTime(timezone=True)),
        Column("poll_last_task_id", Text),
        Column("poll_current_task_id", Text),
        Column("poll_next_at", DateTime(timezone=True)),
        Column("poll_resolved_at", DateTime(timezone=True)),
    ]


def _activation_columns() -> list[Column]:
    """The current activation's bookkeeping on its step row (nullable: a BLOCKED step has none)."""
    return [
        Column("task_attempts", Integer),
        Column("child_instance_id", Text),
        *_poll_columns(),
        Column("activated_at", DateTime(timezone=True)),
        Column("completed_at", DateTime(timezone=True)),
    ]


steps = Table(
    "workflow_steps",
    metadata,
    Column("id", Text, primary_key=True),
    Column("instance_id", Text, ForeignKey("workflow_instances.id"), nullable=False),
    Column("key", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("state", Text, nullable=False, server_default=text("'BLOCKED'")),
    Column("revision", BigInteger, nullable=False, server_default=text("1")),
    Column("after", ARRAY(Text), nullable=False),
    Column("activation_id", Text),
    Column("activation_sequence", Integer),
    Column("task_id", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # the current activation (``activation_id``, ``activation_sequence``): its own state, input,
    # output, error and bookkeeping live on the step row; a replaced one is copied to workflow_activations
    Column("act_state", Text),
    Column("act_input", JSONB),
    Column("act_output", JSONB),
    Column("act_error", JSONB),
    *_activation_columns(),
    # a rerun's copied step (SUCCEEDED, never run here): the instance whose output it copied (migration 0026)
    Column("copied_from", Text),
    CheckConstraint(_in("state", StepState), name="ck_workflow_steps_state"),
    CheckConstraint(_in("act_state", StepState), name="ck_workflow_steps_act_state"),
    CheckConstraint(_in("kind", StepKind), name="ck_workflow_steps_kind"),
    UniqueConstraint("instance_id", "key", name="uq_workflow_steps_key"),
)

# Activations a later activation of the same step replaced (an operator's RETRY_STEP), copied from the
# step row by ``step_moves.insert_activation``; ``workflow_all_activations`` (a view, migration 0019) is
# this table plus every step's current activation, which is what the history reads.
activations = Table(
    "workflow_activations",
    metadata,
    Column("id", Text, primary_key=True),
    Column("instance_id", Text, ForeignKey("workflow_instances.id"), nullable=False),
    Column("step_id", Text, ForeignKey("workflow_steps.id"), nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("state", Text, nullable=False),
    Column("input", JSONB),
    Column("output", JSONB),
    Column("error", JSONB),
    Column("task_attempts", Integer, nullable=False, server_default=text("0")),
    Column("child_instance_id", Text),
    *_poll_columns(),
    Column("activated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("completed_at", DateTime(timezone=True)),
    CheckConstraint(_in("state", StepState), name="ck_workflow_activations_state"),
    UniqueConstraint("step_id", "sequence", name="uq_workflow_activations_sequence"),
)
Index("ix_workflow_activations_instance", activations.c.instance_id)
# a task, a wait or a job names an activation: the step that runs it now
Index(
    "ix_workflow_steps_activation",
    steps.c.activation_id,
    postgresql_where=text("activation_id IS NOT NULL"),
)

waits = Table(
    "workflow_waits",
    metadata,
    Column("id", Text, primary_key=True),
    Column("instance_id", Text, ForeignKey("workflow_instances.id"), nullable=False),
    Column("activation_id", Text, nullable=False),  # the step's current activation or a replaced one
    Column("kind", Text, nullable=False),
    Column("state", Text, nullable=False, server_default=text("'WAITING'")),
    Column("name", Text),
    Column("payload_version", Text),
    Column("correlation_key", Text),
    Column("deadline_at", DateTime(timezone=True)),
    Column("winner_signal_id", Text),
    Column("resolved_at", DateTime(timezone=True)),
    # the operation key of the delay_wake job that resolved (timer) or expired (signal timeout) the wait:
    # its receipt (``handlers.timers.WaitReceipt``); NULL when a signal, a poll or a cancel ended it
    Column("resolved_by_operation", Text),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint(_in("state", WaitState), name="ck_workflow_waits_state"),
    CheckConstraint("kind IN ('SIGNAL', 'TIMER')", name="ck_workflow_waits_kind"),
    UniqueConstraint("activation_id", name="uq_workflow_waits_activation"),
)
# An instance's waits: the end of an instance cancels its WAITING ones (migration 0023; before, that UPDATE read
# every wait of every tenant), and the removal of an instance checks the foreign key by it (migration
# 0032_fk_indexes: the partial index of before could not answer that check).
Index("ix_workflow_waits_instance", waits.c.instance_id)

tasks = Table(
    "workflow_tasks",
    metadata,
    Column("id", Text, primary_key=True),
    Column("namespace_id", Text, nullable=False),
    Column("instance_id", Text, ForeignKey("workflow_instances.id"), nullable=False),
    # the step that inserted it, in the same transaction (no foreign key, migration 0036: its check locked
    # the step's row at each task's commit; the task's key to its instance stays)
    Column("step_id", Text, nullable=False),
    Column("step_key", Text, nullable=False),
    Column("activation_id", Text, nullable=False),  # the step's current activation or a replaced one
    Column("queue", Text, nullable=False),
    Column("state", Text, nullable=False, server_default=text("'PENDING'")),
    Column("input", JSONB),
    # NULL on a COMPLETED task whose completion closed its step: the output is its activation's, kept once
    # (``task_moves.TASK_OUTPUT`` reads it there)
    Column("output", JSONB),
    Column("error", JSONB),
    Column("epoch", Integer, nullable=False, server_default=text("0")),
    Column("attempt", Integer, nullable=False, server_default=text("1")),
    Column("poll_round", Integer),
    Column("lease_expires_at", DateTime(timezone=True)),
    Column("deadline_at", DateTime(timezone=True), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("completed_at", DateTime(timezone=True)),
    # the instance's created_at, the claim order's first key (migration 0025): written with every task; NULL
    # only on tasks closed before that migration
    Column("instance_created_at", DateTime(timezone=True)),
    # a step's own task (STEP) or a compensation task created by a compensation_action job (COMPENSATION)
    Column("purpose", Text, nullable=False, server_default=text("'STEP'")),
    # the Idempotency-Key and request fingerprint of the claim that holds the current epoch (NULL: a claim
    # without a key, or never claimed): the claim's receipt (``task_moves.claim``, migration 0019)
    Column("claim_key", Text),
    Column("claim_fingerprint", Text),
    # the Idempotency-Key of the result (``/complete`` or ``/fail``) that ended the claim (NULL: a batch item,
    # a time-out or a cancel): the same key with another body is told apart (migration 0026_task_result_key)
    Column("result_key", Text),
    # who ran the attempt and how it failed (migration 0026, ``app.engine.traces``): the identity of the worker
    # of the latest claim ({host, pid, sdk}) and the failure it reported ({type, message, stack, worker})
    Column("worker", JSONB),
    Column("failure", JSONB),
    # the element index of a fan-out step's task (a TASK step with ``for_each``; migration 0027), else NULL
    Column("element", Integer),
    # on an element's failed task: when the element's next attempt starts (its step's retry backoff,
    # migration 0031), else NULL; the element counts as running meanwhile
    Column("next_attempt_at", DateTime(timezone=True)),
    CheckConstraint(_in("state", TaskState), name="ck_workflow_tasks_state"),
    CheckConstraint(_in("purpose", TaskPurpose), name="ck_workflow_tasks_purpose"),
)
# The claim path: open tasks of a queue in claim order, the workflows started first (instance_created_at),
# then created_at and id (CLAIMED ones come back once their lease expired), read in order up to the tasks a
# claim takes (migrations 0022, 0025); the quota check counts a namespace's and a queue's open tasks from it.
Index(
    "ix_workflow_tasks_claim",
    tasks.c.namespace_id,
    tasks.c.queue,
    tasks.c.instance_created_at,
    tasks.c.created_at,
    tasks.c.id,
    postgresql_where=text("state IN ('PENDING', 'CLAIMED')"),
)
Index("ix_workflow_tasks_instance", tasks.c.instance_id)
# A resent claim finds the tasks its key claimed (``task_moves.claim``).
Index(
    "ix_workflow_tasks_claim_key",
    tasks.c.namespace_id,
    tasks.c.claim_key,
    postgresql_where=text("claim_key IS NOT NULL"),
)
# The quota check's claims whose lease expired (pending again): only claimed tasks, the work in flight.
Index(
    "ix_workflow_tasks_claimed_lease",
    tasks.c.namespace_id,
    tasks.c.queue,
    tasks.c.lease_expires_at,
    postgresql_where=text("state = 'CLAIMED'"),
)

# W-START-8 / W-ERR quotas without counting the instances at every start (migrations 0017, 0018_i27,
# 0019_quota_tasks): per namespace and stripe (the committing backend's pid modulo 64), the unfinished
# instances. ``app.engine.quotas`` adds a transaction's change with one statement at its commit (a start
# or an end of an instance; none when they cancel out); ``app.engine.quotas.check`` sums the stripes and
# counts the open tasks from ``ix_workflow_tasks_claim``.
quota_counts = Table(
    "workflow_quota_counts",
    metadata,
    Column("namespace_id", Text, primary_key=True),
    Column("stripe", SmallInteger, primary_key=True),
    Column("unfinished", BigInteger, nullable=False, server_default=text("0")),
)

signals = Table(
    "workflow_signals",
    metadata,
    Column("id", Text, primary_key=True),
    Column("namespace_id", Text, nullable=False),
    Column("instance_id", Text, ForeignKey("workflow_instances.id"), nullable=False),
    Column("revision", BigInteger, nullable=False, server_default=text("1")),
    Column("name", Text, nullable=False),
    Column("payload_version", Text, nullable=False),
    Column("target_step_key", Text, nullable=False),
    Column("target_activation_sequence", BigInteger, nullable=False),
    Column("correlation_key", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("actor_id", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("evidence_ref", Text),
    Column("state", Text, nullable=False),
    Column("disposition", Text),
    Column("consumed_wait_id", Text),
    Column("accepted_at", DateTime(timezone=True), nullable=False, server_default=func.clock_timestamp()),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("resolved_at", DateTime(timezone=True)),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint(_in("state", SignalState), name="ck_workflow_signals_state"),
)
Index("ix_workflow_signals_instance", signals.c.instance_id, signals.c.accepted_at, signals.c.id)
Index(
    "ix_workflow_signals_pending",
    signals.c.instance_id,
    signals.c.target_step_key,
    signals.c.target_activation_sequence,
    postgresql_where=text("state = 'PENDING'"),
)
Index("ix_workflow_signals_settled", signals.c.resolved_at, postgresql_where=text("state <> 'PENDING'"))

# The events outbox (X-EVENT) and the engine's audit entries, one row per transaction and instance
# (migration 0018_i27): ``events`` holds the events of the transaction, numbered ``first_seq`` ..
# ``last_seq`` in the instance's sequence (NULL when the transaction audited without an event), ``audit``
# the audit entries of the engine's advances, ``instance`` the instance summary as the transaction left
# it. Written by ``app.engine.events`` at commit; read through the views ``workflow_events`` (one row per
# event) and ``workflow_operations`` (the operation audit with the engine's entries). ``dispatch_job_id``
# names the ``event_dispatch`` job that fans the batch out (NULL when the namespace had no subscription
# or rule at that moment). ``audit`` also holds the ``workflow.start`` entry of a start, with its actor
# (migration 0021), and ``start_response`` the exact response of a ``POST /v1/workflows`` on the batch
# that start wrote for its instance (NULL on every other batch; ``app.engine.start_keys``; since migration
# 0040 a long input is not repeated there: ``commit_batch.stored_response``). A row written
# since migration 0031 is compact (``app.engine.commit_batch``): ``instance`` is the state (``{"state", "paused": true}`` while paused),
# ``definition_id`` and ``trace_id`` are '' (the views read them from the instance row), and a start
# entry whose ``after`` is the response's instance says ``"after_in_response": true`` instead. Since
# migration 0038 a row keeps its events and audit entries as the JSON text written (``events_json``,
# ``audit_json``: ``json``, NULL for none; ``jsonb`` spent ~40 % more bytes on them); a row written before
# keeps them in ``events`` / ``audit`` (``jsonb``), and the views read either.
event_batches = Table(
    "workflow_event_batches",
    metadata,
    Column("id", Text, primary_key=True),  # unique within its partition
    Column("namespace_id", Text, nullable=False),
    Column("instance_id", Text, nullable=False),
    Column("first_seq", BigInteger),
    Column("last_seq", BigInteger),
    Column("definition_id", Text, nullable=False),
    Column("instance", JSONB, nullable=False),
    Column("trace_id", Text, nullable=False),
    Column("events", JSONB),  # rows written before migration 0038 (NULL since)
    Column("audit", JSONB),  # likewise
    Column("dispatch_job_id", BigInteger),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("audited_at", DateTime(timezone=True), nullable=False, server_default=func.clock_timestamp()),
    Column("start_response", Text),
    Column("events_json", JSON),  # the events' JSON text as written (migration 0038; NULL: none)
    Column("audit_json", JSON),  # the audit entries' JSON text as written (NULL: none)
    postgresql_partition_by="RANGE (created_at)",
)
# Partitioned by week on ``created_at`` (migration 0031): the parent has no index; every partition has the
# key on ``id``, a unique (instance_id, last_seq), the dispatch job (partial) and
# created_at (``app.engine.retention.EVENT_BATCHES``).
