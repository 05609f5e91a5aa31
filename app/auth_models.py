"""Tables of the shared API foundation: namespaces, credentials (hashed tokens), operation audit and
idempotency receipts (SPEC X-CRED, W-AUDIT, W-API-2). Migration ``0002`` creates exactly these."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB

from app.metadata import metadata

namespaces = Table(
    "namespaces",
    metadata,
    Column("id", Text, primary_key=True),  # 32 hex
    Column("name", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("name", name="uq_namespaces_name"),
)

credentials = Table(
    "credentials",
    metadata,
    Column("id", Text, primary_key=True),  # 32 hex; the actor id of every request made with it
    Column("namespace_id", Text, ForeignKey("namespaces.id", ondelete="CASCADE"), nullable=False),
    Column("name", Text, nullable=False),
    Column("token_hash", Text, nullable=False),  # sha256 hex of the bearer token; the token is never stored
    Column("token_prefix", Text, nullable=False),  # first characters, to recognise a token in listings
    Column("scopes", ARRAY(Text), nullable=False),
    Column("queues", ARRAY(Text)),  # NULL = every queue of the namespace (tasks:work only)
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("revoked_at", DateTime(timezone=True)),
    # L-API-2: a platform-wide operator credential sees every namespace's jobs (otherwise only its own)
    Column("platform", Boolean, nullable=False, server_default=text("false")),
    Column("expires_at", DateTime(timezone=True)),  # NULL = no expiry
    UniqueConstraint("token_hash", name="uq_credentials_token_hash"),
)
# One live credential per name in a namespace; revoked ones keep their name for the record.
Index(
    "uq_credentials_live_name",
    credentials.c.namespace_id,
    credentials.c.name,
    unique=True,
    postgresql_where=text("revoked_at IS NULL"),
)

operation_audit = Table(
    "operation_audit",
    metadata,
    Column("id", Text, primary_key=True),  # 32 hex
    Column("namespace_id", Text, nullable=False),
    Column("actor_id", Text, nullable=False),
    Column("actor_name", Text),
    Column("action", Text, nullable=False),
    Column("target_type", Text, nullable=False),
    Column("target_id", Text, nullable=False),
    Column("workflow_id", Text),
    Column("operation_id", Text),
    Column("reason", Text),
    Column("evidence_ref", Text),
    Column("request_id", Text),
    Column("before", JSONB),
    Column("after", JSONB),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.clock_timestamp()),
    postgresql_partition_by="RANGE (created_at)",
)
# Partitioned by month on ``created_at`` (migration 0031): the parent has no index; every partition has the
# key on ``id``, (namespace_id, created_at, id), (namespace_id, workflow_id, created_at, id) where
# workflow_id is set, (target_type, target_id) and created_at (``app.ledger.partitions.AUDIT``).

idempotency_receipts = Table(
    "idempotency_receipts",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("scope", Text, nullable=False),  # namespace id
    Column("route", Text, nullable=False),  # "POST /api/.../jobs/7/retry"
    Column("key", Text, nullable=False),
    Column("fingerprint", Text, nullable=False),  # sha256 of the canonical request
    Column("status_code", Integer),
    Column("response", Text),  # the exact response body, replayed byte for byte
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("octet_length(key) <= 128", name="ck_idempotency_receipts_key_length"),
    UniqueConstraint("scope", "route", "key", name="uq_idempotency_receipts_key"),
)
Index("ix_idempotency_receipts_created", idempotency_receipts.c.created_at)

# The operator console's sessions (``app.sessions``): the SHA-256 of the cookie's random
# session id, the credential it authenticates, its expiry. Logout deletes the row.
console_sessions = Table(
    "console_sessions",
    metadata,
    Column("id", Text, primary_key=True),  # sha256 hex of the session id
    Column("credential_id", Text, ForeignKey("credentials.id", ondelete="CASCADE"), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)
Index("ix_console_sessions_credential", console_sessions.c.credential_id, console_sessions.c.created_at)
Index("ix_console_sessions_expires", console_sessions.c.expires_at)
