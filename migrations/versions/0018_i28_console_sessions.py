"""Console sessions kept on the server: logging out ends the session everywhere.

``console_sessions`` holds one row per logged-in console session: the SHA-256 of the random session id
the signed cookie carries, the credential it authenticates (deleted with it) and its expiry (8 hours
after login). Logout deletes the row, so a copy of the cookie taken before no longer authenticates.
A login deletes a bounded batch of expired rows (``app.sessions``).

Revision ID: 0018_i28
Revises: 0018_i29
Create Date: 2026-12-02
"""

import sqlalchemy as sa
from alembic import op

revision = "0018_i28"
down_revision = "0018_i29"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.Text(), primary_key=True),
        sa.Column(
            "credential_id", sa.Text(), sa.ForeignKey("credentials.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_console_sessions_credential", "console_sessions", ["credential_id", "created_at"])
    op.create_index("ix_console_sessions_expires", "console_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("console_sessions")
