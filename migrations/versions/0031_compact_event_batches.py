"""A workflow's event batches in fewer bytes (issue 50): a batch row stores what its transaction changed,
not what the instance row already holds.

- ``workflow_event_batches.instance`` of a new row is the instance's state as the transaction left it (a
  JSON string; ``{"state", "paused": true}`` when the instance is paused); its ``definition_id`` and ``trace_id`` are ''. The view ``workflow_events`` builds every event's
  body as before: the instance summary (``id``, ``definition_id``, ``version``, ``business_key``: what
  never changes, read from ``workflow_instances``; ``state`` and ``paused`` from the row) and the trace
  id, then the event's data. A row written before this migration (``definition_id`` not '') is read as
  it is: existing rows are not rewritten.
- A start's ``workflow.start`` audit entry whose ``after`` is, text for text, the instance object of the
  start's response (``start_response``) stores ``"after_in_response": true`` instead of a second copy;
  the view ``workflow_operations`` reads ``after`` from the response for such an entry.
- An engine audit entry of a step whose event is in the same row stores ``{"ev": index}`` (and what of
  ``after`` the event does not say) instead of its action, target and ``after``; the view rebuilds them
  from the event. An engine entry stores no ``operation_id`` (each was a fresh id used nowhere else):
  the view shows the entry's own id, as the API already did for an entry without one.
- ``ix_workflow_event_batches_instance`` (namespace, instance) is dropped: every read of an instance's
  batches names the instance, and ``uq_workflow_event_batches_seq`` (instance, last_seq) serves it.

- ``workflow_instances``, ``workflow_steps``, ``workflow_tasks`` and ``workflow_waits`` are vacuumed after
  1,000 + 1 % dead rows (the ledger's thresholds) instead of PostgreSQL's 50 + 20 %.

The downgrade writes the compact rows back in the whole form (from the instance rows) and restores the
views and the index.

Revision ID: 0031_compact_event_batches
Revises: 0031_fanout_children
Create Date: 2026-12-05
"""

from alembic import op

revision = "0031_compact_event_batches"
down_revision = "0031_fanout_children"
branch_labels = None
depends_on = None

# An event of a row in either form (``app.engine.commit_batch.event_text`` / ``read_events``): its type,
# and its data with the step activation of the event it names (``"+"``) put back. Inlined by the planner.
FUNCTIONS = """
CREATE OR REPLACE FUNCTION workflow_event_type(ev jsonb) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT COALESCE(ev ->> 'type', ev ->> 0) $$;
CREATE OR REPLACE FUNCTION workflow_event_data(events jsonb, ev jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT CASE WHEN jsonb_typeof(ev) = 'object' THEN ev -> 'data'
            WHEN (ev -> 1) ? '+' THEN ((ev -> 1) - '+') || jsonb_build_object(
                'step_key', events -> CAST((ev -> 1) ->> '+' AS int) -> 1 -> 'step_key',
                'activation_id', events -> CAST((ev -> 1) ->> '+' AS int) -> 1 -> 'activation_id')
            ELSE COALESCE(ev -> 1, '{}'::jsonb) END $$;
"""

EVENTS_VIEW = """
CREATE OR REPLACE VIEW workflow_events AS
SELECT left(b.id, 29) || lpad(to_hex((e.ord - 1)::int), 3, '0') AS id, b.id AS batch_id, b.namespace_id,
       b.instance_id, b.first_seq + e.ord - 1 AS seq, workflow_event_type(e.ev) AS type,
       CASE WHEN b.definition_id = '' THEN COALESCE(i.definition_id, '') ELSE b.definition_id END AS definition_id,
       jsonb_build_object(
           'instance', CASE WHEN b.definition_id = '' THEN jsonb_strip_nulls(jsonb_build_object(
               'id', b.instance_id, 'definition_id', i.definition_id, 'version', i.version,
               'business_key', i.business_key, 'paused', false))
               || CASE WHEN jsonb_typeof(b.instance) = 'string' THEN jsonb_build_object('state', b.instance)
                       ELSE b.instance END
               ELSE b.instance END,
           'trace_id', CASE WHEN b.definition_id = '' THEN COALESCE(i.trace_id, '') ELSE b.trace_id END
       ) || workflow_event_data(b.events, e.ev) AS body,
       b.dispatch_job_id, b.created_at
FROM workflow_event_batches b
LEFT JOIN workflow_instances i ON b.definition_id = '' AND i.id = b.instance_id
CROSS JOIN LATERAL jsonb_array_elements(b.events) WITH ORDINALITY AS e(ev, ord)
"""

# An audit entry's fields as the whole form had them (``a.e``: the entry, ``b``: its batch, ``x``: the
# type and data of the event it names, NULL when it names none): ``commit_batch.compact_entries``.
ENTRY_ID = "left(b.id, 29) || lpad(to_hex((2047 + a.ord)::int), 3, '0')"
ACTION = "CASE WHEN x.type IS NULL THEN a.e ->> 'action' ELSE 'workflow.' || x.type END"
TARGET_TYPE = "CASE WHEN x.type IS NULL THEN COALESCE(a.e ->> 'target_type', 'workflow') ELSE 'step' END"
TARGET_ID = "CASE WHEN x.type IS NULL THEN COALESCE(a.e ->> 'target_id', b.instance_id) ELSE x.data ->> 'step_key' END"
OPERATION_ID = f"COALESCE(a.e ->> 'operation_id', CASE WHEN NOT a.e ? 'actor_id' THEN {ENTRY_ID} END)"
REQUEST_ID = """COALESCE(a.e ->> 'request_id',
         CASE WHEN a.e ? 'after_in_response' THEN CAST(b.start_response AS jsonb) ->> 'request_id' END)"""
AFTER = """CASE WHEN a.e ? 'after_in_response' THEN CAST(b.start_response AS jsonb) -> 'data' -> 'instance'
            WHEN x.type IS NULL THEN a.e -> 'after'
            ELSE COALESCE(a.e -> 'after', '{}'::jsonb)
                 || jsonb_build_object('step_key', x.data -> 'step_key', 'activation_id', x.data -> 'activation_id')
                 || CASE WHEN x.type = 'step.activated'
                         THEN jsonb_build_object('activation_sequence', x.data -> 'sequence')
                         ELSE '{}'::jsonb END END"""
EVENT_OF_ENTRY = """(SELECT workflow_event_type(y.ev) AS type, workflow_event_data(b.events, y.ev) AS data
    FROM (SELECT CASE WHEN a.e ? 'ev' THEN b.events -> CAST(a.e ->> 'ev' AS int) END AS ev) y) x"""
ENTRIES = f"""FROM workflow_event_batches b CROSS JOIN LATERAL jsonb_array_elements(b.audit) WITH ORDINALITY AS a(e, ord)
CROSS JOIN LATERAL {EVENT_OF_ENTRY}"""

OPERATIONS_VIEW = f"""
CREATE OR REPLACE VIEW workflow_operations AS
SELECT id, NULL::text AS batch_id, namespace_id, actor_id, actor_name, action, target_type, target_id, workflow_id,
       operation_id, reason, evidence_ref, request_id, before, after, created_at
FROM operation_audit
UNION ALL
SELECT {ENTRY_ID}, b.id, b.namespace_id,
       COALESCE(a.e ->> 'actor_id', 'system:engine'),
       CASE WHEN a.e ? 'actor_id' THEN a.e ->> 'actor_name' ELSE 'ledgerflow engine' END,
       {ACTION}, {TARGET_TYPE}, {TARGET_ID}, b.instance_id,
       {OPERATION_ID}, a.e ->> 'reason', a.e ->> 'evidence_ref', {REQUEST_ID},
       a.e -> 'before',
       {AFTER},
       CASE WHEN a.e ? 'actor_id' THEN b.created_at ELSE b.audited_at END
{ENTRIES}
"""

# migrations 0018 / 0021
OLD_EVENTS_VIEW = """
CREATE OR REPLACE VIEW workflow_events AS
SELECT left(b.id, 29) || lpad(to_hex((e.ord - 1)::int), 3, '0') AS id, b.id AS batch_id, b.namespace_id,
       b.instance_id, b.first_seq + e.ord - 1 AS seq, e.ev ->> 'type' AS type, b.definition_id,
       jsonb_build_object('instance', b.instance, 'trace_id', b.trace_id) || (e.ev -> 'data') AS body,
       b.dispatch_job_id, b.created_at
FROM workflow_event_batches b CROSS JOIN LATERAL jsonb_array_elements(b.events) WITH ORDINALITY AS e(ev, ord)
"""

OLD_OPERATIONS_VIEW = """
CREATE OR REPLACE VIEW workflow_operations AS
SELECT id, NULL::text AS batch_id, namespace_id, actor_id, actor_name, action, target_type, target_id, workflow_id,
       operation_id, reason, evidence_ref, request_id, before, after, created_at
FROM operation_audit
UNION ALL
SELECT left(b.id, 29) || lpad(to_hex((2047 + a.ord)::int), 3, '0'), b.id, b.namespace_id,
       COALESCE(a.e ->> 'actor_id', 'system:engine'),
       CASE WHEN a.e ? 'actor_id' THEN a.e ->> 'actor_name' ELSE 'ledgerflow engine' END,
       a.e ->> 'action', a.e ->> 'target_type', a.e ->> 'target_id', b.instance_id,
       a.e ->> 'operation_id', a.e ->> 'reason', a.e ->> 'evidence_ref', a.e ->> 'request_id',
       a.e -> 'before', a.e -> 'after',
       CASE WHEN a.e ? 'actor_id' THEN b.created_at ELSE b.audited_at END
FROM workflow_event_batches b CROSS JOIN LATERAL jsonb_array_elements(b.audit) WITH ORDINALITY AS a(e, ord)
"""

# A compact row in the whole form (the downgrade; tests/db/test_compact_event_batches.py reads both forms).
# The downgrade, and what reads an old row: a compact row in the whole form (audit entries first, while
# their events are still in the compact form).
WHOLE_FORM = (
    f"""
UPDATE workflow_event_batches b SET audit = (
    SELECT jsonb_agg(
        (a.e - 'after_in_response' - 'ev' - 'after' - 'before')
        || jsonb_build_object('action', {ACTION}, 'target_type', {TARGET_TYPE}, 'target_id', {TARGET_ID})
        || CASE WHEN a.e ? 'actor_id' THEN jsonb_build_object('request_id', {REQUEST_ID})
                ELSE jsonb_build_object('operation_id', {OPERATION_ID}) END
        || CASE WHEN a.e ? 'before' THEN jsonb_build_object('before', a.e -> 'before') ELSE '{{}}'::jsonb END
        || CASE WHEN ({AFTER}) IS NULL THEN '{{}}'::jsonb ELSE jsonb_build_object('after', {AFTER}) END
        ORDER BY a.ord)
    FROM jsonb_array_elements(b.audit) WITH ORDINALITY AS a(e, ord) CROSS JOIN LATERAL {EVENT_OF_ENTRY})
WHERE b.definition_id = '' AND b.audit <> '[]'::jsonb
""",
    """
UPDATE workflow_event_batches b SET events = (
    SELECT jsonb_agg(jsonb_build_object('type', workflow_event_type(e.ev), 'data', workflow_event_data(b.events, e.ev))
                     ORDER BY e.ord)
    FROM jsonb_array_elements(b.events) WITH ORDINALITY AS e(ev, ord))
WHERE b.definition_id = '' AND b.events <> '[]'::jsonb
""",
    """
UPDATE workflow_event_batches b SET
    definition_id = i.definition_id, trace_id = i.trace_id,
    instance = jsonb_build_object('id', i.id, 'definition_id', i.definition_id, 'version', i.version,
        'business_key', i.business_key, 'paused', false)
        || CASE WHEN jsonb_typeof(b.instance) = 'string' THEN jsonb_build_object('state', b.instance)
                ELSE b.instance END
FROM workflow_instances i
WHERE b.definition_id = '' AND i.id = b.instance_id
""",
)


# The engine's churning tables vacuum as the ledger's do (migrations 0012 / 0016): after 1,000 + 1 % dead
# rows instead of PostgreSQL's 50 + 20 % (a table that keeps 30 days of finished workflows would pile up
# 20 % of its rows as dead versions and index entries between two vacuums).
VACUUM_TABLES = ("workflow_instances", "workflow_steps", "workflow_tasks", "workflow_waits")
VACUUM_PARAMS = {
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_scale_factor": "0.01",
    "autovacuum_analyze_threshold": "1000",
    "autovacuum_analyze_scale_factor": "0.02",
}


def upgrade() -> None:
    settings = ", ".join(f"{k} = {v}" for k, v in VACUUM_PARAMS.items())
    for table in VACUUM_TABLES:
        op.execute(f"ALTER TABLE {table} SET ({settings})")
    op.execute(FUNCTIONS)
    op.execute(EVENTS_VIEW)
    op.execute(OPERATIONS_VIEW)
    op.execute("DROP INDEX IF EXISTS ix_workflow_event_batches_instance")


def downgrade() -> None:
    for table in VACUUM_TABLES:
        op.execute(f"ALTER TABLE {table} RESET ({', '.join(VACUUM_PARAMS)})")
    for statement in WHOLE_FORM:
        op.execute(statement)
    op.execute(OLD_EVENTS_VIEW)
    op.execute(OLD_OPERATIONS_VIEW)
    op.execute("DROP FUNCTION workflow_event_data(jsonb, jsonb)")
    op.execute("DROP FUNCTION workflow_event_type(jsonb)")
    op.execute(
        "CREATE INDEX IF NOT EXISTS ix_workflow_event_batches_instance "
        "ON workflow_event_batches (namespace_id, instance_id)"
    )
