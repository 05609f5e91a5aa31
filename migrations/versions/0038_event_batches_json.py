"""A batch's events and audit entries kept as the JSON text the engine wrote (issue 50): ``json``, not
``jsonb``.

``jsonb`` stores a parsed tree: every array element and object member has a header of its own, so the
events and audit entries of a batch row took 504 bytes where their compact text takes about 300 (a task ->
timer -> task workflow writes four rows: 380 bytes per workflow, measured on a kept bench database). Nothing
queries them inside a row at write time; the views ``workflow_events`` and ``workflow_operations`` read
them as ``jsonb`` once per row.

- New columns ``events_json`` and ``audit_json`` (``json``: its input is checked, its text kept as sent),
  written by every batch from now on, NULL for an empty list; ``events`` and ``audit`` (``jsonb``) lose
  their NOT NULL and default and are NULL on a new row. A row written before this migration keeps its
  ``jsonb`` columns (and NULL in the new ones) and is read as it is: no row is rewritten, so the migration
  changes the catalog only (a table rewrite of a week of batches would hold an exclusive lock for
  minutes). A process of the previous release still writes the ``jsonb`` columns, which the views read too.
- The views read ``COALESCE(events, events_json::jsonb)`` (likewise the audit) once per batch row; the
  events and audit entries they show are the same.

The downgrade writes the new rows' lists back into the ``jsonb`` columns.

Revision ID: 0038_event_batches_json
Revises: 0037_queue_list_rows
Create Date: 2026-12-06
"""

from alembic import op

revision = "0038_event_batches_json"
down_revision = "0037_queue_list_rows"
branch_labels = None
depends_on = None

# A batch row's events and audit entries as jsonb, whichever columns hold them (evaluated once per row:
# OFFSET 0 keeps the planner from copying the expression into every use of ``v.events``).
LISTS = """CROSS JOIN LATERAL (SELECT COALESCE(b.events, CAST(b.events_json AS jsonb)) AS events,
                           COALESCE(b.audit, CAST(b.audit_json AS jsonb)) AS audit OFFSET 0) v"""


def events_view(lists: str, events: str) -> str:
    return f"""
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
       ) || workflow_event_data({events}, e.ev) AS body,
       b.dispatch_job_id, b.created_at
FROM workflow_event_batches b
LEFT JOIN workflow_instances i ON b.definition_id = '' AND i.id = b.instance_id{lists}
CROSS JOIN LATERAL jsonb_array_elements({events}) WITH ORDINALITY AS e(ev, ord)
"""


# An audit entry's fields as the whole form had them (``a.e``: the entry, ``b``: its batch, ``x``: the
# type and data of the event it names, NULL when it names none): as migration 0031 wrote them.
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


def operations_view(lists: str, events: str, audit: str) -> str:
    event_of_entry = f"""(SELECT workflow_event_type(y.ev) AS type, workflow_event_data({events}, y.ev) AS data
    FROM (SELECT CASE WHEN a.e ? 'ev' THEN {events} -> CAST(a.e ->> 'ev' AS int) END AS ev) y) x"""
    return f"""
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
FROM workflow_event_batches b{lists}
CROSS JOIN LATERAL jsonb_array_elements({audit}) WITH ORDINALITY AS a(e, ord)
CROSS JOIN LATERAL {event_of_entry}
"""


# IF NOT EXISTS: the tests that fill a database of an earlier revision with today's code give it these
# columns first (tests/db/old_schemas.py), and then upgrade it
COLUMNS = (
    "ALTER TABLE workflow_event_batches ADD COLUMN IF NOT EXISTS events_json json, "
    "ADD COLUMN IF NOT EXISTS audit_json json, "
    "ALTER COLUMN events DROP NOT NULL, ALTER COLUMN events DROP DEFAULT, "
    "ALTER COLUMN audit DROP NOT NULL, ALTER COLUMN audit DROP DEFAULT"
)


# A row written since, as a release before this migration wrote it (the downgrade; tests/web/
# test_compact_event_batches.py reads both forms)
AS_JSONB = """
UPDATE workflow_event_batches SET events = COALESCE(CAST(events_json AS jsonb), '[]'::jsonb),
    audit = COALESCE(CAST(audit_json AS jsonb), '[]'::jsonb), events_json = NULL, audit_json = NULL
WHERE events IS NULL
"""


def upgrade() -> None:
    op.execute(COLUMNS)
    op.execute(events_view("\n" + LISTS, "v.events"))
    op.execute(operations_view("\n" + LISTS, "v.events", "v.audit"))


def downgrade() -> None:
    # the views of migration 0031 (the same text, reading the jsonb columns alone)
    op.execute(AS_JSONB)
    op.execute("DROP VIEW workflow_operations")
    op.execute("DROP VIEW workflow_events")
    op.execute(events_view("", "b.events"))
    op.execute(operations_view("", "b.events", "b.audit"))
    op.execute(
        "ALTER TABLE workflow_event_batches DROP COLUMN events_json, DROP COLUMN audit_json, "
        "ALTER COLUMN events SET DEFAULT '[]'::jsonb, ALTER COLUMN events SET NOT NULL, "
        "ALTER COLUMN audit SET DEFAULT '[]'::jsonb, ALTER COLUMN audit SET NOT NULL"
    )
