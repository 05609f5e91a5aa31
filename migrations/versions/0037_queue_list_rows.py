"""``workflow_queue_list(text[])``: the elements of a list of queues, which the planner counts as one row
(issue 49).

The quota check of every start (``app.engine.quotas``) reads its figures per queue of the definition from
``unnest(:queues)``. For a prepared statement PostgreSQL compares the cost of its generic plan (made
without the parameters' values) with the custom plans it made with them, and ``unnest`` of a parameter is
estimated at 10 rows: the generic plan priced ten queues' counts (195 against 47), so the check was planned
again at every start (0.3 ms of PostgreSQL's CPU, against 0.08 ms to run it). A definition names few
queues (most one); estimated at one, the generic plan costs what the custom ones do and is kept.

PL/pgSQL, so that the planner does not inline the function and lose its estimate (an SQL function's body
would be). Catalog change only.

Revision ID: 0037_queue_list_rows
Revises: 0036_task_step_unkeyed
Create Date: 2026-12-06
"""

from alembic import op

revision = "0037_queue_list_rows"
down_revision = "0036_task_step_unkeyed"
branch_labels = None
depends_on = None


# OR REPLACE: the tests that fill a database of an earlier revision with today's code give it this function
# first (tests/db/old_schemas.py), and then upgrade it
FUNCTION = """
CREATE OR REPLACE FUNCTION workflow_queue_list(queues text[]) RETURNS SETOF text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE ROWS 1 AS $$
BEGIN
    RETURN QUERY SELECT unnest(queues);
END $$
"""


def upgrade() -> None:
    op.execute(FUNCTION)


def downgrade() -> None:
    op.execute("DROP FUNCTION workflow_queue_list(text[])")
