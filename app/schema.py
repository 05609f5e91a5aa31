"""Every table of the product, for Alembic and the schema test. Each models module registers its
tables on ``app.metadata.metadata`` when imported; add new models modules here."""

import app.auth_models  # noqa: F401
import app.engine.models  # noqa: F401
import app.integrations.models  # noqa: F401
import app.integrations.schedule_models  # noqa: F401
import app.ledger.models  # noqa: F401
from app.metadata import metadata

__all__ = ["metadata"]
