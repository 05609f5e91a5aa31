"""Where the documents describe the code, they say what the code says: the command table of
README.md, the credential switches and options and the job types of docs/reference.md are rendered from
the code (``ledgerflow.doc_tables``) and must appear exactly so; every error code of the reference is one
the API answers; the complete definition document of the reference publishes as it is; the engine's
layers drawn in docs/architecture.md are the import contract's, and its lists name every handler module
and blueprint."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from app.db import transaction
from app.engine import definitions
from app.ids import new_id
from ledgerflow import doc_tables
from web.problems import PROBLEMS

ROOT = Path(__file__).resolve().parents[2]
WHERE = {
    "commands": "README.md",
    "credential_switches": "docs/reference.md",
    "credential_options": "docs/reference.md",
    "job_types": "docs/reference.md",
}


@pytest.mark.parametrize("table", doc_tables.TABLES)
def test_the_table_is_the_one_the_code_renders(table):
    expected = getattr(doc_tables, table)()
    doc = (ROOT / WHERE[table]).read_text()
    assert expected in doc, (
        f"{WHERE[table]}: the {table} table differs from the code; paste this one "
        f"(.venv/bin/python -m ledgerflow.doc_tables prints them all):\n{expected}"
    )


def test_the_reference_names_only_error_codes_the_api_answers():
    section = (ROOT / "docs/reference.md").read_text().split("## Error codes")[1].split("\n## ")[0]
    documented = set(re.findall(r"^\| `([A-Z_]+)` \| \d{3} \|", section, re.M))
    assert documented == {p.code for p in PROBLEMS}


def test_the_reference_has_no_setting_nothing_reads():
    table = (ROOT / "docs/reference.md").read_text().split("## Settings (environment)")[1].split("\n## ")[0]
    assert "| `HOST` |" not in table  # it was LEDGERFLOW_BIND_HOST all along


def test_the_complete_definition_document_of_the_reference_publishes(engine):
    section = (ROOT / "docs/reference.md").read_text().split("## The definition document")[1]
    document = json.loads(section.split("```json\n")[1].split("```")[0])
    assert {
        "version",
        "description",
        "input_schema",
        "deadline_seconds",
        "signals",
        "steps",
        "output",
    } <= set(document)
    ns = "doc-" + new_id()[:8]
    with transaction(engine) as conn:
        d = definitions.create_definition(conn, ns, "order", None)
        v = definitions.publish_version(conn, ns, d["id"], document)
    assert v["version"] == "v1" and sorted(v["queues"]) == ["orders.approve", "orders.ship", "orders.unship"]


def _architecture_row(path: str) -> str:
    return next(
        ln
        for ln in (ROOT / "docs/architecture.md").read_text().splitlines()
        if ln.startswith(f"| `{path}` |")
    )


def test_the_architecture_draws_the_engine_layers_of_the_import_contract():
    """docs/architecture.md's drawing of the engine's layers is the ``engine-layers`` contract of
    pyproject.toml, line for line (it lacked lookup, overview, retention, quotas and contracts, and named
    a settings module the engine does not have)."""
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["id"] == "engine-layers")["layers"]
    text = (ROOT / "docs/architecture.md").read_text()
    drawing = text.split("(`engine-layers` in `pyproject.toml`")[1].split("```\n")[1]
    engine = ROOT / "app/engine"
    drawn = []
    for line in drawing.splitlines():
        if line.startswith(" "):  # a description carried on
            continue
        names = []
        for word in line.split():
            name = word.rstrip("/")
            if not ((engine / f"{name}.py").exists() or (engine / name / "__init__.py").exists()):
                break
            names.append(name)
        drawn.append(set(names))
    assert drawn == [set(layer.split(" : ")) for layer in layers]


def test_the_architecture_names_every_engine_handler_module_and_every_blueprint():
    """Every module of ``app/engine/handlers`` and every blueprint of ``web`` (the console's aside) is named
    in the lists of docs/architecture.md (``handlers/outbound``, ``schedules`` and ``integrations`` were
    not)."""
    engine_row = _architecture_row("app/engine/")
    handlers = {p.stem for p in (ROOT / "app/engine/handlers").glob("*.py")} - {"__init__"}
    assert {h for h in handlers if f"`{h}`" not in engine_row} == set()
    web_row = _architecture_row("web/")
    blueprints = {
        m.group(1)
        for p in (ROOT / "web").glob("*.py")
        for m in re.finditer(r'Blueprint\("([a-z_]+)"', p.read_text())
    }
    assert blueprints and {b for b in blueprints if f"`{b}`" not in web_row} == set()
