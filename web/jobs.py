"""Job ledger operator API (SPEC L-API), mounted at /api/workflows/engine."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("jobs", __name__)
