"""X-DEF version documents: validate the whole graph before publishing, with precise field paths.

Pure functions (no I/O). ``validate_document`` returns the normalized document and the task queues
it uses, or raises ``InvalidArgument`` listing every problem as ``{field, message}``.
"""

from __future__ import annotations

import difflib
import re
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

from app.engine.contracts import schema_errors
from app.engine.decide import conditions
from app.engine.decide.fanout import (
    FANOUT_DEFAULT_ITEMS,
    FANOUT_DEFAULT_PARALLEL,
    FANOUT_MAX_ITEMS,
    FANOUT_MAX_PARALLEL,
)
from app.errors import FieldError, InvalidArgument
from app.ledger import destinations

MAX_STEPS = 128
VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
QUEUE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
PAYLOAD_VERSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
HEX32_RE = re.compile(r"^[0-9a-f]{32}$")
REF_RE = re.compile(
    r"^\$\.(?:input|business_key|steps\.(?P<step>[A-Za-z0-9][A-Za-z0-9_-]{0,63})\.output)"
    r"(?P<rest>(?:\.[A-Za-z0-9_-]+|\[\d+\])*)$"
)
KINDS = ("TASK", "SIGNAL", "TIMER", "POLL", "SUBWORKFLOW", "TRIGGER")
# an element of a fan-out (a TASK or SUBWORKFLOW step's ``for_each``): its input mapping may name the
# element and its index
ELEMENT_REF_RE = re.compile(r"^\$\.(?:index|item(?:(?:\.[A-Za-z0-9_-]+|\[\d+\])*))$")


TOP_FIELDS = {"version", "description", "input_schema", "deadline_seconds", "signals", "steps", "output"}
COMMON_STEP = {"key", "kind", "after", "description", "condition"}
STEP_FIELDS = {
    "TASK": COMMON_STEP
    | {"queue", "input", "timeout_seconds", "retry", "compensation", "dispatch", "for_each"},
    "TIMER": COMMON_STEP | {"delay_seconds"},
    "SIGNAL": COMMON_STEP | {"signal", "payload_version", "correlation", "timeout_seconds"},
    "SUBWORKFLOW": COMMON_STEP | {"definition_id", "version", "input", "for_each"},
    "TRIGGER": COMMON_STEP | {"url", "method", "headers", "body", "timeout_seconds"},
    "POLL": COMMON_STEP
    | {
        "queue",
        "input",
        "interval_ms",
        "max_rounds",
        "max_attempts_per_round",
        "timeout_seconds",
        "final_signal",
    },
}
REQUIRED = {
    "TASK": ("queue",),
    "TIMER": ("delay_seconds",),
    "SIGNAL": ("signal", "payload_version", "correlation"),
    "SUBWORKFLOW": ("definition_id", "version"),
    "TRIGGER": ("url",),
    "POLL": ("queue", "interval_ms", "max_rounds", "max_attempts_per_round"),
}
DEFAULT_TASK_TIMEOUT_SECONDS = 300
# TRIGGER steps: one outbound call (app/engine/handlers/triggers.py)
TRIGGER_METHODS = ("POST", "PUT", "PATCH", "DELETE", "GET")
MAX_URL_CHARS = 2048
MAX_TRIGGER_HEADERS = 20
MAX_TRIGGER_TIMEOUT_SECONDS = 30
DEFAULT_TRIGGER_TIMEOUT_SECONDS = 10
HEADER_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,63}$")
# set by the engine on every call; a definition may not override them
RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "transfer-encoding",
        "connection",
        "x-idempotency-key",
        "traceparent",
        "tracestate",
        "x-ledgerflow-signature",
        "x-ledgerflow-timestamp",
    }
)


def url_error(url: Any) -> str | None:
    """Why ``url`` cannot be an outbound destination (syntax only: http/https, a host, no credentials).
    The destination policy (private / loopback / metadata addresses) is ``_check_outbound``'s next step
    and the safe HTTP client's (``app.ledger.http``) at delivery."""
    if not isinstance(url, str) or not 1 <= len(url) <= MAX_URL_CHARS:
        return f"an http(s) URL of at most {MAX_URL_CHARS} characters"
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "an absolute http:// or https:// URL with a host"
    if parts.username is not None or parts.password is not None:
        return "credentials in the URL are not allowed (use headers)"
    if port == 0 or any(c.isspace() or ord(c) < 32 for c in url):
        return "not a valid URL"
    return None


MAX_DEADLINE_SECONDS = 366 * 86400
# references in one mapping (a step's input, a correlation, the output): resolution is bounded too
MAX_REFERENCES = 64


class _Errors:
    def __init__(self) -> None:
        self.items: list[FieldError] = []

    def add(self, field: str, message: str) -> None:
        self.items.append(FieldError(field, message))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _int_in(errs: _Errors, field: str, v: Any, lo: int, hi: int) -> None:
    if isinstance(v, Decimal) and v == v.to_integral_value():
        v = int(v)
    if not _is_int(v) or not lo <= v <= hi:
        errs.add(field, f"must be an integer from {lo} to {hi}")


def _fields(errs: _Errors, prefix: str, obj: dict, allowed: set[str]) -> None:
    for name in obj:
        if name not in allowed:
            errs.add(f"{prefix}{name}", "unknown field")


def references(value: Any) -> list[str]:
    """Every reference string (``$.…``) inside a mapping value."""
    if isinstance(value, str):
        return [value] if value.startswith("$.") else []
    if isinstance(value, dict):
        return [r for v in value.values() for r in references(v)]
    if isinstance(value, list):
        return [r for v in value for r in references(v)]
    return []


def _check_refs(
    errs: _Errors,
    field: str,
    value: Any,
    keys: set[str],
    allowed_steps: set[str] | None,
    *,
    element: bool = False,
) -> None:
    refs = references(value)
    if len(refs) > MAX_REFERENCES:
        errs.add(field, f"a mapping holds at most {MAX_REFERENCES} references (got {len(refs)})")
        return
    for ref in refs:
        if element and ELEMENT_REF_RE.fullmatch(ref):
            continue  # $.item… / $.index of a fan-out's element
        _check_ref(errs, field, ref, keys, allowed_steps)


def _check_condition(errs: _Errors, f: str, cond: Any, keys: set[str], allowed_steps: set[str]) -> None:
    """A step's ``condition`` (``app.engine.decide.conditions``): its operators, operands and
    references, each problem at its own field path (``steps[3].condition.and[1].>[0]``)."""
    problems, refs = conditions.check(cond, f)
    for field, message in problems:
        errs.add(field, message)
    if len(refs) > MAX_REFERENCES:
        errs.add(f, f"a condition holds at most {MAX_REFERENCES} references (got {len(refs)})")
        return
    for field, ref in refs:
        _check_ref(errs, field, ref, keys, allowed_steps)


def _check_ref(errs: _Errors, field: str, ref: str, keys: set[str], allowed_steps: set[str] | None) -> None:
    m = REF_RE.fullmatch(ref)
    if not m:
        errs.add(field, f"invalid reference {ref!r}: use $.input…, $.business_key or $.steps.KEY.output…")
        return
    step = m.group("step")
    if step is None:
        return
    if step not in keys:
        errs.add(field, f"unknown step in reference {ref!r}")
    elif allowed_steps is not None and step not in allowed_steps:
        errs.add(field, f"reference {ref!r} names a step that is not a (transitive) dependency of this step")


def _find_cycle(after: dict[str, list[str]]) -> list[str] | None:
    color: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        color[n] = 1
        stack.append(n)
        for d in after.get(n, []):
            if d not in after:
                continue
            if color.get(d) == 1:
                return stack[stack.index(d) :] + [d]
            if color.get(d) is None:
                found = visit(d)
                if found:
                    return found
        stack.pop()
        color[n] = 2
        return None

    for n in after:
        if color.get(n) is None:
            found = visit(n)
            if found:
                return found
    return None


def ancestors(after: dict[str, list[str]], key: str) -> set[str]:
    seen: set[str] = set()
    todo = list(after.get(key, []))
    while todo:
        k = todo.pop()
        if k in seen or k not in after:
            continue
        seen.add(k)
        todo.extend(after.get(k, []))
    return seen


def _kind_problem(kind: Any) -> str:
    """What is wrong with a step's ``kind`` (absent, or not one of KINDS), with the likely one."""
    if kind is None:
        return f"required: one of {', '.join(KINDS)}"
    close = difflib.get_close_matches(str(kind).upper(), KINDS, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown kind {str(kind)[:40]!r}: one of {', '.join(KINDS)}{hint}"


def validate_document(doc: Any) -> tuple[dict, list[str]]:  # one pass over the document
    """Validate an X-DEF version document; return (document, sorted task queues)."""
    errs = _Errors()
    if not isinstance(doc, dict):
        raise InvalidArgument("the version document must be a JSON object", field="$")
    _fields(errs, "", doc, TOP_FIELDS)
    version = doc.get("version")
    if not isinstance(version, str) or not VERSION_RE.fullmatch(version):
        errs.add("version", "required: 1-64 ASCII characters, first a letter or digit, then also _ . -")
    elif version.lower() == "latest":
        errs.add("version", '"latest" is reserved and never resolved')
    if "description" in doc and not isinstance(doc["description"], str):
        errs.add("description", "must be a string")
    if "input_schema" not in doc:
        errs.add("input_schema", "required")
    else:
        errs.items += schema_errors("input_schema", doc["input_schema"])
    if "deadline_seconds" not in doc:
        errs.add("deadline_seconds", "required")
    else:
        _int_in(errs, "deadline_seconds", doc["deadline_seconds"], 1, MAX_DEADLINE_SECONDS)

    contracts: set[tuple[str, str]] = set()
    signals = doc.get("signals", [])
    if not isinstance(signals, list):
        errs.add("signals", "must be an array")
        signals = []
    for i, sig in enumerate(signals):
        f = f"signals[{i}]"
        if not isinstance(sig, dict):
            errs.add(f, "must be an object")
            continue
        _fields(errs, f + ".", sig, {"name", "payload_version", "schema"})
        name, pv = sig.get("name"), sig.get("payload_version")
        if not isinstance(name, str) or not NAME_RE.fullmatch(name):
            errs.add(f + ".name", "required: 1-128 ASCII name characters")
        if not isinstance(pv, str) or not PAYLOAD_VERSION_RE.fullmatch(pv):
            errs.add(f + ".payload_version", "required: 1-32 ASCII name characters")
        if "schema" not in sig:
            errs.add(f + ".schema", "required")
        else:
            errs.items += schema_errors(f + ".schema", sig["schema"])
        if not isinstance(name, str) or not isinstance(pv, str):
            continue
        if (name, pv) in contracts:
            errs.add(f, f"duplicate signal contract ({name}, {pv})")
        contracts.add((name, pv))

    steps = doc.get("steps")
    if not isinstance(steps, list) or not steps:
        errs.add("steps", "required: a non-empty array")
        steps = []
    elif len(steps) > MAX_STEPS:
        errs.add("steps", f"at most {MAX_STEPS} steps (got {len(steps)})")
        steps = []
    keys: dict[str, int] = {}
    for i, st in enumerate(steps):
        if isinstance(st, dict) and isinstance(st.get("key"), str) and KEY_RE.fullmatch(st["key"]):
            if st["key"] in keys:
                errs.add(f"steps[{i}].key", f"duplicate step key {st['key']!r}")
            else:
                keys[st["key"]] = i
    after: dict[str, list[str]] = {}
    for i, st in enumerate(steps):
        f = f"steps[{i}]"
        if not isinstance(st, dict):
            errs.add(f, "must be an object")
            continue
        kind = st.get("kind")
        if kind not in KINDS:
            errs.add(f + ".kind", _kind_problem(kind))
        else:
            _fields(errs, f + ".", st, STEP_FIELDS[kind])
        key = st.get("key")
        if not isinstance(key, str) or not KEY_RE.fullmatch(key):
            errs.add(f + ".key", "required: 1-64 characters, letters, digits, _ and -")
            continue
        for name in REQUIRED.get(kind, ()) if isinstance(kind, str) else ():
            if name not in st:
                errs.add(f"{f}.{name}", "required")
        deps = st.get("after", [])
        if not isinstance(deps, list):
            errs.add(f + ".after", "must be an array of step keys")
            deps = []
        good: list[str] = []
        for j, d in enumerate(deps):
            if not isinstance(d, str) or d not in keys:
                errs.add(f"{f}.after[{j}]", f"unknown step {d!r}")
            elif d == key:
                errs.add(f"{f}.after[{j}]", "a step cannot depend on itself")
            elif d in good:
                errs.add(f"{f}.after[{j}]", f"duplicate dependency {d!r}")
            else:
                good.append(d)
        after[key] = good  # also for an unknown kind: the steps after it are checked as written
        if kind in KINDS:
            _check_kind(errs, f, kind, st, contracts)

    cycle = _find_cycle(after)
    if cycle:
        errs.add(f"steps[{keys[cycle[0]]}].after", "dependency cycle: " + " -> ".join(reversed(cycle)))
    # references are checked even with a cycle (ancestors() tolerates one)
    for key, i in keys.items():
        st = steps[i]
        if isinstance(st, dict):
            fan = isinstance(st.get("for_each"), dict)
            _check_refs(
                errs, f"steps[{i}].input", st.get("input"), set(keys), ancestors(after, key), element=fan
            )
            if fan and isinstance(st["for_each"].get("items"), str):
                _check_refs(
                    errs,
                    f"steps[{i}].for_each.items",
                    st["for_each"]["items"],
                    set(keys),
                    ancestors(after, key),
                )
            if "condition" in st:
                _check_condition(
                    errs, f"steps[{i}].condition", st["condition"], set(keys), ancestors(after, key)
                )
            if st.get("kind") == "TRIGGER":
                _check_refs(errs, f"steps[{i}].body", st.get("body"), set(keys), ancestors(after, key))
            if st.get("kind") == "SIGNAL" and isinstance(st.get("correlation"), str):
                _check_refs(
                    errs, f"steps[{i}].correlation", st["correlation"], set(keys), ancestors(after, key)
                )
    if "output" in doc:
        _check_refs(errs, "output", doc["output"], set(keys), None)
    if errs.items:
        raise InvalidArgument(errors=errs.items)
    _normalize_ints(doc)
    queues: set[str] = set()
    for st in steps:
        if st.get("queue"):
            queues.add(st["queue"])
        if isinstance(st.get("compensation"), dict) and st["compensation"].get("queue"):
            queues.add(st["compensation"]["queue"])
    return doc, sorted(queues)


# retry: {max_attempts (default 1), backoff_seconds (default 30; 0 = immediate), max_backoff_seconds
# (default 900)}: attempt n+1 starts backoff_seconds * 2^(n-1) after attempt n failed, capped.
RETRY_FIELDS = ("max_attempts", "backoff_seconds", "max_backoff_seconds")
MAX_BACKOFF_SECONDS = 86_400
NUMERIC = ("timeout_seconds", "delay_seconds", "interval_ms", "max_rounds", "max_attempts_per_round")


def _normalize_ints(doc: dict) -> None:
    """Integral numbers written as 5.0 are stored as 5 (the engine computes with them)."""

    def fix(obj: dict, name: str) -> None:
        if isinstance(obj.get(name), Decimal):
            obj[name] = int(obj[name])

    fix(doc, "deadline_seconds")
    for st in doc["steps"]:
        for name in NUMERIC:
            fix(st, name)
        if isinstance(st.get("retry"), dict):
            for name in RETRY_FIELDS:
                fix(st["retry"], name)
        if isinstance(st.get("for_each"), dict):
            for name in ("max_items", "max_parallel", "tolerance"):
                fix(st["for_each"], name)


def _check_kind(errs: _Errors, f: str, kind: str, st: dict, contracts: set[tuple[str, str]]) -> None:
    if kind in ("TASK", "POLL") and "queue" in st:
        if not isinstance(st["queue"], str) or not QUEUE_RE.fullmatch(st["queue"]):
            errs.add(f + ".queue", "must be 1-128 characters: letters, digits, _ . : -")
    if "timeout_seconds" in st and kind != "TRIGGER":  # a TRIGGER's own bound: _check_trigger
        _int_in(errs, f + ".timeout_seconds", st["timeout_seconds"], 1, MAX_DEADLINE_SECONDS)
    if kind == "TASK":
        retry = st.get("retry", {})
        if not isinstance(retry, dict):
            errs.add(f + ".retry", "must be an object")
        else:
            _fields(errs, f + ".retry.", retry, set(RETRY_FIELDS))
            if "max_attempts" in retry:
                _int_in(errs, f + ".retry.max_attempts", retry["max_attempts"], 1, 100)
            for name in ("backoff_seconds", "max_backoff_seconds"):
                if name in retry:
                    _int_in(errs, f + ".retry." + name, retry[name], 0, MAX_BACKOFF_SECONDS)
        comp = st.get("compensation")
        if comp is not None:
            if (
                not isinstance(comp, dict)
                or not isinstance(comp.get("queue"), str)
                or not QUEUE_RE.fullmatch(comp["queue"])
            ):
                errs.add(f + ".compensation.queue", "required: a queue name")
            else:
                _fields(errs, f + ".compensation.", comp, {"queue"})
        if "dispatch" in st:
            _check_dispatch(errs, f + ".dispatch", st["dispatch"])
        if "for_each" in st:
            _check_for_each(errs, f, st)
    elif kind == "TIMER" and "delay_seconds" in st:
        _int_in(errs, f + ".delay_seconds", st["delay_seconds"], 0, MAX_DEADLINE_SECONDS)
    elif kind == "SIGNAL":
        _contract(errs, f, st.get("signal"), st.get("payload_version"), contracts, f + ".signal")
        if "correlation" in st and not isinstance(st["correlation"], str):
            errs.add(f + ".correlation", "must be a string (a reference or a literal correlation key)")
    elif kind == "SUBWORKFLOW":
        if "definition_id" in st and (
            not isinstance(st["definition_id"], str) or not HEX32_RE.fullmatch(st["definition_id"])
        ):
            errs.add(f + ".definition_id", "must be a 32-char lowercase hex definition id")
        v = st.get("version")
        if "version" in st and (
            not isinstance(v, str) or not VERSION_RE.fullmatch(v) or v.lower() == "latest"
        ):
            errs.add(f + ".version", 'must be a pinned version (never "latest")')
        if "for_each" in st:
            _check_for_each(errs, f, st)
    elif kind == "TRIGGER":
        _check_trigger(errs, f, st)
    elif kind == "POLL":
        if "interval_ms" in st:
            _int_in(errs, f + ".interval_ms", st["interval_ms"], 10, 86_400_000)
        if "max_rounds" in st:
            _int_in(errs, f + ".max_rounds", st["max_rounds"], 1, 10_000)
        if "max_attempts_per_round" in st:
            _int_in(errs, f + ".max_attempts_per_round", st["max_attempts_per_round"], 1, 100)
        fs = st.get("final_signal")
        if fs is not None:
            if not isinstance(fs, dict):
                errs.add(f + ".final_signal", "must be an object")
            else:
                _fields(errs, f + ".final_signal.", fs, {"signal", "payload_version"})
                _contract(
                    errs, f, fs.get("signal"), fs.get("payload_version"), contracts, f + ".final_signal"
                )


def _check_for_each(errs: _Errors, f: str, st: dict) -> None:
    """A fan-out: ``{items, max_items?, max_parallel?, tolerance?}`` (docs/reference.md, "Fan-out")."""
    fe = st["for_each"]
    g = f + ".for_each"
    if not isinstance(fe, dict):
        errs.add(g, "an object {items, max_items?, max_parallel?, tolerance?}")
        return
    _fields(errs, g + ".", fe, {"items", "max_items", "max_parallel", "tolerance"})
    _int_in(errs, g + ".max_items", fe.get("max_items", FANOUT_DEFAULT_ITEMS), 1, FANOUT_MAX_ITEMS)
    _int_in(
        errs, g + ".max_parallel", fe.get("max_parallel", FANOUT_DEFAULT_PARALLEL), 1, FANOUT_MAX_PARALLEL
    )
    if "tolerance" in fe:
        _int_in(errs, g + ".tolerance", fe["tolerance"], 0, FANOUT_MAX_ITEMS)
    items = fe.get("items")
    cap = fe.get("max_items", FANOUT_DEFAULT_ITEMS)
    if isinstance(cap, Decimal) and cap == cap.to_integral_value():
        cap = int(cap)
    if "items" not in fe:
        errs.add(
            g + ".items", "required: a reference to an array ($.input… or $.steps.KEY.output…) or an array"
        )
    elif isinstance(items, list):
        if _is_int(cap) and len(items) > cap:
            errs.add(
                g + ".items",
                f"FANOUT_TOO_LARGE: the array has {len(items)} elements, more than max_items ({cap})",
            )
    elif not isinstance(items, str) or not items.startswith("$."):
        errs.add(g + ".items", "a reference to an array ($.input… or $.steps.KEY.output…) or an array")
    for name in ("compensation", "dispatch"):
        if name in st:
            errs.add(f"{f}.{name}", "not supported on a fan-out step (for_each)")


def _check_dispatch(errs: _Errors, f: str, d: Any) -> None:
    """A TASK's external dispatch target: ``{"url", "headers"?, "timeout_seconds"?}``."""
    if not isinstance(d, dict):
        errs.add(f, "an object {url, headers?, timeout_seconds?}")
        return
    _fields(errs, f + ".", d, {"url", "headers", "timeout_seconds"})
    if "url" not in d:
        errs.add(f + ".url", "required")
    _check_outbound(errs, f, d)


def _check_trigger(errs: _Errors, f: str, st: dict) -> None:
    if "method" in st and st["method"] not in TRIGGER_METHODS:
        errs.add(f + ".method", f"one of {', '.join(TRIGGER_METHODS)}")
    _check_outbound(errs, f, st)


def _check_outbound(errs: _Errors, f: str, st: dict) -> None:
    """url, headers and timeout_seconds of an outbound call (a TRIGGER step or a TASK's dispatch). A
    URL the destination policy refuses without a DNS lookup (a literal loopback / private / metadata
    address in any numeric spelling, ``localhost``; ``app.ledger.destinations.check_static``) is
    refused at publish; every URL is resolved and checked again at delivery."""
    if "url" in st and (msg := url_error(st["url"])):
        errs.add(f + ".url", msg)
    elif "url" in st:
        try:
            destinations.check_static(st["url"])  # names are resolved and checked again at delivery
        except destinations.DestinationForbidden as exc:
            errs.add(f + ".url", str(exc))
    if "timeout_seconds" in st:
        _int_in(errs, f + ".timeout_seconds", st["timeout_seconds"], 1, MAX_TRIGGER_TIMEOUT_SECONDS)
    headers = st.get("headers", {})
    if not isinstance(headers, dict) or len(headers) > MAX_TRIGGER_HEADERS:
        errs.add(f + ".headers", f"an object of at most {MAX_TRIGGER_HEADERS} string headers")
        return
    for name, value in headers.items():
        if not HEADER_NAME_RE.match(name) or name.lower() in RESERVED_HEADERS:
            errs.add(
                f"{f}.headers.{name}", "a header name (letters, digits, -) the engine does not set itself"
            )
        elif (
            not isinstance(value, str)
            or len(value) > 1024
            or any(ord(c) < 32 or ord(c) == 127 for c in value)
        ):
            errs.add(f"{f}.headers.{name}", "a string of at most 1024 printable characters")


def _contract(errs: _Errors, f: str, name: Any, pv: Any, contracts: set[tuple[str, str]], field: str) -> None:
    if not isinstance(name, str) or not isinstance(pv, str):
        if name is not None or pv is not None:
            errs.add(field, "signal and payload_version must be strings")
        return
    if (name, pv) not in contracts:
        errs.add(field, f"no signal contract ({name}, {pv}) is declared in signals")
