"""The input layer (W-API-2) on the console, which the OpenAPI-driven fuzz test does not reach: every page
of the console (tests/console_scenario.py) with hostile values in each of its query parameters (its own
and the ones the console's views read: ``ns``, ``cursor``, ``q``, filters, the workflow page's ``audit``
and ``events`` cursors) and in each path segment, and every form on those pages posted with a hostile
value in each field in turn, answer below 500. Before: a NUL in ``?ns=`` (the namespace switcher) or in
the replay preview's ``error_pattern`` reached PostgreSQL (500), and a replay form without a reason was
a KeyError (500).

A page is sent hostile values in the parameters it reads (and in one it does not, for whatever reads the
raw URL): which those are is recorded while the page renders once (``ReadArgs``); a page that iterates its
query string (a pager's links, a filter form) reads every parameter. Sending a parameter no code looks at
tested the filter of every request (``check_query``) again, not the page: 6,300 requests became ~2,400."""

from __future__ import annotations

import html
import os
import re
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

import flask
import pytest
from flask.testing import FlaskClient
from werkzeug.datastructures import ImmutableMultiDict

import web
from tests.console_scenario import Scenario, build, pages
from tests.web.test_console import login

HOSTILE = ["a\x00b", "１", "1e30", "9" * 30, "x" * 3000, "2024-13-45T99:99", "a.é"]
READ_BY_VIEWS = ["cursor", "q", "ns", "audit", "events", "status", "type", "keyword", "created_from", "created_to",
                 "created_after", "created_before", "limit", "instance_id", "definition_id", "state", "schedule_id",
                 "error_pattern", "statuses", "preview", "trace_id", "business_key_prefix", "next"]  # fmt: skip
FORM_VALUES = ["a\x00b", "１", "1e30", "9" * 30, "x" * 5000, "-1", '{"a": "\\u0000"}', "[1]", "null", ""]
# ``make test`` posts each field the values of the bugs this test caught (a NUL that reached PostgreSQL, a
# field left empty) and two of the others, in turn, so that every value reaches a quarter of the fields
# (~2,000 posts took 146 s of one test process on CI); ``make fuzz`` (``LEDGERFLOW_FUZZ_RANDOM``) posts
# every value to every field
ALWAYS = ["a\x00b", ""]
EVERY_VALUE = bool(os.environ.get("LEDGERFLOW_FUZZ_RANDOM"))


def form_values(field_number: int) -> list[str]:
    """The values posted in the ``field_number``-th field the test fills."""
    if EVERY_VALUE:
        return FORM_VALUES
    rest = [v for v in FORM_VALUES if v not in ALWAYS]
    return [*ALWAYS, rest[field_number % len(rest)], rest[(field_number + len(rest) // 2) % len(rest)]]


FORM = re.compile(r'<form[^>]*method="post"[^>]*action="([^"]+)"[^>]*>(.*?)</form>', re.S)
FIELD = re.compile(r'<(?:input|textarea|select)[^>]*name="([^"]+)"(?:[^>]*value="([^"]*)")?', re.S)
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')
EXPIRED = b"Form expired or forged"  # the console's answer to a refused token (web/console/common.py)


EVERY = "*"  # the page iterated its parameters
_read: set[str] = set()
_filtering = [False]  # inside check_query (every request iterates its parameters there)


class ReadArgs(ImmutableMultiDict):
    """A request's query parameters that note which of them the code reads (``_read``)."""

    def __getitem__(self, key):
        _read.add(key)
        return super().__getitem__(key)

    def get(self, key, default=None, type=None):
        _read.add(key)
        return super().get(key, default, type)

    def getlist(self, key, type=None):
        if not _filtering[0]:
            _read.add(key)
        return super().getlist(key, type)

    def __contains__(self, key):
        _read.add(key)
        return super().__contains__(key)

    def __iter__(self):
        if not _filtering[0]:
            _read.add(EVERY)
        return super().__iter__()


def _reading_every(method):
    """``method`` of the query dict, noting that the code read every parameter (it iterated them)."""

    def read_all(self, *args, **kwargs):
        _read.add(EVERY)
        return method(self, *args, **kwargs)

    return read_all


for _name in ("items", "keys", "values", "lists", "to_dict", "copy"):
    setattr(ReadArgs, _name, _reading_every(getattr(ImmutableMultiDict, _name)))


@pytest.fixture(scope="module")
def reads(app):
    """Which parameters a page reads: ``reads(client, path)``."""

    class Recording(flask.Request):
        parameter_storage_class = ReadArgs

    def filtered(args):
        _filtering[0] = True
        try:
            return check_query(args)
        finally:
            _filtering[0] = False

    globals_ = web.create_app.__globals__
    kept, check_query = app.request_class, globals_["check_query"]
    app.request_class, globals_["check_query"] = Recording, filtered

    def read_by(client: FlaskClient, path: str) -> set[str]:
        _read.clear()
        client.get(path)
        return set(_read)

    yield read_by
    app.request_class, globals_["check_query"] = kept, check_query


@pytest.fixture(scope="module")
def scenario(app) -> Scenario:
    return build()


@pytest.fixture(scope="module")
def admin(app, scenario: Scenario) -> FlaskClient:
    c = app.test_client()
    assert login(c, scenario.tokens["admin"]).status_code == 302
    return c


def test_hostile_query_values_and_path_segments_are_never_a_server_error(admin, scenario, reads):
    errors, seen = [], {}
    for name, path in pages(scenario):
        parts = urlsplit(path)
        own = dict(parse_qsl(parts.query))
        read = seen[name] = reads(admin, path)
        keys = set(own) | set(READ_BY_VIEWS) if EVERY in read else set(own) | (read & set(READ_BY_VIEWS))
        keys.add(next(k for k in [*READ_BY_VIEWS, "unread"] if k not in keys))
        for key in sorted(keys):
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
    # the recording saw what these pages are known to read
    assert EVERY in seen["workflows"] and {"audit", "events"} <= seen["workflow-running"], seen
    assert seen["search"] == {"q"} and EVERY not in seen["job-dead"], seen


def test_every_form_with_a_hostile_value_in_any_field_is_never_a_server_error(admin, scenario):
    errors = []
    seen: set[str] = set()
    filled = 0
    for _name, path in pages(scenario):
        for action, inner in FORM.findall(admin.get(path).data.decode()):
            action = html.unescape(action)
            if "logout" in action or action in seen:
                continue
            seen.add(action)
            fields = {name: html.unescape(value or "") for name, value in FIELD.findall(inner)}
            token = None
            for target in [k for k in fields if k != "csrf_token"]:
                filled += 1
                for value in form_values(filled):
                    for _fresh in range(2):  # a token is good for the session; a refused one is fetched again
                        token = token or CSRF.search(admin.get(path).data.decode()).group(1)
                        data = {**fields, "confirm": "yes", "csrf_token": token, target: value}
                        resp = admin.post(action, data=data)
                        if not (resp.status_code == 400 and EXPIRED in resp.data):
                            break
                        token = None
                    else:
                        errors.append((action, target, value[:20], "the form's token was refused"))
                    if resp.status_code >= 500:
                        errors.append((action, target, value[:20], resp.status_code))
    assert len(seen) >= 15  # the forms of the scenario's pages were found
    assert errors == []
