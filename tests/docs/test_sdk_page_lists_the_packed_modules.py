"""docs/sdk.md's list of the SDK distribution's modules is the packaging's (issue 45: the page listed five
modules where sdk/pyproject.toml packs six), and its command is the entry point the packaging declares."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SECTION = "## What is in the SDK distribution"


def _section(text: str, heading: str) -> str:
    start = text.index(heading) + len(heading)
    end = text.find("\n## ", start)
    return text[start : None if end < 0 else end]


def test_the_page_names_exactly_the_packed_modules_and_the_command():
    cfg = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text())
    packed = cfg["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"].values()
    modules = {p.removesuffix(".py").replace("/", ".") for p in packed} - {"ledgerflow.__init__"}
    listed = _section((ROOT / "docs" / "sdk.md").read_text(), SECTION)
    assert set(re.findall(r"`(ledgerflow\.[a-z_]+)`", listed)) == modules
    [(script, target)] = cfg["project"]["scripts"].items()
    assert f"`{script}`" in listed and f"`{target}`" in listed
