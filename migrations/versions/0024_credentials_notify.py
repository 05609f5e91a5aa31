"""A change to a credential or a namespace is announced (issue 27): ``NOTIFY lf_credentials`` at commit.

Each web process keeps the principals of the tokens it authenticated (``app.principal_cache.PrincipalCache``) only
while its LISTEN connection hears this channel; a revocation (an UPDATE of ``credentials``), a deletion,
a TRUNCATE, or any change to ``namespaces`` empties every process's cache when it commits, whoever made it
(the CLI, the console, plain SQL). One notification per statement, no payload: the cache is emptied whole.

Revision ID: 0024_credentials_notify
Revises: 0023_open_waits
Create Date: 2026-12-03
"""

from alembic import op

revision = "0024_credentials_notify"
down_revision = "0023_open_waits"
branch_labels = None
depends_on = None

_TABLES = ("credentials", "namespaces")


def upgrade() -> None:
    op.execute("""
        CREATE FUNCTION lf_credentials_changed() RETURNS trigger AS $$
        BEGIN
            PERFORM pg_notify('lf_credentials', '');
            RETURN NULL;
        END $$ LANGUAGE plpgsql
    """)
    for table in _TABLES:
        op.execute(f"""
            CREATE TRIGGER {table}_changed
            AFTER UPDATE OR DELETE OR TRUNCATE ON {table}
            FOR EACH STATEMENT EXECUTE FUNCTION lf_credentials_changed()
        """)


def downgrade() -> None:
    for table in _TABLES:
        op.execute(f"DROP TRIGGER IF EXISTS {table}_changed ON {table}")
    op.execute("DROP FUNCTION IF EXISTS lf_credentials_changed()")
