"""All tables of the product share one MetaData so migrations can be compared with the models."""

from app.ledger.models import metadata

__all__ = ["metadata"]
