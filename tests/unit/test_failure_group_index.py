"""Migration 0026 writes the failure groups' normalisation out (a migration never changes with the code);
the failure groups and the list's ``error_group`` filter group by ``app.engine.finding.ERROR_GROUP_SQL``,
which must be that very expression for ``ix_workflow_instances_failed`` to serve them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from app.engine.finding import ERROR_GROUP_SQL
from app.engine.models import ERROR_GROUP_SQL as MODEL_GROUP

ROOT = Path(__file__).resolve().parents[2]


def test_the_migration_indexes_the_expression_the_groups_use():
    path = ROOT / "migrations" / "versions" / "0026_operator_actions.py"
    spec = importlib.util.spec_from_file_location("m0026", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.ERROR_GROUP == ERROR_GROUP_SQL == MODEL_GROUP
