"""Quota counts kept by the database instead of counted at every start.

Before: every start counted, under its namespace's start lock, the namespace's unfinished instances,
its open tasks and each queue's pending tasks: work that grew with the namespace (8 ms of PostgreSQL
per start at 9,000 unfinished instances; the caps allow 10,000 instances and 250,000 units of work).

Now ``workflow_quota_counts`` holds, per namespace and stripe, the unfinished instances, the open
(PENDING or CLAIMED) tasks and each queue's PENDING tasks. Deferred constraint triggers on
``workflow_instances`` and ``workflow_tasks`` add each row's change at COMMIT, so

- a counter row is locked only while its transaction commits, never across a start or a task's work;
- a start's check (under the namespace's start lock, taken last: ``app.engine.instances``) reads the
  committed counts of every other transaction and none of its own, which is what the cap is about;
  the start that held the lock before has committed its counts before the lock is released (commit
  fires the deferred triggers first), so concurrent starts still never end above a cap;
- concurrent commits of one namespace touch different rows: the stripe is the backend's pid modulo
  16, and one transaction touches one row per namespace (no lock order to get wrong).

A CLAIMED task whose lease expired counts as pending again (it is back in its queue); those are read
from the rows through ``ix_workflow_tasks_claimed_lease`` (only claimed tasks, so bounded by the work
in flight). The upgrade locks both tables while it fills the counts from the existing rows.

Revision ID: 0017_i16
Revises: 0016_i14
Create Date: 2026-12-02
"""

from alembic import op

revision = "0017_i16"
down_revision = "0016_i14"
branch_labels = None
depends_on = None

STRIPES = 16

_FUNCTION = f"""
CREATE FUNCTION workflow_quota_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ns text;
    d_unfinished int := 0;
    d_open int := 0;
    d_pending int := 0;
    q text;
BEGIN
    IF TG_TABLE_NAME = 'workflow_instances' THEN
        IF TG_OP IN ('UPDATE', 'DELETE') AND OLD.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN
            d_unfinished := d_unfinished - 1;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') AND NEW.state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') THEN
            d_unfinished := d_unfinished + 1;
        END IF;
    ELSE
        IF TG_OP IN ('UPDATE', 'DELETE') THEN
            d_open := d_open - (OLD.state IN ('PENDING', 'CLAIMED'))::int;
            d_pending := d_pending - (OLD.state = 'PENDING')::int;
        END IF;
        IF TG_OP IN ('INSERT', 'UPDATE') THEN
            d_open := d_open + (NEW.state IN ('PENDING', 'CLAIMED'))::int;
            d_pending := d_pending + (NEW.state = 'PENDING')::int;
        END IF;
        q := COALESCE(NEW.queue, OLD.queue);
    END IF;
    IF d_unfinished = 0 AND d_open = 0 AND d_pending = 0 THEN
        RETURN NULL;
    END IF;
    ns := COALESCE(NEW.namespace_id, OLD.namespace_id);
    INSERT INTO workflow_quota_counts AS c (namespace_id, stripe, unfinished, open_tasks, pending)
    VALUES (ns, pg_backend_pid() % {STRIPES}, d_unfinished, d_open,
            CASE WHEN d_pending = 0 THEN '{{}}'::jsonb ELSE jsonb_build_object(q, d_pending) END)
    ON CONFLICT (namespace_id, stripe) DO UPDATE SET
        unfinished = c.unfinished + EXCLUDED.unfinished,
        open_tasks = c.open_tasks + EXCLUDED.open_tasks,
        pending = CASE WHEN d_pending = 0 THEN c.pending
                       ELSE c.pending || jsonb_build_object(q, COALESCE((c.pending ->> q)::bigint, 0) + d_pending)
                  END;
    RETURN NULL;
END
$$
"""

_TRIGGERS = [
    # constraint triggers may be deferred: they run at COMMIT, in the committing transaction
    """CREATE CONSTRAINT TRIGGER workflow_instances_quota_insert AFTER INSERT ON workflow_instances
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION workflow_quota_count()""",
    """CREATE CONSTRAINT TRIGGER workflow_instances_quota_update AFTER UPDATE OF state ON workflow_instances
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')) <> (NEW.state IN ('SUCCEEDED', 'FAILED', 'CANCELLED')))
    EXECUTE FUNCTION workflow_quota_count()""",
    """CREATE CONSTRAINT TRIGGER workflow_instances_quota_delete AFTER DELETE ON workflow_instances
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION workflow_quota_count()""",
    """CREATE CONSTRAINT TRIGGER workflow_tasks_quota_insert AFTER INSERT ON workflow_tasks
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION workflow_quota_count()""",
    """CREATE CONSTRAINT TRIGGER workflow_tasks_quota_update AFTER UPDATE OF state ON workflow_tasks
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state
          AND (OLD.state IN ('PENDING', 'CLAIMED') OR NEW.state IN ('PENDING', 'CLAIMED')))
    EXECUTE FUNCTION workflow_quota_count()""",
    """CREATE CONSTRAINT TRIGGER workflow_tasks_quota_delete AFTER DELETE ON workflow_tasks
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION workflow_quota_count()""",
]

_FILL = """
INSERT INTO workflow_quota_counts (namespace_id, stripe, unfinished, open_tasks, pending)
SELECT ns, 0, COALESCE(i.unfinished, 0), COALESCE(t.open_tasks, 0), COALESCE(p.pending, '{}'::jsonb)
FROM (SELECT namespace_id AS ns FROM workflow_instances WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')
      UNION SELECT namespace_id FROM workflow_tasks WHERE state IN ('PENDING', 'CLAIMED')) n
LEFT JOIN (SELECT namespace_id, count(*) AS unfinished FROM workflow_instances
           WHERE state NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED') GROUP BY namespace_id) i ON i.namespace_id = n.ns
LEFT JOIN (SELECT namespace_id, count(*) AS open_tasks FROM workflow_tasks
           WHERE state IN ('PENDING', 'CLAIMED') GROUP BY namespace_id) t ON t.namespace_id = n.ns
LEFT JOIN (SELECT namespace_id, jsonb_object_agg(queue, c) AS pending
           FROM (SELECT namespace_id, queue, count(*) AS c FROM workflow_tasks WHERE state = 'PENDING'
                 GROUP BY namespace_id, queue) x GROUP BY namespace_id) p ON p.namespace_id = n.ns
"""


def upgrade() -> None:
    op.execute(
        """
CREATE TABLE workflow_quota_counts (
    namespace_id text NOT NULL,
    stripe smallint NOT NULL,
    unfinished bigint NOT NULL DEFAULT 0,
    open_tasks bigint NOT NULL DEFAULT 0,
    pending jsonb NOT NULL DEFAULT '{}'::jsonb,
    CONSTRAINT workflow_quota_counts_pkey PRIMARY KEY (namespace_id, stripe)
)"""
    )
    op.execute(
        "CREATE INDEX ix_workflow_tasks_claimed_lease ON workflow_tasks (namespace_id, queue, lease_expires_at) "
        "WHERE state = 'CLAIMED'"
    )
    op.execute(_FUNCTION)
    # no writer between the fill and the triggers
    op.execute("LOCK TABLE workflow_instances, workflow_tasks IN SHARE MODE")
    for trigger in _TRIGGERS:
        op.execute(trigger)
    op.execute(_FILL)


def downgrade() -> None:
    for name, table in [
        ("workflow_instances_quota_insert", "workflow_instances"),
        ("workflow_instances_quota_update", "workflow_instances"),
        ("workflow_instances_quota_delete", "workflow_instances"),
        ("workflow_tasks_quota_insert", "workflow_tasks"),
        ("workflow_tasks_quota_update", "workflow_tasks"),
        ("workflow_tasks_quota_delete", "workflow_tasks"),
    ]:
        op.execute(f"DROP TRIGGER {name} ON {table}")
    op.execute("DROP FUNCTION workflow_quota_count()")
    op.execute("DROP INDEX ix_workflow_tasks_claimed_lease")
    op.execute("DROP TABLE workflow_quota_counts")
