"""``tests/INDEX.md`` (which test files import each module) is generated from the imports of the tests:
this fails when a test file or a module was added, moved or renamed without writing it again."""

from __future__ import annotations

from tests import index


def test_the_index_of_tests_by_module_is_current() -> None:
    assert index.INDEX.read_text() == index.render(), (
        "tests/INDEX.md is stale: run .venv/bin/python -m tests.index"
    )


def test_an_import_is_resolved_to_the_module_it_names() -> None:
    modules = index.source_modules()
    source = (
        "from app.engine import driver\n"
        "from app.engine.row_access import read_step\n"
        "def f():\n"
        "    import app.engine.handlers.timers\n"
        "    from json import dumps\n"
    )
    assert index.imported_modules(source, modules) == {
        "app.engine.driver",
        "app.engine.row_access",
        "app.engine.handlers.timers",
    }


def test_a_test_file_is_named_after_the_module_its_name_spells_best() -> None:
    modules = index.source_modules()

    def named(path: str, imported: frozenset[str] = frozenset()) -> set[str]:
        return index.named_after(index.ROOT / path, set(imported), modules)

    # the module's name alone, or with an aspect after it
    assert named("tests/unit/test_outcome.py") == {"app.ledger.outcome"}
    assert named("tests/web/test_jobs_reads.py") == {"web.jobs"}
    # a longer name wins: ops_cli over ops, a package's name before the module's over the module's alone
    assert named("tests/observability/test_ops_cli.py") == {"ledgerflow.ops_cli"}
    assert named("tests/web/test_console_workflows.py") == {"web.console.workflows"}
    assert named("tests/db/test_ledger_http.py") == {"app.ledger.http"}
    # among modules of one name: the folder's package, then what the file imports, then the shallowest
    assert named("tests/web/test_auth_permissions.py", frozenset({"app.auth"})) == {"web.auth"}
    assert named("tests/unit/test_triggers.py", frozenset({"app.engine.decide.triggers"})) == {
        "app.engine.decide.triggers"
    }
    assert named("tests/web/test_workflows_start.py") == {"web.workflows"}
    # a name that is no module's, and a module's name only as a part of a word
    assert named("tests/workers/test_processes.py") == set()
    assert named("tests/chaos/test_fault_suite.py") == set()
