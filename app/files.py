"""Where the project's files that are not Python packages are (``alembic.ini``, ``migrations/``, the
``Procfile``, ``gunicorn.conf.py``): beside the packages in a checkout (an editable install too); under
the environment's data path, ``<prefix>/share/ledgerflow``, when the server's wheel is installed
(pyproject.toml, ``[tool.setuptools.data-files]``). Standard library only: every command reads it."""

from __future__ import annotations

import sysconfig
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
IS_CHECKOUT = (CHECKOUT / "alembic.ini").exists()
ROOT = CHECKOUT if IS_CHECKOUT else Path(sysconfig.get_path("data")) / "share" / "ledgerflow"
# .data/ of a checkout; for an installed server the current folder's .data/ (never inside site-packages)
DATA_ROOT = CHECKOUT if IS_CHECKOUT else Path.cwd()
