"""Migration 0026 writes the failure groups' normalisation out (a migration never changes with the code);
the failure groups and the list's ``error_group`` filter group by ``app.engine.finding.ERROR_GROUP_SQL``,
which must be that very expression for ``ix_workflow_instances_failed`` to serve them."""

from __future__ import annotations

from app.engine.finding import ERROR_GROUP_SQL
from app.engine.models import ERROR_GROUP_SQL as MODEL_GROUP
from tests.db.old_schemas import migration_module


def test_the_migration_indexes_the_expression_the_groups_use():
    module = migration_module("0026_operator_actions")
    assert module.ERROR_GROUP == ERROR_GROUP_SQL == MODEL_GROUP
