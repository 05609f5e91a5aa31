"""Where the documents describe the code, they say what the code says: the command table of
README.md, the credential switches and options and the job types of docs/reference.md are rendered from
the code (``ledgerflow.doc_tables``) and must appear exactly so; every error code of the reference is one
the API answers; the complete definition document of the reference publishes as it is."""

from __future__ import annotations

import json
import re
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
