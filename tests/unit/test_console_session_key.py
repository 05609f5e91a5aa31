"""One console session key for every web process of a deployment: ``ledgerflow dev`` keeps one
under the data folder, the gunicorn master of the Procfile's ``web`` makes one for its workers when none
is set, and production refuses to start without one (one line, no traceback)."""

from __future__ import annotations

import os
import stat

import pytest

from app import settings
from ledgerflow import devenv
from web import gunicorn_conf


def test_dev_makes_the_key_once_and_keeps_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LEDGERFLOW_DATA_DIR", str(tmp_path))
    key = devenv.session_key()
    path = tmp_path / devenv.SESSION_KEY_FILE
    assert len(key) >= 32 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert devenv.session_key() == key  # the same key at the next `make run`
    path.write_text("short\n")  # cut short (a crash while writing): replaced, never used
    again = devenv.session_key()
    assert again != "short" and len(again) >= 32


def test_the_gunicorn_master_gives_its_workers_one_key(monkeypatch):
    monkeypatch.delenv("LEDGERFLOW_ENV", raising=False)
    monkeypatch.delenv(settings.SECRET_KEY.name, raising=False)
    gunicorn_conf.on_starting(None)
    made = os.environ[settings.SECRET_KEY.name]
    assert len(made) >= 32
    gunicorn_conf.on_starting(None)
    assert os.environ[settings.SECRET_KEY.name] == made  # an existing key is kept


def test_production_refuses_to_start_without_the_key(monkeypatch, capsys):
    monkeypatch.setenv("LEDGERFLOW_ENV", "production")
    monkeypatch.setenv("LEDGERFLOW_CURSOR_SECRET", "c" * 48)
    monkeypatch.delenv(settings.SECRET_KEY.name, raising=False)
    with pytest.raises(SystemExit) as exc:
        gunicorn_conf.on_starting(None)
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        "ledgerflow: refusing to start (LEDGERFLOW_ENV=production): "
    )
    assert settings.SECRET_KEY.name in err and "Traceback" not in err
    assert settings.SECRET_KEY.name not in os.environ  # production never makes one up
    monkeypatch.setenv(settings.SECRET_KEY.name, "k" * 48)
    gunicorn_conf.on_starting(None)
    assert settings.production_problems() == []
