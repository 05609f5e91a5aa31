"""The web process's gunicorn logger writes no access line of its own (the app logs each request, with its
request id) and so never builds one: gunicorn's stock ``access`` computed the line's atoms for every
request even with ``gunicorn.access`` at WARNING."""

from __future__ import annotations

from pathlib import Path

import pytest
from gunicorn.config import Config
from gunicorn.glogging import Logger

from web.gunicorn_conf import AppAccessLogger

ROOT = Path(__file__).resolve().parents[2]


def _logger(cls: type[Logger], monkeypatch: pytest.MonkeyPatch) -> tuple[Logger, list[object]]:
    built: list[object] = []
    monkeypatch.setattr(cls, "atoms", lambda self, *a: built.append(a) or {})
    cfg = Config()
    cfg.set("accesslog", "-")  # gunicorn's own access line asked for: the stock logger builds it
    return cls(cfg), built


def test_the_app_logger_builds_no_access_line(monkeypatch):
    stock, built = _logger(Logger, monkeypatch)
    stock.access(None, None, {}, None)  # gunicorn's: the atoms of the line, for every request
    assert len(built) == 1
    ours, built = _logger(AppAccessLogger, monkeypatch)
    ours.access(None, None, {}, None)
    assert built == []


def test_the_procfile_config_uses_it():
    conf = (ROOT / "gunicorn.conf.py").read_text()
    assert "logger_class = AppAccessLogger" in conf
