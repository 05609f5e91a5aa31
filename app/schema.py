"""Every table of the product, for Alembic and the schema test. Each models module registers its
tables on ``app.metadata.metadata`` when imported; add new models modules here."""

import app.auth_models
import app.engine.models
import app.integrations.models
import app.integrations.schedule_models
import app.ledger.models  # noqa: F401
from app.metadata import metadata

__all__ = ["metadata"]
