"""The import contracts of pyproject.toml (run by `make lint`) cover every core module of app/."""

from __future__ import annotations

import tomllib

from tests.conftest import ROOT


def _contracts() -> dict[str, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {c["id"]: c for c in config["contracts"]}


def test_every_top_level_app_module_is_in_the_core_layer():
    core = {m.strip() for m in _contracts()["layers"]["layers"][-1].split(":")}
    modules = {f"app.{p.stem}" for p in (ROOT / "app").glob("*.py") if p.stem != "__init__"}
    # core packages (not the integrations, the engine or the ledger, which are layers of their own)
    modules |= {
        f"app.{p.parent.name}"
        for p in (ROOT / "app").glob("*/__init__.py")
        if p.parent.name not in ("engine", "ledger", "integrations")
    }
    # app.schema imports every models module (engine ones too) for Alembic: a composition root,
    # kept out of the core layer and forbidden to every module of the product by its own contract
    assert modules - {"app.schema"} == core
    assert "app.schema" in _contracts()["schema-root"]["forbidden_modules"]
