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
        "from app.engine import advance\n"
        "from app.engine.store import read_step\n"
        "def f():\n"
        "    import app.engine.handlers.timers\n"
        "    from json import dumps\n"
    )
    assert index.imported_modules(source, modules) == {
        "app.engine.advance",
        "app.engine.store",
        "app.engine.handlers.timers",
    }
