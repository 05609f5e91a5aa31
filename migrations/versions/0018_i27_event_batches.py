"""A workflow step costs fewer row writes: events and engine audit entries are written as one
batch row per transaction and instance, and the quota counts are written once per transaction by the
engine instead of by row triggers.

- ``workflow_event_batches``: one row per (transaction, instance) holding the events of that
  transaction (``events``: ``[{"type", "data"}]``, numbered ``first_seq`` .. ``last_seq`` in the
  instance's sequence) and the engine's audit entries of its advances (``audit``), with the instance
  summary as the transaction left it. The sequence continues from the instance's newest batch (the
  instance row is locked by every writer of its events), so ``workflow_instances.event_seq`` is gone:
  an event no longer costs an update of the instance row.
- The view ``workflow_events`` shows one row per event, as the table of that name did (id, seq, type,
  body, dispatch job ...); an event's id is its batch's id with the event's ordinal in the last three
  hex digits. The view ``workflow_operations`` shows the operation audit rows and the engine's audit
  entries together (an entry's ordinal is 2048 + its index).
- ``workflow_instances.paused_at``: when a paused instance was paused; its resume moves the deadlines of
  its open tasks on by the pause (the instance's ONE ``task_timeout`` job enforces them all now, not a
  job per task whose remainder each task's deadline followed).
- ``workflow_quota_counts``: the row triggers of migration 0017 are dropped (the engine adds one
  transaction's changes with one statement at its commit: ``app.engine.quotas``); ``pending`` (PENDING
  tasks per queue) becomes ``open_by_queue`` (PENDING or CLAIMED per queue: a claim changes no count;
  pending = open - live claims, counted through ``ix_workflow_tasks_claimed_lease``).

Existing events become batches of one event (their ids keep their first 29 hex digits, so webhook
deliveries and rule executions are re-pointed the same way).

Revision ID: 0018_i27
Revises: 0017_i16
Create Date: 2026-12-02
"""

from alembic import op

from app.migrate import migration_module

revision = "0018_i27"
down_revision = "0017_i16"
branch_labels = None
depends_on = None

EVENTS_VIEW = """
CREATE VIEW workflow_events AS
SELECT left(b.id, 29) || lpad(to_hex((e.ord - 1)::int), 3, '0') AS id, b.id AS batch_id, b.namespace_id,
       b.instance_id, b.first_seq + e.ord - 1 AS seq, e.ev ->> 'type' AS type, b.definition_id,
       jsonb_build_object('instance', b.instance, 'trace_id', b.trace_id) || (e.ev -> 'data') AS body,
       b.dispatch_job_id, b.created_at
FROM workflow_event_batches b CROSS JOIN LATERAL jsonb_array_elements(b.events) WITH ORDINALITY AS e(ev, ord)
"""

OPERATIONS_VIEW = """
CREATE VIEW workflow_operations AS
SELECT id, NULL::text AS batch_id, namespace_id, actor_id, actor_name, action, target_type, target_id, workflow_id,
       operation_id, reason, evidence_ref, request_id, before, after, created_at
FROM operation_audit
UNION ALL
SELECT left(b.id, 29) || lpad(to_hex((2047 + a.ord)::int), 3, '0'), b.id, b.namespace_id, 'system:engine',
       'ledgerflow engine', a.e ->> 'action', a.e ->> 'target_type', a.e ->> 'target_id', b.instance_id,
       a.e ->> 'operation_id', NULL, NULL, NULL, a.e -> 'before', a.e -> 'after', b.audited_at
FROM workflow_event_batches b CROSS JOIN LATERAL jsonb_array_elements(b.audit) WITH ORDINALITY AS a(e, ord)
"""


def upgrade() -> None:
    op.execute(
        """
CREATE TABLE workflow_event_batches (
    id text PRIMARY KEY,
    namespace_id text NOT NULL,
    instance_id text NOT NULL,
    first_seq bigint,
    last_seq bigint,
    definition_id text NOT NULL,
    instance jsonb NOT NULL,
    trace_id text NOT NULL,
    events jsonb NOT NULL DEFAULT '[]'::jsonb,
    audit jsonb NOT NULL DEFAULT '[]'::jsonb,
    dispatch_job_id bigint,
    created_at timestamptz NOT NULL DEFAULT now(),
    audited_at timestamptz NOT NULL DEFAULT clock_timestamp()
)"""
    )
    op.execute(
        "CREATE UNIQUE INDEX uq_workflow_event_batches_seq ON workflow_event_batches (instance_id, last_seq)"
    )
    op.execute(
        "CREATE INDEX ix_workflow_event_batches_instance ON workflow_event_batches (namespace_id, instance_id)"
    )
    op.execute(
        "CREATE INDEX ix_workflow_event_batches_dispatch ON workflow_event_batches (dispatch_job_id) "
        "WHERE dispatch_job_id IS NOT NULL"
    )
    op.execute("CREATE INDEX ix_workflow_event_batches_created ON workflow_event_batches (created_at)")
    op.execute(
        """
INSERT INTO workflow_event_batches (id, namespace_id, instance_id, first_seq, last_seq, definition_id, instance,
    trace_id, events, dispatch_job_id, created_at, audited_at)
SELECT left(id, 29) || '000', namespace_id, instance_id, seq, seq, definition_id, COALESCE(body -> 'instance', '{}'),
       COALESCE(body ->> 'trace_id', ''),
       jsonb_build_array(jsonb_build_object('type', type, 'data', body - 'instance' - 'trace_id')),
       dispatch_job_id, created_at, created_at
FROM workflow_events
"""
    )
    op.execute("UPDATE webhook_deliveries SET event_id = left(event_id, 29) || '000'")
    op.execute("UPDATE automation_executions SET event_id = left(event_id, 29) || '000'")
    op.execute("DROP TABLE workflow_events")
    op.execute("ALTER TABLE workflow_instances DROP COLUMN event_seq")
    op.execute("ALTER TABLE workflow_instances ADD COLUMN paused_at timestamptz")
    op.execute("UPDATE workflow_instances SET paused_at = updated_at WHERE paused")
    op.execute(EVENTS_VIEW)
    op.execute(OPERATIONS_VIEW)
    # quota counts: written by the engine once per transaction
    for table, what in (
        ("workflow_instances", "insert"),
        ("workflow_instances", "update"),
        ("workflow_instances", "delete"),
        ("workflow_tasks", "insert"),
        ("workflow_tasks", "update"),
        ("workflow_tasks", "delete"),
    ):
        op.execute(f"DROP TRIGGER {table}_quota_{what} ON {table}")
    op.execute("DROP FUNCTION workflow_quota_count()")
    op.execute("LOCK TABLE workflow_tasks IN SHARE MODE")
    op.execute("ALTER TABLE workflow_quota_counts RENAME COLUMN pending TO open_by_queue")
    op.execute("UPDATE workflow_quota_counts SET open_by_queue = '{}'::jsonb WHERE stripe <> 0")
    op.execute(
        """
UPDATE workflow_quota_counts c SET open_by_queue = COALESCE((
    SELECT jsonb_object_agg(queue, n) FROM (
        SELECT queue, count(*) AS n FROM workflow_tasks t
        WHERE t.namespace_id = c.namespace_id AND t.state IN ('PENDING', 'CLAIMED') GROUP BY queue) q), '{}')
WHERE c.stripe = 0
"""
    )
    op.execute(
        """
INSERT INTO workflow_quota_counts (namespace_id, stripe, open_by_queue)
SELECT namespace_id, 0, jsonb_object_agg(queue, n) FROM (
    SELECT namespace_id, queue, count(*) AS n FROM workflow_tasks WHERE state IN ('PENDING', 'CLAIMED')
    GROUP BY namespace_id, queue) q
GROUP BY namespace_id
ON CONFLICT (namespace_id, stripe) DO NOTHING
"""
    )


def downgrade() -> None:
    op.execute(
        "CREATE TABLE workflow_events_old AS SELECT id, namespace_id, instance_id, seq, type, definition_id, body, "
        "dispatch_job_id, created_at FROM workflow_events"
    )
    op.execute("DROP VIEW workflow_operations")
    op.execute("DROP VIEW workflow_events")
    op.execute("ALTER TABLE workflow_events_old RENAME TO workflow_events")
    op.execute("ALTER TABLE workflow_events ADD PRIMARY KEY (id)")
    op.execute("ALTER TABLE workflow_events ALTER COLUMN created_at SET DEFAULT now()")
    op.execute(
        "ALTER TABLE workflow_events ADD CONSTRAINT uq_workflow_events_instance_seq UNIQUE (instance_id, seq)"
    )
    op.execute(
        "CREATE INDEX ix_workflow_events_dispatch ON workflow_events (dispatch_job_id) WHERE dispatch_job_id IS NOT NULL"
    )
    op.execute("CREATE INDEX ix_workflow_events_created ON workflow_events (created_at)")
    op.execute("ALTER TABLE workflow_instances DROP COLUMN paused_at")
    op.execute("ALTER TABLE workflow_instances ADD COLUMN event_seq bigint NOT NULL DEFAULT 0")
    op.execute(
        "UPDATE workflow_instances i SET event_seq = m.s FROM (SELECT instance_id, max(seq) AS s FROM workflow_events "
        "GROUP BY instance_id) m WHERE m.instance_id = i.id"
    )
    op.execute("DROP TABLE workflow_event_batches")
    m0017 = migration_module("0017_i16_quota_counts")  # its trigger function and triggers
    op.execute("LOCK TABLE workflow_instances, workflow_tasks IN SHARE MODE")
    op.execute("ALTER TABLE workflow_quota_counts RENAME COLUMN open_by_queue TO pending")
    op.execute("DELETE FROM workflow_quota_counts")
    op.execute(m0017._FUNCTION)
    for trigger in m0017._TRIGGERS:
        op.execute(trigger)
    op.execute(m0017._FILL)
