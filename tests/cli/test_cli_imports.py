"""The ``ledgerflow`` command never loads Flask: every project module it can reach (function-level imports
included) is imported in a fresh interpreter, and none of them brings in flask, werkzeug or the web layer.

The import contract ``cli-no-flask`` (pyproject.toml) checks the same statically; this test also catches
what a static graph does not show, such as a package ``__init__`` that imports Flask."""

from __future__ import annotations

import subprocess
import sys

import grimp

from tests.conftest import ROOT

PACKAGES = ("ledgerflow", "schemas", "app", "actors", "web")
FORBIDDEN = ("flask", "werkzeug", "flask_wtf", "web")


def reachable_from_the_cli() -> list[str]:
    graph = grimp.build_graph(*PACKAGES, include_external_packages=True)
    reached = graph.find_upstream_modules("ledgerflow", as_package=True)
    reached |= {m for m in graph.modules if m.split(".")[0] == "ledgerflow"}
    return sorted(m for m in reached if m.split(".")[0] in PACKAGES)


def test_the_cli_reaches_the_api_schemas_but_no_web_module() -> None:
    modules = reachable_from_the_cli()
    assert "schemas.workflow_control" in modules  # the CLI validates with the API's own schemas
    assert "app.engine.operator_commands" in modules  # and runs the operator commands the API runs
    assert [m for m in modules if m.split(".")[0] == "web"] == []


def test_importing_everything_the_cli_reaches_loads_no_flask() -> None:
    modules = reachable_from_the_cli()
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(sorted({{n.split('.')[0] for n in sys.modules}} & {set(FORBIDDEN)!r}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"the CLI's modules load {out.stdout.strip()}"
