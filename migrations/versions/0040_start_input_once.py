"""A start's response keeps the workflow's input once (issue 50): the view ``workflow_operations`` reads it
from the instance.

Since this release a start whose input is long (``app.engine.commit_batch.stored_response``: 128 bytes of
JSON or more) keeps its response on its batch (``workflow_event_batches.start_response``) with ``"input":
null`` in the instance and ``"input_on_instance": true`` at the top level; the instance row holds the input.
The start's audit entry that says ``after_in_response`` reads its ``after`` from that response: the view
now puts the instance's input back into it. Rows written before hold the whole response and are read as
they are. The downgrade writes the whole response back into the rows that hold the short form (the text
as ``jsonb`` renders it: a resent start parses it and answers the same values; it reads every batch row that
keeps a response, a sequential read of ``workflow_event_batches``) and restores the view of migration 0038.

The view only (milliseconds): no table is rewritten or locked beyond the view's own catalog row.

Revision ID: 0040_start_input_once
Revises: 0039_drain_run_lease
Create Date: 2026-12-06
"""

from alembic import op

from app.migrate import migration_module

revision = "0040_start_input_once"
down_revision = "0039_drain_run_lease"
branch_labels = None
depends_on = None

RESPONSE = "CAST(b.start_response AS jsonb)"
AFTER = f"""CASE WHEN a.e ? 'after_in_response' THEN
                 CASE WHEN {RESPONSE} ? 'input_on_instance'
                      THEN jsonb_set({RESPONSE} -> 'data' -> 'instance', '{{input}}',
                                     COALESCE((SELECT i.input FROM workflow_instances i WHERE i.id = b.instance_id),
                                              'null'::jsonb))
                      ELSE {RESPONSE} -> 'data' -> 'instance' END"""

WHOLE = """
UPDATE workflow_event_batches b
SET start_response = jsonb_set(CAST(b.start_response AS jsonb) - 'input_on_instance', '{data,instance,input}',
                               COALESCE(i.input, 'null'::jsonb))::text
FROM workflow_instances i
WHERE i.id = b.instance_id AND b.start_response LIKE '%"input_on_instance"_true}'
"""  # (the marker ends the text kept; ``_`` for its colon: a colon would start a bind parameter)


def upgrade() -> None:
    m = migration_module("0038_event_batches_json")
    first = m.AFTER.split("\n", 1)[0]
    view = m.operations_view("\n" + m.LISTS, "v.events", "v.audit")
    assert view.count(first) == 1, "the view of 0038 changed"
    op.execute(view.replace(first, AFTER))


def downgrade() -> None:
    m = migration_module("0038_event_batches_json")
    op.execute(WHOLE)
    op.execute(m.operations_view("\n" + m.LISTS, "v.events", "v.audit"))
