"""The settings module (app/settings.py): each kind of value is parsed or refused with one line naming
the variable and what is allowed; values are read at call time; the whole environment is checked at
start; no other module of the product reads the environment (a scan of the source); docs/reference.md's
tables are the declarations' own; the Procfile's defaults are the declared ones."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app import settings
from app.settings import SETTINGS, SettingError

ROOT = Path(__file__).resolve().parents[2]
# the product: what runs in the Procfile's processes and the `ledgerflow` command
PRODUCT = ("app", "web", "actors", "ledgerflow", "schemas", "migrations", "gunicorn.conf.py")
# Reads of the environment that are not the product's settings, each with why.
ALLOWED_READS = {
    # the SDK is packed alone (sdk/pyproject.toml) and imports no server module: it reads its own two
    ("ledgerflow/client.py", "LEDGERFLOW_URL"): "the SDK's server address",
    ("ledgerflow/client.py", "LEDGERFLOW_TOKEN"): "the SDK's credential",
    ("ledgerflow/cli.py", "PATH"): "`ledgerflow dev` puts its own bin folder first for honcho's processes",
    ("ledgerflow/testing.py", "*"): "the test kit hands its environment on to the server processes it starts",
}
SDK_VARIABLES = {"LEDGERFLOW_URL", "LEDGERFLOW_TOKEN"}
WRITES = {"update", "setdefault", "pop", "__setitem__", "__delitem__", "clear"}


def bad(name: str, raw: str) -> str:
    with pytest.raises(SettingError) as err:
        SETTINGS[name].parse(raw)
    return str(err.value)


# ------------------------------------------------------------------------------------------- the parsers
def test_a_bad_value_is_one_line_naming_the_variable_and_what_is_allowed():
    assert bad("LEDGERFLOW_SLOTS", "abc") == "LEDGERFLOW_SLOTS: must be an integer from 1 to 64"
    assert bad("LEDGERFLOW_SLOTS", "0") == bad("LEDGERFLOW_SLOTS", "65") == bad("LEDGERFLOW_SLOTS", "2.5")
    assert (
        bad("LEDGERFLOW_POLL_SECONDS", "nan") == "LEDGERFLOW_POLL_SECONDS: must be a number from 0.01 to 3600"
    )
    assert bad("LEDGERFLOW_POLL_SECONDS", "inf") == bad("LEDGERFLOW_POLL_SECONDS", "0")
    assert (
        bad("LEDGERFLOW_METRICS", "maybe")
        == "LEDGERFLOW_METRICS: must be on or off (also 1/0, true/false, yes/no)"
    )
    assert bad("LOG_FORMAT", "xml") == "LOG_FORMAT: must be one of json, console"
    assert bad("LEDGERFLOW_ENV", "prod") == "LEDGERFLOW_ENV: must be one of development, production"
    assert bad("DATABASE_URL", "mysql://x/y") == (
        "DATABASE_URL: must be a postgres://, postgresql:// or postgresql+psycopg:// URL"
    )
    assert bad("REDIS_URL", "localhost:6379") == "REDIS_URL: must be a redis://, rediss:// or unix:// URL"
    assert (
        bad("LEDGERFLOW_HANDLERS", "a.b, c-d")
        == "LEDGERFLOW_HANDLERS: must be comma-separated Python module names"
    )
    assert bad("LEDGERFLOW_REDIS_NAMESPACE", "a b").startswith("LEDGERFLOW_REDIS_NAMESPACE: must be 1 to 64")
    assert (
        bad("LEDGERFLOW_BIND_HOST", "0.0.0.0:80")
        == "LEDGERFLOW_BIND_HOST: must be an IP address or host name"
    )
    assert bad("LEDGERFLOW_RATE_LIMIT", "100 per fortnight").startswith(
        "LEDGERFLOW_RATE_LIMIT: must be off, or"
    )
    assert (
        bad("OTEL_TRACES_EXPORTER", "zipkin")
        == "OTEL_TRACES_EXPORTER: must be comma-separated otlp, console, none"
    )
    for item in ("10.0.0.0/33", "999.1.1.1", "http://x", "a b"):
        assert bad("LEDGERFLOW_OUTBOUND_ALLOW", f"127.0.0.1/32,{item}").startswith(
            "LEDGERFLOW_OUTBOUND_ALLOW: must be"
        )
    for item in ("ns-a", "ns=-1", "ns=x", "=3", "ns=36501"):
        assert "must be namespace_id=days" in bad("LEDGERFLOW_RETENTION_BY_NAMESPACE", item)
    # a secret is never shown back
    assert "hunter2" not in bad("DATABASE_URL", "mysql://root:hunter2@db/x")


def test_good_values_and_their_types():
    p = {name: s.parse for name, s in SETTINGS.items()}
    assert p["LEDGERFLOW_SLOTS"](" 8 ") == 8
    assert p["LEDGERFLOW_POLL_SECONDS"]("0.2") == 0.2
    assert [p["LEDGERFLOW_METRICS"](w) for w in ("ON", "1", "yes", "Off", "0", "false")] == [True] * 3 + [
        False
    ] * 3
    assert p["LOG_LEVEL"]("warning") == "WARNING" and p["LEDGERFLOW_ENV"]("Production") == "production"
    assert p["LEDGERFLOW_HANDLERS"]("tests.workers.handlers, chaos.handlers") == (
        "tests.workers.handlers",
        "chaos.handlers",
    )
    assert p["LEDGERFLOW_RETENTION_BY_NAMESPACE"]("ns-a=30, ns-b=0.5") == (("ns-a", 30.0), ("ns-b", 0.5))
    assert p["LEDGERFLOW_RATE_LIMIT"](" OFF ") is None
    assert p["LEDGERFLOW_RATE_LIMIT"]("5 per 2 minutes; 100/second") == "5 per 2 minutes; 100/second"
    assert p["LEDGERFLOW_OUTBOUND_ALLOW"]("127.0.0.1/32, ::1, receiver.internal, 10.1.2.3")
    assert p["OTEL_TRACES_EXPORTER"]("Console,otlp") == {"console", "otlp"}
    assert p["DATABASE_URL"]("postgres://u@h/db") == "postgres://u@h/db"
    assert settings.normalize_database_url("postgres://u@h/db") == "postgresql+psycopg://u@h/db"
    assert p["LEDGERFLOW_BIND_HOST"]("::") == "::" and p["LEDGERFLOW_BIND_HOST"]("localhost") == "localhost"


@given(
    st.lists(
        st.from_regex(settings._RATE, fullmatch=True).filter(lambda t: not re.search(r"[,;|]", t)),
        min_size=1,
        max_size=3,
    ),
    st.sampled_from(";,|"),
)
def test_every_rate_limit_the_settings_accept_parses_in_the_limits_library(parts, sep):
    from limits import parse_many

    raw = sep.join(parts)
    assert settings.RATE_LIMIT.parse(raw) == raw.strip()
    assert len(parse_many(raw)) == len(parts)


def test_the_rate_limit_grammar_is_limits_own_narrowed():
    from limits import parse_many

    for raw in ("100/second;3000/minute", "1 per 5 minutes", "10/hour, 20/day", "2/year|3/month"):
        assert settings.RATE_LIMIT.parse(raw) and parse_many(raw)
    for raw in ("0/second", "1/fortnight", "1 persecond", "100/second;"):
        with pytest.raises(SettingError):
            settings.RATE_LIMIT.parse(raw)


# ----------------------------------------------------------------------------------- reading at call time
def test_get_reads_the_environment_at_each_call(monkeypatch):
    monkeypatch.delenv("LEDGERFLOW_SIGNAL_LIMIT", raising=False)
    assert settings.SIGNAL_LIMIT.get() == 1024
    monkeypatch.setenv("LEDGERFLOW_SIGNAL_LIMIT", "2")
    assert settings.SIGNAL_LIMIT.get() == 2
    monkeypatch.setenv("LEDGERFLOW_SIGNAL_LIMIT", "")  # empty is unset
    assert settings.SIGNAL_LIMIT.get() == 1024
    monkeypatch.setenv("LEDGERFLOW_SIGNAL_LIMIT", "many")
    with pytest.raises(SettingError, match="^LEDGERFLOW_SIGNAL_LIMIT: must be an integer from 1 to 1000000$"):
        settings.SIGNAL_LIMIT.get()


def test_validate_names_the_first_bad_variable_and_the_others_in_one_line(monkeypatch):
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    settings.validate()  # nothing set: every default
    monkeypatch.setenv("LEDGERFLOW_SLOTS", "abc")
    monkeypatch.setenv("LOG_LEVEL", "loud")
    with pytest.raises(SettingError) as err:
        settings.validate()
    assert str(err.value) == "LEDGERFLOW_SLOTS: must be an integer from 1 to 64 (also not allowed: LOG_LEVEL)"


def test_relations_between_settings_are_checked(monkeypatch):
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LEDGERFLOW_LEASE_SECONDS", "10")
    monkeypatch.setenv("LEDGERFLOW_RENEW_SECONDS", "10")
    monkeypatch.setenv("LEDGERFLOW_BACKOFF_BASE_SECONDS", "1000")
    assert [str(e) for e in settings.problems()] == [
        "LEDGERFLOW_RENEW_SECONDS: must be less than LEDGERFLOW_LEASE_SECONDS (10)",
        "LEDGERFLOW_BACKOFF_BASE_SECONDS: must be at most LEDGERFLOW_BACKOFF_CAP_SECONDS (900)",
    ]


def test_the_process_snapshot_takes_the_declared_defaults(monkeypatch):
    # no embedded-services lookup registered by another test of the session (ledgerflow.devenv) may fill in
    # DATABASE_URL below
    monkeypatch.setattr(settings, "_environment_hooks", [])
    for name in SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgres://u@h/db")
    monkeypatch.setenv("LEDGERFLOW_SLOTS", "8")
    snapshot = settings.load_settings()
    assert snapshot.database_url == "postgresql+psycopg://u@h/db" and snapshot.slots_per_pool == 8
    assert snapshot == settings.Settings(
        database_url="postgresql+psycopg://u@h/db", redis_url=None, slots_per_pool=8
    )
    monkeypatch.delenv("DATABASE_URL")
    with pytest.raises(SettingError, match="^DATABASE_URL: is not set: export DATABASE_URL="):
        settings.load_settings()


def test_every_declaration_has_help_and_a_documented_default():
    for s in SETTINGS.values():
        assert s.help and "|" not in s.help + s.parser.allowed + settings.shown_default(s), s.name
        if s.default not in (None, "", (), frozenset()):
            s.parse(str(s.default).lower() if isinstance(s.default, bool) else str(s.default))


# ------------------------------------------------------------------------------- nowhere else in the source
def environment_reads(source: str) -> list[tuple[int, str]]:
    """(line, variable) of every read of the environment in ``source``: ``os.environ[...]``,
    ``os.environ.get(...)``, ``os.getenv(...)``, ``"X" in os.environ``, the mapping itself passed
    anywhere (``dict(os.environ)``: ``*``), and ``from os import environ / getenv``. Writes
    (``os.environ[X] = ...``, ``.update``, ``.setdefault``, ``.pop``) are not reads."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found: list[tuple[int, str]] = []

    def key(node: ast.AST | None) -> str:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else "*"

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [
                (node.lineno, a.name) for a in node.names if a.name in ("environ", "environb", "getenv")
            ]
        if not (
            isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os"
        ):
            continue
        parent = parents.get(node)
        if node.attr in ("getenv", "getenvb"):
            call = parent if isinstance(parent, ast.Call) else None
            found.append((node.lineno, key(call.args[0] if call and call.args else None)))
        elif node.attr in ("environ", "environb"):
            if isinstance(parent, ast.Subscript):
                if isinstance(parent.ctx, ast.Load):
                    found.append((node.lineno, key(parent.slice)))
            elif isinstance(parent, ast.Attribute):
                call = parents.get(parent)
                if parent.attr not in WRITES:
                    args = call.args if isinstance(call, ast.Call) else []
                    found.append((node.lineno, key(args[0]) if parent.attr == "get" and args else "*"))
            elif isinstance(parent, ast.Compare):
                found.append((node.lineno, key(parent.left)))
            else:
                found.append((node.lineno, "*"))
    return sorted(found)


def test_the_scan_sees_every_kind_of_read():
    source = """
import os
from os import getenv
a = os.environ.get("A", "1")
b = os.environ["B"]
c = os.getenv("C")
d = "D" in os.environ
e = dict(os.environ)
f = {**os.environ}
g = os.environ.get(name)
os.environ["W"] = "written"
os.environ.setdefault("W2", "x")
os.environ.update({"W3": "x"})
os.environ.pop("W4", None)
"""
    assert environment_reads(source) == [
        (3, "getenv"),
        (4, "A"),
        (5, "B"),
        (6, "C"),
        (7, "D"),
        (8, "*"),
        (9, "*"),
        (10, "*"),
    ]


def product_files() -> list[Path]:
    files: list[Path] = []
    for entry in PRODUCT:
        path = ROOT / entry
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [f for f in files if f != ROOT / "app" / "settings.py"]


def test_no_module_of_the_product_reads_the_environment_but_the_settings_module():
    offenders = []
    for path in product_files():
        rel = path.relative_to(ROOT).as_posix()
        for line, name in environment_reads(path.read_text()):
            if (rel, name) not in ALLOWED_READS:
                offenders.append(f"{rel}:{line} reads {name}")
    assert offenders == [], "declare the setting in app/settings.py and read it with .get(): " + "; ".join(
        offenders
    )


def test_every_ledgerflow_variable_the_product_names_is_declared():
    named: dict[str, str] = {}
    for path in product_files():
        for name in re.findall(r"\b(LEDGERFLOW_[A-Z0-9_]*[A-Z0-9])\b", path.read_text()):
            named.setdefault(name, path.relative_to(ROOT).as_posix())
    unknown = {n: where for n, where in named.items() if n not in SETTINGS and n not in SDK_VARIABLES}
    assert unknown == {}


def test_the_settings_module_imports_only_the_standard_library():
    tree = ast.parse((ROOT / "app" / "settings.py").read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported - {"__future__"} <= sys.stdlib_module_names, imported - sys.stdlib_module_names


# -------------------------------------------------------------------------------------------------- docs
START = "<!-- generated by `python -m app.settings --markdown`: edit app/settings.py, not this table -->"
END = "<!-- end of the generated settings tables -->"


def test_the_reference_tables_are_the_declarations():
    doc = (ROOT / "docs" / "reference.md").read_text()
    generated = doc.split(START)[1].split(END)[0]
    assert generated.strip() == "\n".join(settings.markdown()).strip(), (
        "docs/reference.md is out of date: paste the output of `python -m app.settings --markdown`"
    )
    assert "| `HOST` |" not in doc


def test_the_procfile_defaults_are_the_declared_ones():
    procfile = (ROOT / "Procfile").read_text()
    assert f"${{PORT:-{settings.PORT.default}}}" in procfile
    assert f"${{LEDGERFLOW_BIND_HOST:-{settings.BIND_HOST.default}}}" in procfile


def test_the_command_prints_the_tables_and_checks_the_environment(monkeypatch, capsys):
    assert settings.main(["--markdown"]) == 0
    assert capsys.readouterr().out == "\n".join(settings.markdown()).rstrip("\n") + "\n"
    monkeypatch.setenv("LEDGERFLOW_SLOTS", "65")
    with pytest.raises(SystemExit) as ended:
        settings.main(["--check"])
    assert ended.value.code == 2
    assert capsys.readouterr().err == "Error: LEDGERFLOW_SLOTS: must be an integer from 1 to 64\n"
