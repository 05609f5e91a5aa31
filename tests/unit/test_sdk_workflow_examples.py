"""Each workflow example written in Python produces, byte for byte, the document of its JSON twin
(both serialized canonically: sorted keys, no spaces), and the server's validation accepts it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from app.engine.documents import validate_document

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [
    ("examples/first_workflow.py", "examples/first_workflow.json"),
    ("examples/order_flow.py", "examples/order_flow.json"),
    ("docs/examples/own_project/invoice.py", "docs/examples/own_project/invoice.json"),
]


def _canonical(doc: object) -> bytes:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))  # own_project's scripts import their sibling module
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(path.parent))
    return mod


@pytest.mark.parametrize(("python", "twin"), EXAMPLES)
def test_the_python_form_is_its_json_twin_byte_for_byte(python: str, twin: str) -> None:
    wf = _load(ROOT / python).wf
    document = wf.document()
    assert _canonical(document) == _canonical(json.loads((ROOT / twin).read_text()))
    validate_document(json.loads(json.dumps(document)))
    assert _canonical(wf.document()) == _canonical(document)  # the same document every time
