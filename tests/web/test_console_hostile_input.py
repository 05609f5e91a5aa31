"""The input layer (W-API-2) on the console, which the OpenAPI-driven fuzz test does not reach: every page
of the console (tests/console_scenario.py) with hostile values in each of its query parameters (its own
and the ones the console's views read: ``ns``, ``cursor``, ``q``, filters, the workflow page's ``audit``
and ``events`` cursors) and in each path segment, and every form on those pages posted with a hostile
value in each field in turn, answer below 500. Before: a NUL in ``?ns=`` (the namespace switcher) or in
the replay preview's ``error_pattern`` reached PostgreSQL (500), and a replay form without a reason was
a KeyError (500)."""

from __future__ import annotations

import html
import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import pytest
from flask.testing import FlaskClient

from tests.console_scenario import Scenario, build, pages
from tests.web.test_console import login

HOSTILE = ["a\x00b", "１", "1e30", "9" * 30, "x" * 3000, "2024-13-45T99:99", "a.é"]
READ_BY_VIEWS = ["cursor", "q", "ns", "audit", "events", "status", "type", "keyword", "created_from", "created_to",
                 "created_after", "created_before", "limit", "instance_id", "definition_id", "state", "schedule_id",
                 "error_pattern", "statuses", "preview", "trace_id", "business_key_prefix", "next"]  # fmt: skip
FORM_VALUES = ["a\x00b", "１", "1e30", "9" * 30, "x" * 5000, "-1", '{"a": "\\u0000"}', "[1]", "null", ""]
FORM = re.compile(r'<form[^>]*method="post"[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
FIELD = re.compile(r'<(?:input|textarea|select)[^>]*name="([^"]+)"(?:[^>]*value="([^"]*)")?', re.S)
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


@pytest.fixture(scope="module")
def scenario(app) -> Scenario:
    return build()


@pytest.fixture(scope="module")
def admin(app, scenario: Scenario) -> FlaskClient:
    c = app.test_client()
    assert login(c, scenario.tokens["admin"]).status_code == 302
    return c


def test_hostile_query_values_and_path_segments_are_never_a_server_error(admin, scenario):
    errors = []
    for _name, path in pages(scenario):
        parts = urlsplit(path)
        own = dict(parse_qsl(parts.query))
        for key in sorted(set(own) | set(READ_BY_VIEWS)):
            for value in HOSTILE:
                url = parts.path + "?" + urlencode({**own, key: value})
                if (status := admin.get(url).status_code) >= 500:
                    errors.append((url[:160], status))
        segments = parts.path.split("/")
        for i in range(2, len(segments)):
            for value in HOSTILE:
                url = "/".join([*segments[:i], quote(value), *segments[i + 1 :]])
                if (status := admin.get(url).status_code) >= 500:
                    errors.append((url[:160], status))
    assert errors == []


def test_every_form_with_a_hostile_value_in_any_field_is_never_a_server_error(admin, scenario):
    errors = []
    seen: set[str] = set()
    for _name, path in pages(scenario):
        for action, inner in FORM.findall(admin.get(path).data.decode()):
            action = html.unescape(action)
            if "logout" in action or action in seen:
                continue
            seen.add(action)
            fields = {name: html.unescape(value or "") for name, value in FIELD.findall(inner)}
            for target in [k for k in fields if k != "csrf_token"]:
                for value in FORM_VALUES:
                    token = CSRF.search(admin.get(path).data.decode()).group(1)
                    data = {**fields, "confirm": "yes", "csrf_token": token, target: value}
                    if (status := admin.post(action, data=data).status_code) >= 500:
                        errors.append((action, target, value[:20], status))
    assert len(seen) >= 15  # the forms of the scenario's pages were found
    assert errors == []
