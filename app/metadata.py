"""The one MetaData every table of the product is declared on."""

from sqlalchemy import MetaData

metadata = MetaData()
