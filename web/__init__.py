"""Thin Flask layer: create_app() and one blueprint per resource."""

from __future__ import annotations

from flask import Flask

from web.health import bp as health_bp


def create_app() -> Flask:
    app = Flask("ledgerflow")
    app.register_blueprint(health_bp)
    return app
