"""Table definitions of the ledger (SPEC L-DATA). The Alembic migration creates exactly these;
``tests/db/test_schema.py`` compares the migrated schema with this metadata."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
    and_,
    func,
    literal_column,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, ENUM, JSONB, UUID
from sqlalchemy.sql.elements import ColumnElement

from app.ledger.states import AttemptStatus, JobStatus, JobType
from app.metadata import metadata


def sql_in(column: str, values: list[str] | tuple[str, ...]) -> str:
    """``column IN ('a', 'b')`` with the values as literals (a constraint, an index predicate, or a
    query that must match a partial index's predicate: a bound list cannot prove it)."""
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


JOB_STATUSES = [s.value for s in JobStatus]
ATTEMPT_STATUSES = [s.value for s in AttemptStatus]
JOB_TYPES = [t.value for t in JobType]
QUEUES = ["workflow-ledger", "workflow-ledger-outbound"]

# ``status``, ``type`` and ``queue`` are PostgreSQL enum types (migration 0016): 4 bytes in every row
# version and index entry instead of 10-25 bytes of text, and the types allow exactly the values above
# (they replaced the CHECK constraints). SQLAlchemy binds a value compared with these columns untyped,
# so PostgreSQL reads it as the enum; hand-written SQL states the type where it casts (``CAST(:x AS
# workflow_job_type[])``, never ``text[]``: an enum has no ``=`` with text), and a CASE or a literal
# that is *assigned* to one of these columns is cast to its type (``JOB_STATUS_TYPE``...).
JOB_STATUS_TYPE = "workflow_job_status"
JOB_TYPE_TYPE = "workflow_job_type"
JOB_QUEUE_TYPE = "workflow_job_queue"
ATTEMPT_STATUS_TYPE = "workflow_attempt_status"


def _enum(values: list[str], name: str) -> ENUM:
    return ENUM(*values, name=name, create_type=False)


# Columns are in order of width (migration 0016): 8-byte ones, then 4-byte ones (integers and enums),
# the uuid, then the variable-length and mostly NULL ones. No alignment padding falls between them,
# and a NULL costs one bit of the row's null bitmap.
jobs = Table(
    "workflow_jobs",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("run_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("finished_at", DateTime(timezone=True)),
    Column("lease_until", DateTime(timezone=True)),
    Column("execution_deadline", DateTime(timezone=True)),
    # The open attempt while the job runs (migration 0013): its start, its id (drawn from the attempts'
    # sequence) and, below, the claiming node. The move that ends the attempt writes its row in
    # workflow_job_executions from these and clears them (app/ledger/transitions/executor.py).
    Column("attempt_started_at", DateTime(timezone=True)),
    Column("attempt_id", BigInteger),
    Column("remaining_ms", BigInteger),
    Column("priority", Integer, nullable=False, server_default=text("0")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("max_attempts", Integer, nullable=False),
    Column("generation", Integer, nullable=False, server_default=text("1")),
    Column("execution_timeout_ms", Integer, nullable=False, server_default=text("600000")),
    Column("type", _enum(JOB_TYPES, JOB_TYPE_TYPE), nullable=False),
    Column("queue", _enum(QUEUES, JOB_QUEUE_TYPE), nullable=False),
    Column("status", _enum(JOB_STATUSES, JOB_STATUS_TYPE), nullable=False, server_default=text("'pending'")),
    Column("lease_token", UUID(as_uuid=False)),
    Column("payload", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("operation_key", Text, nullable=False),
    Column("trace_id", Text, nullable=False),
    Column("instance_id", Text),
    Column("task_id", Text),
    Column("step_key", Text),
    Column("idempotency_key", Text),
    Column("worker_id", Text),
    Column("error_code", Text),
    Column("last_error", Text),
    Column("result", JSONB),
    Column("effect_marker", JSONB),
    # W3C traceparent of the span that enqueued the job (NULL while tracing is off; migration 0007)
    Column("traceparent", Text),
    CheckConstraint("max_attempts >= 1", name="ck_workflow_jobs_max_attempts"),
    CheckConstraint("execution_timeout_ms > 0", name="ck_workflow_jobs_timeout"),
    CheckConstraint(
        "(status = 'running') = (lease_token IS NOT NULL)", name="ck_workflow_jobs_running_has_lease"
    ),
    CheckConstraint("(status = 'paused') = (remaining_ms IS NOT NULL)", name="ck_workflow_jobs_paused"),
    CheckConstraint("(status = 'running') = (attempt_id IS NOT NULL)", name="ck_workflow_jobs_open_attempt"),
)
# L-EFFECT-2: one parent job per business event; jobs without a key cost no index entry.
Index(
    "uq_workflow_jobs_idempotency_key",
    jobs.c.idempotency_key,
    unique=True,
    postgresql_where=text("idempotency_key IS NOT NULL"),
)

# The claim path: due pending jobs of one queue in priority order, and in due order (fairness).
Index(
    "ix_workflow_jobs_claim",
    jobs.c.queue,
    jobs.c.priority,
    jobs.c.run_at,
    jobs.c.id,
    postgresql_where=text("status = 'pending'"),
)
Index(
    "ix_workflow_jobs_claim_due",
    jobs.c.queue,
    jobs.c.run_at,
    jobs.c.id,
    postgresql_where=text("status = 'pending'"),
)
# The drain: running jobs by lease expiry.
Index("ix_workflow_jobs_running_lease", jobs.c.lease_until, postgresql_where=text("status = 'running'"))
Index("ix_workflow_jobs_instance", jobs.c.instance_id, postgresql_where=text("instance_id IS NOT NULL"))


# Lookups by trace id go through a 64-bit hash of it (migration 0015): a 16-byte index entry per job
# version, against 24 for a 15-character prefix and 48 for the whole id. Every lookup states both the
# hash and the whole id, so a collision costs a heap read, never a wrong row: ``trace_is`` (SQLAlchemy)
# or ``trace_match_sql`` (SQL text).
def _trace_hash(value: Any) -> ColumnElement[int]:
    """The trace index's key of ``value`` (a column or a trace id), as the index states it."""
    return func.hashtextextended(value, literal_column("0"))


Index("ix_workflow_jobs_trace", _trace_hash(jobs.c.trace_id))


def trace_is(trace_id: str) -> ColumnElement[bool]:
    """``workflow_jobs.trace_id = trace_id``, in the form the trace index serves."""
    return and_(_trace_hash(jobs.c.trace_id) == _trace_hash(trace_id), jobs.c.trace_id == trace_id)


def trace_match_sql(column: str, param: str) -> str:
    """SQL text of ``column = :param`` for a trace id column of workflow_jobs, in the form the trace
    index serves (``param`` names the bound trace id)."""
    return (
        f"hashtextextended({column}, 0) = hashtextextended(CAST(:{param} AS text), 0) AND {column} = :{param}"
    )


Index("ix_workflow_jobs_status_type", jobs.c.status, jobs.c.type)
# The newest-first job list: ``created_at`` only (migration 0015); ``ORDER BY created_at, id`` adds an
# incremental sort of each group of equal ``created_at``, and the versions of a job and the jobs of one
# transaction share one deduplicated entry.
# fillfactor 100 here and on the retention indexes (migration 0016): their keys grow at the right edge.
Index("ix_workflow_jobs_created", jobs.c.created_at, postgresql_with={"fillfactor": 100})
# Retention (app/ledger/retention.py): finished jobs and dead letters by age, one partial index per
# retention (migration 0016), so an entry is ``finished_at`` alone. A sweep states its statuses as these
# literals (``FINISHED`` / ``DEAD_LETTERS``), or the planner cannot use the index.
FINISHED = ("succeeded", "canceled")
DEAD_LETTERS = ("dead", "failed")
Index(
    "ix_workflow_jobs_finished",
    jobs.c.finished_at,
    postgresql_where=text(sql_in("status", FINISHED)),
    postgresql_with={"fillfactor": 100},
)
Index(
    "ix_workflow_jobs_dead_letters",
    jobs.c.finished_at,
    postgresql_where=text(sql_in("status", DEAD_LETTERS)),
    postgresql_with={"fillfactor": 100},
)

# One row per *final* attempt, written once by the move that ends it (settle, reclaim, suspend, cancel);
# the running attempt lives on its job row until then. Keyed by (job, generation, attempt); ``id`` is
# the attempt's id (a span id, shown by the API), drawn at claim from its sequence and never looked up.
executions = Table(
    "workflow_job_executions",
    metadata,
    # DEFAULT nextval('workflow_job_executions_id_seq') (migration 0031; the claim draws it on the job row)
    Column("id", BigInteger, nullable=False),
    # no foreign key (migration 0031): the job retention removes a job, its attempts go with their day
    Column("job_id", BigInteger, nullable=False),
    Column("due_at", DateTime(timezone=True), nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("finished_at", DateTime(timezone=True)),
    Column("generation", Integer, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("duration_ms", Integer),
    Column(
        "status",
        _enum(ATTEMPT_STATUSES, ATTEMPT_STATUS_TYPE),
        nullable=False,
        server_default=text("'running'"),
    ),
    # written by rows from before migration 0013 only; the job row holds the running attempt's token
    Column("lease_token", UUID(as_uuid=False)),
    Column("worker_id", Text),
    Column("error_code", Text),
    Column("error", Text),
    Column("request", JSONB),
    Column("response", JSONB),
    # each partition's key (migration 0031; the parent has none): (job_id, generation, attempt), fillfactor
    # 100 (rows are never updated and the key grows at the right edge), and an index on started_at
    PrimaryKeyConstraint("job_id", "generation", "attempt", name="workflow_job_executions_pkey"),
    postgresql_partition_by="RANGE (started_at)",
)
# Partitioned by day on ``started_at`` (``app.ledger.partitions.EXECUTIONS``). Lookups by job go through
# each partition's key (job_id leads).

# The runtime status rollup (app/ledger/rollup.py): per minute and queue, the attempts started in that
# minute once they are final (count, failed, duration sum and samples, queue-wait histogram with the
# buckets of app/ledger/histogram.py). Kept about two hours; the status reads the last hour from it.
attempt_minutes = Table(
    "workflow_attempt_minutes",
    metadata,
    Column("minute", DateTime(timezone=True), primary_key=True),
    Column("queue", Text, primary_key=True),
    Column("attempts", Integer, nullable=False),
    Column("failed", Integer, nullable=False),
    Column("duration_sum_ms", BigInteger, nullable=False),
    Column("duration_n", Integer, nullable=False),
    Column("wait_hist", ARRAY(Integer), nullable=False),
)

effects = Table(
    "workflow_job_effects",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("operation_key", Text, nullable=False),
    Column("step_key", Text, nullable=False),
    Column("job_id", BigInteger, ForeignKey("workflow_jobs.id", ondelete="SET NULL")),
    Column("generation", Integer),
    Column("result", JSONB),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("operation_key", "step_key", name="uq_workflow_job_effects_step"),
)
Index("ix_workflow_job_effects_orphaned", effects.c.created_at, postgresql_where=text("job_id IS NULL"))
# The removal of a job sets its effects' job_id to NULL (``ON DELETE SET NULL``; migration 0032_fk_indexes).
Index("ix_workflow_job_effects_job", effects.c.job_id, postgresql_where=text("job_id IS NOT NULL"))

worker_nodes = Table(
    "workflow_worker_nodes",
    metadata,
    Column("node_id", Text, primary_key=True),
    Column("hostname", Text, nullable=False),
    Column("pid", Integer, nullable=False),
    Column("roles", ARRAY(Text), nullable=False),
    Column("pools", ARRAY(Text), nullable=False),
    Column("slot_capacity", Integer, nullable=False, server_default=text("0")),
    Column("slots_in_use", Integer, nullable=False, server_default=text("0")),
    Column("status", Text, nullable=False, server_default=text("'active'")),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # the node's own clock when it sent its last heartbeat: node_clock_at - heartbeat_at = its skew
    Column("node_clock_at", DateTime(timezone=True)),
    CheckConstraint(
        sql_in("status", ["active", "stopping", "stopped"]), name="ck_workflow_worker_nodes_status"
    ),
)
Index("ix_workflow_worker_nodes_heartbeat", worker_nodes.c.heartbeat_at)

# A maintenance run's lease (migration 0039): the drain holds ``name = 'drain'`` across its transactions,
# renews it in each, and a holder that stopped renewing loses it at ``expires_at`` (``app.ledger.drain``).
run_leases = Table(
    "ledger_run_leases",
    metadata,
    Column("name", Text, primary_key=True),
    Column("holder", Text, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)
