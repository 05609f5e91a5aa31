"""The light SDK distribution (sdk/pyproject.toml) packs exactly the SDK modules of ledgerflow/, and
they import only each other, the standard library, httpx and standardwebhooks. The
import-linter contract "sdk-light" names the same modules; the pins match the server's."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SDK_LIBRARIES = {"httpx", "standardwebhooks"}


def _sdk_modules() -> set[str]:
    cfg = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text())
    packed = cfg["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    assert all(src == "../" + dst for src, dst in packed.items())  # packed as they are, from ledgerflow/
    return {dst.removesuffix(".py").replace("/", ".") for dst in packed.values()}


def _pins(deps: list[str]) -> dict[str, str]:
    return {d.split("==")[0].split("[")[0]: d for d in deps}


def test_the_packed_modules_are_the_contracts_modules_and_the_pins_match():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [contract] = [c for c in root["tool"]["importlinter"]["contracts"] if c["id"] == "sdk-light"]
    assert _sdk_modules() == set(contract["source_modules"]) | {"ledgerflow.__init__"}
    sdk = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text())["project"]
    assert set(_pins(sdk["dependencies"])) == SDK_LIBRARIES
    server = _pins(root["project"]["dependencies"])
    assert all(server[name] == pin for name, pin in _pins(sdk["dependencies"]).items())


def test_sdk_modules_import_only_each_other_the_standard_library_httpx_and_standardwebhooks():
    modules = _sdk_modules()
    wrong = []
    for mod in sorted(modules):
        path = ROOT / (mod.replace(".", "/") + ".py")
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top == "ledgerflow":
                    if (
                        name not in modules
                        and name != "ledgerflow"
                        and not any(name.startswith(m + ".") for m in modules)
                    ):
                        wrong.append(f"{mod} imports {name}")
                elif top not in sys.stdlib_module_names and top not in SDK_LIBRARIES and top != "__future__":
                    wrong.append(f"{mod} imports {name}")
    assert wrong == []


def test_the_contract_forbids_every_other_module_of_ledgerflow():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    [contract] = [c for c in root["tool"]["importlinter"]["contracts"] if c["id"] == "sdk-light"]
    others = {f"ledgerflow.{p.stem}" for p in (ROOT / "ledgerflow").glob("*.py")} - _sdk_modules()
    assert others and others <= set(contract["forbidden_modules"])


def test_the_go_sdk_and_both_python_distributions_carry_one_version():
    """The Go SDK's ``Version`` (what its workers report as ``ledgerflow-go/<version>``) is written by hand in
    sdk/go/traces.go: it must say the version both pyproject files say."""
    server = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    light = tomllib.loads((ROOT / "sdk" / "pyproject.toml").read_text())["project"]["version"]
    go = re.search(r'^const Version = "([^"]+)"$', (ROOT / "sdk" / "go" / "traces.go").read_text(), re.M)
    assert go is not None, 'sdk/go/traces.go no longer declares `const Version = "..."`'
    assert server == light == go.group(1)
