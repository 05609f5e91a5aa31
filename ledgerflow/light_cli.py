"""The ``ledgerflow`` command of the SDK distribution (``pip install ./sdk``): what a workflow author or a
namespace operator runs from any machine, through the HTTP API at ``LEDGERFLOW_URL`` with the token in
``LEDGERFLOW_TOKEN``, with the standard library and the SDK's client only (no server module, no server
library: the import contract "sdk-light" keeps it so).

Commands: ``credentials create|list|revoke``, ``definitions publish|list``, ``workflows
start|watch|show|list|pause|resume|cancel|signal``, ``tasks show|claim|complete|fail|release``,
``schedules list|show|fires|create|pause|resume|launch|delete``, ``subscriptions
list|show|create|enable|disable|delete|deliveries``. The commands that must reach the server's database
(``db``, ``dev``, ``worker``, ``jobs`` ...) are in the server's distribution only and say so.

The server's ``ledgerflow`` command (``ledgerflow.cli``) uses the helpers below for its API commands
(``definitions``, ``workflows start`` / ``watch``), so both publish, pick the newest version and watch
alike. Errors are one line, ``Error: ...``, exit status 2 for a bad argument and 1 otherwise."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from ledgerflow import step_table
from ledgerflow.client import Client, WorkflowInstance
from ledgerflow.sdk_types import ABSENT, ApiError, ClientError, NotFound, _seg

BAD_INPUT = 2  # the command line is wrong: fix it and run it again
FAILED = 1  # anything else
FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")

# The permission switches of `ledgerflow credentials create` (the server expands each into its scopes,
# ``app.auth.SWITCHES``; a unit test keeps the two lists equal).
SWITCHES = (
    "workflow_access",
    "workflow_run_access",
    "workflow_control_access",
    "workflow_signal_access",
    "workflow_recovery_access",
    "workflow_audit_access",
    "engine_monitor",
    "engine_operate",
    "task_worker",
    "integration_access",
    "credential_access",
)

# What the server's distribution has and this command has not: each needs the server's database,
# processes or files.
SERVER_ONLY = {
    "db": "applies migrations to the server's database",
    "dev": "runs the server's processes with their database",
    "worker": "runs a ledger worker pool on the server's database",
    "scheduler": "runs the scheduler on the server's database",
    "drain": "runs the drain on the server's database",
    "enqueue": "writes a ledger job into the server's database",
    "env": "runs a command with the server's DATABASE_URL / REDIS_URL",
    "services-stop": "stops the embedded PostgreSQL and Redis of a checkout",
    "doctor": "checks the server's database, Redis and settings",
    "jobs": "operates the job ledger (the operator API's jobs routes or the server's command)",
}


class CommandError(Exception):
    """A refused or failed command: printed as one line ``Error: <message>``, exit status ``exit_code``."""

    def __init__(self, message: str, exit_code: int = FAILED) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


# ----------------------------------------------------------------------------------------- shared helpers
def prog() -> str:
    """How the user ran the command, for the next command a message suggests: ``.venv/bin/ledgerflow``
    when typed so (the repository's venv is not on PATH), else ``ledgerflow``."""
    argv0 = sys.argv[0] if sys.argv else ""
    if os.path.basename(argv0) == "ledgerflow" and os.sep in argv0:
        try:
            rel = os.path.relpath(argv0)
        except ValueError:
            return argv0
        return (
            rel
            if rel.startswith("..") or os.path.isabs(rel)
            else f"{'' if rel.startswith('.') else './'}{rel}"
        )
    return "ledgerflow"


def exit_code_for(code: str) -> int:
    """The exit status of an API error code: 2 for an invalid argument, 1 for the others."""
    return BAD_INPUT if code == "INVALID_ARGUMENT" else FAILED


def describe(exc: Any) -> str:
    """One line of an API error (the SDK's ``ApiError`` or the server's ``app.errors``): its message,
    and the field errors it does not already say."""
    message = str(getattr(exc, "message", "") or exc)
    if hasattr(exc, "field_errors"):  # app.errors
        pairs = [(e.field, e.message) for e in exc.field_errors]
    else:  # the SDK's ApiError: the problem's ``errors``
        pairs = [
            (e.get("field"), e.get("message"))
            for e in getattr(exc, "errors", []) or []
            if isinstance(e, dict)
        ]
    fields = [f"{field}: {msg}" for field, msg in pairs]
    if not fields:
        return message
    if message in fields or message == "; ".join(fields[:5]) or any(message == msg for _, msg in pairs):
        return "; ".join(fields)  # the message only said the fields' messages: say them once
    return f"{message} ({'; '.join(fields)})"


def json_arg(raw: str, option: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise CommandError(f"{option} is not JSON ({exc})", BAD_INPUT) from None


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(raw: str) -> int:
    """``3600``, ``90m``, ``12h``, ``30d`` -> seconds (``--expires-in``)."""
    value = raw.strip().lower()
    unit = _UNITS.get(value[-1:], None)
    number = value[:-1] if unit is not None else value
    if not number.isdigit() or len(number) > 9:
        raise CommandError("--expires-in: a whole number of seconds, or with s / m / h / d", BAD_INPUT)
    return int(number) * (unit or 1)


def versions_newest_first(definition: dict[str, Any]) -> list[str]:
    """A definition's published versions, the newest (the last published) first. The API lists them
    in the order they were published; a version's name says nothing about its age (``v10`` < ``v2``)."""
    versions = list(enumerate(definition.get("versions") or []))
    versions.sort(key=lambda iv: (str(iv[1].get("created_at") or ""), iv[0]), reverse=True)
    return [str(v["version"]) for _, v in versions]


def read_document(file: Path) -> dict[str, Any]:
    """The definition document in ``file`` (JSON with a "version")."""
    try:
        document = json.loads(file.read_text())
    except OSError as exc:
        raise CommandError(f"cannot read {file}: {exc.strerror}", BAD_INPUT) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CommandError(f"{file} is not a JSON document ({exc})", BAD_INPUT) from None
    if not isinstance(document, dict) or not isinstance(document.get("version"), str):
        raise CommandError(f'{file}: a definition document is a JSON object with a "version"', BAD_INPUT)
    return document


def example_input(document: dict[str, Any]) -> str:
    """A JSON input naming the required top-level fields of the input schema (placeholders)."""
    schema = document.get("input_schema")
    if not isinstance(schema, dict):
        schema = {}
    required = [f for f in schema.get("required", []) if isinstance(f, str)][:5]
    props = schema.get("properties", {}) if isinstance(schema.get("properties"), dict) else {}
    example = {}
    for f in required:
        spec = props.get(f)
        kind = spec.get("type", "") if isinstance(spec, dict) else ""
        example[f] = {"integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}.get(kind, "...")
    return json.dumps(example)


PYTHON_SOURCE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def python_document(source: str) -> tuple[dict[str, Any], str]:
    """The document and name of the workflow written in Python at MODULE:ATTRIBUTE
    (``ledgerflow.workflow.Workflow``, imported from the current directory); its declaration errors are
    one line."""
    import importlib

    module_name, _, attr = source.partition(":")
    sys.path.insert(0, str(Path.cwd()))
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise CommandError(f"cannot load {source}: {exc}", BAD_INPUT) from None
    except ValueError as exc:  # ledgerflow.workflow.WorkflowError: a declaration the server would refuse
        raise CommandError(f"{source}: {exc}", BAD_INPUT) from None
    finally:
        sys.path.remove(str(Path.cwd()))
    if not callable(getattr(obj, "document", None)) or not isinstance(getattr(obj, "name", None), str):
        raise CommandError(f"{source} is not a workflow (ledgerflow.workflow.Workflow)", BAD_INPUT)
    try:
        document = obj.document()
    except ValueError as exc:
        raise CommandError(f"{source}: {exc}", BAD_INPUT) from None
    return document, obj.name


def source_document(source: str | Path) -> tuple[dict[str, Any], str]:
    """``definitions publish``'s SOURCE: a JSON file, or MODULE:ATTRIBUTE (a workflow written in Python);
    its document and the definition's default name (the file's stem, or the workflow's name)."""
    file = Path(source)
    if not file.exists() and PYTHON_SOURCE.fullmatch(str(source)):
        return python_document(str(source))
    return read_document(file), file.stem


def publish(client: Client, source: str | Path, name: str | None, description: str | None) -> list[str]:
    """``definitions publish``: publish SOURCE's document (a JSON file or MODULE:ATTRIBUTE) as a version of
    NAME (created if needed); the lines to print (what happened, and how to start one)."""
    document, default_name = source_document(source)
    name = name or default_name
    before = client.find_definition(name)
    existed = before is not None and document["version"] in {v["version"] for v in before["versions"]}
    d = client.ensure_definition(name, document, description=description)
    what = "already published (the same document)" if existed else "published"
    newest = versions_newest_first(d)
    pinned = "" if newest[:1] == [document["version"]] else f" --version {document['version']}"
    return [
        f"definition {name} ({d['id']}): version {document['version']} {what}",
        f"start one: {prog()} workflows start {name}{pinned} --input '{example_input(document)}'",
    ]


def definition_lines(client: Client) -> list[str]:
    """``definitions list``: the namespace's definitions, newest first, each with its versions."""
    page = client.list_definitions(limit=100)
    lines = []
    for d in page.items:
        versions = versions_newest_first(d)
        shown = ", ".join([f"{versions[0]} (newest)", *versions[1:]]) if versions else "(no version yet)"
        lines.append(f"{d['name']}  {d['id']}  versions: {shown}")
    return lines or [f"no definitions yet: {prog()} definitions publish FILE"]


def resolve_definition(client: Client, definition: str) -> dict[str, Any]:
    """A definition by name, or by id (32 hex)."""
    if re.fullmatch(r"[0-9a-f]{32}", definition):
        try:
            found: dict[str, Any] = client.get_definition(definition)
            return found
        except NotFound:
            pass
    named = client.find_definition(definition)
    if named is None:
        raise CommandError(
            f"no definition named {definition!r} in this namespace: publish one first "
            f"({prog()} definitions publish FILE)"
        )
    return named


def start(
    client: Client, definition: str, version: str | None, value: Any, business_key: str | None
) -> tuple[str, str]:
    """``workflows start``: (the new workflow's id, the line saying so); the version defaults to the
    newest published one."""
    d = resolve_definition(client, definition)
    versions = versions_newest_first(d)
    if not versions:
        raise CommandError(
            f"definition {d['name']!r} has no published version yet ({prog()} definitions publish FILE)"
        )
    chosen = version or versions[0]
    started = client.start_workflow(d["id"], chosen, value, business_key=business_key)
    wid = started.instance.id
    return wid, f"started workflow {wid} ({d['name']} {chosen}): {started.instance.state}"


def step_views(
    client: Client, workflow_id: str, cache: dict[str, tuple[str, dict[str, Any]]]
) -> tuple[str, list[dict[str, Any]]]:
    """(revision, one step view per step); a step's view is read again only when its revision moved."""
    data = client.request("GET", f"/v1/workflows/{_seg(workflow_id)}/steps")["data"]
    views = []
    for s in data["steps"]:
        seen = cache.get(s["key"])
        if seen is None or seen[0] != s["revision"]:
            view = client.request("GET", f"/v1/workflows/{_seg(workflow_id)}/steps/{_seg(s['key'])}")["data"]
            cache[s["key"]] = seen = (s["revision"], view)
        views.append(seen[1])
    return str(data["revision"]), views


def watch(
    client: Client,
    workflow_id: str,
    timeout: float,
    show: Callable[[WorkflowInstance, str, list[dict[str, Any]]], None],
) -> tuple[WorkflowInstance, list[dict[str, Any]]]:
    """Poll the workflow until it finishes, calling ``show(instance, revision, step views)`` each time;
    returns the finished instance and its step views."""
    cache: dict[str, tuple[str, dict[str, Any]]] = {}
    deadline = time.monotonic() + timeout
    while True:
        inst = client.get_workflow(workflow_id)
        revision, views = step_views(client, workflow_id, cache)
        show(inst, revision, views)
        if inst.state in FINISHED:
            return inst, views
        if time.monotonic() > deadline:
            raise CommandError(
                f"workflow {workflow_id} is still {inst.state} after {timeout:g} s; "
                "is a task worker running for its queues?"
            )
        time.sleep(0.5)


def outcome_line(inst: WorkflowInstance) -> str:
    """The last line of a watch: the state and the output (or how it stopped)."""
    if inst.output is not ABSENT:
        return f"{inst.state}: output {json.dumps(inst.output, default=str)}"
    return f"{inst.state}" + (f" ({inst.stop_kind})" if inst.stop_kind else "")


def state_title(inst: WorkflowInstance, revision: str | None = None) -> str:
    title = f"workflow {inst.id}: {inst.state}{' (paused)' if inst.paused else ''}"
    return title + (f", revision {revision}" if revision is not None else "")


# ----------------------------------------------------------------------------------------- the commands
def _client(args: argparse.Namespace) -> Client:
    return Client(getattr(args, "url", None), args.token)


def _out(data: Any) -> None:
    print(json.dumps(data, indent=2, default=str, ensure_ascii=False))


def _confirm(question: str, yes: bool) -> None:
    if yes:
        return
    print(f"{question} [y/N]: ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline().strip().lower()
    if answer not in ("y", "yes"):
        raise CommandError("Aborted (--yes skips the question).")


def _print_watch(client: Client, workflow_id: str, timeout: float) -> None:
    last: list[str | None] = [None]

    def show(inst: WorkflowInstance, revision: str, views: list[dict[str, Any]]) -> None:
        line = ", ".join(f"{r[0]}={r[2]}" for r in step_table.rows(views))
        if line != last[0]:
            print(f"revision {revision}: {line}", flush=True)
            last[0] = line

    inst, views = watch(client, workflow_id, timeout, show)
    print(step_table.text_table(state_title(inst), views))
    print(outcome_line(inst))
    if inst.state != "SUCCEEDED":
        raise SystemExit(FAILED)


def cmd_credentials_create(args: argparse.Namespace) -> None:
    switches = [s for s in SWITCHES if getattr(args, s)]
    expires = None if args.expires_in is None else parse_duration(args.expires_in)
    issued = _client(args).issue_credential(
        args.name,
        switches=switches,
        scopes=args.scopes,
        queues=args.queues or None,
        platform=args.platform,
        expires_in_seconds=expires,
        namespace=args.namespace,
    )
    c = issued["credential"]
    if args.token_only:
        print(issued["token"])
    elif args.json:
        _out({"token": issued["token"], **c})
    else:
        print(f"credential {c['id']} ({c['name']}) in namespace {c['namespace']}")
        print(f"scopes: {', '.join(c['scopes'])}" + ("  [PLATFORM-WIDE operator]" if c["platform"] else ""))
        if c["expires_at"]:
            print(f"expires: {c['expires_at']}")
        if c["queues"]:
            print(f"queues: {', '.join(c['queues'])}")
        print("token (shown once, store it now):")
        print(issued["token"])


def cmd_credentials_list(args: argparse.Namespace) -> None:
    page = _client(args).list_credentials(limit=args.limit, cursor=args.cursor)
    if args.json:
        _out({"items": page.items, "next_cursor": page.next_cursor})
        return
    for r in page.items:
        state = f"revoked {r['revoked_at']}" if r["revoked_at"] else "live"
        queues = f" queues={','.join(r['queues'])}" if r["queues"] else ""
        print(
            f"{r['id']}  {r['namespace']}/{r['name']}  {r['token_prefix']}…  {state}  {','.join(r['scopes'])}"
            f"{queues}{'  PLATFORM-WIDE' if r['platform'] else ''}"
            + (f"  expires {r['expires_at']}" if r["expires_at"] else "")
        )
    if page.next_cursor:
        print(f"more: --cursor {page.next_cursor}")


def cmd_credentials_revoke(args: argparse.Namespace) -> None:
    c = _client(args).revoke_credential(args.credential_id, reason=args.reason)
    print(f"revoked {c['id']} ({c['name']}) at {c['revoked_at']}")


def cmd_definitions_publish(args: argparse.Namespace) -> None:
    print("\n".join(publish(_client(args), args.source, args.name, args.description)))


def cmd_definitions_list(args: argparse.Namespace) -> None:
    print("\n".join(definition_lines(_client(args))))


def cmd_workflows_start(args: argparse.Namespace) -> None:
    value = json_arg(args.input, "--input")
    client = _client(args)
    wid, line = start(client, args.definition, args.version, value, args.business_key)
    print(line, flush=True)
    if args.watch:
        _print_watch(client, wid, 600)
    else:
        print(f"watch it: {prog()} workflows watch {wid}")


def cmd_workflows_watch(args: argparse.Namespace) -> None:
    _print_watch(_client(args), args.workflow_id, args.timeout)


def cmd_workflows_show(args: argparse.Namespace) -> None:
    client = _client(args)
    inst = client.request("GET", f"/v1/workflows/{_seg(args.workflow_id)}")["data"]
    _, views = step_views(client, args.workflow_id, {})
    if args.json:
        _out({"instance": inst, "step_details": views})
        return
    for k, v in inst.items():
        shown = json.dumps(v, default=str) if isinstance(v, dict | list) else v
        print(f"{k}: {shown}")
    print(step_table.text_table(f"{len(views)} step(s)", views))


def cmd_workflows_list(args: argparse.Namespace) -> None:
    filters = {
        "state": args.state,
        "paused": args.paused,
        "definition_id": args.definition_id,
        "business_key": args.business_key,
        "business_key_prefix": args.business_key_prefix,
    }
    params = {k: v for k, v in filters.items() if v is not None} | {"limit": str(args.limit)}
    if args.cursor:
        params["cursor"] = args.cursor
    data = _client(args).request("GET", "/v1/workflows", params=params)["data"]
    if args.json:
        _out(data)
        return
    for i in data["items"]:
        paused = " (paused)" if i.get("paused") else ""
        print(
            f"{i['id']}  {i['state']}{paused}  {i['version']}  {i.get('business_key') or '-'}  {i['created_at']}"
        )
    if not data["items"]:
        print("no workflows")
    if data.get("next_cursor"):
        print(f"more: --cursor {data['next_cursor']}")


def cmd_workflows_control(args: argparse.Namespace) -> None:
    client = _client(args)
    current = client.get_workflow(args.workflow_id)
    revision = args.expected_control_revision or current.control_revision
    _confirm(
        f"{args.operation} workflow {args.workflow_id} ({current.state}, control revision {revision})?",
        args.yes,
    )
    result = client.control_workflow(args.workflow_id, args.operation, revision, args.reason)
    inst = result.instance
    if args.json:
        _out(client.request("GET", f"/v1/workflows/{_seg(inst.id)}")["data"])
    else:
        paused = " (paused)" if inst.paused else ""
        print(f"workflow {inst.id}: {inst.state}{paused}, control revision {inst.control_revision}")


def cmd_workflows_signal(args: argparse.Namespace) -> None:
    payload = json_arg(args.payload, "--payload")
    client = _client(args)
    target = f"{args.step}#{args.activation}"
    _confirm(f"Send signal {args.name} to {target} of {args.workflow_id}?", args.yes)
    result = client.send_workflow_signal(
        args.workflow_id,
        name=args.name,
        payload_version=args.payload_version,
        target_step_key=args.step,
        target_activation_sequence=args.activation,
        correlation_key=args.correlation_key,
        payload=payload,
        reason=args.reason,
        evidence_ref=args.evidence_ref,
    )
    s = result.signal
    if args.json:
        _out({"signal": s.__dict__})
    else:
        print(f"signal {s.id}: {s.state}" + (f" ({s.disposition})" if s.disposition else ""))


def _api(
    method: str, path: str, body: Callable[[argparse.Namespace], dict[str, Any]] | None = None
) -> Callable[[argparse.Namespace], None]:
    """A command that is one API call to ``path`` (``{name}``: the argument ``name``), printing its
    ``data`` as JSON."""

    def run(args: argparse.Namespace) -> None:
        sent = ABSENT if body is None else body(args)
        params = {"limit": str(args.limit)} if getattr(args, "limit", None) else None
        where = path.format(**{k: _seg(v) for k, v in vars(args).items() if isinstance(v, str)})
        _out(_client(args).request(method, where, body=sent, params=params)["data"])

    return run


def cmd_tasks_claim(args: argparse.Namespace) -> None:
    tasks = _client(args).claim_tasks(args.queues, wait_seconds=args.wait, max_tasks=args.max)
    _out([t.__dict__ for t in tasks])


def cmd_schedules_create(args: argparse.Namespace) -> None:
    d = resolve_definition(_client(args), args.definition)
    version = args.version or (versions_newest_first(d) or [""])[0]
    body = {
        "name": args.name,
        "definition_id": d["id"],
        "version": version,
        "input": json_arg(args.input, "--input"),
        "paused": args.paused,
    }
    for k in ("cron", "timezone", "interval_seconds", "overlap", "fire_time_field"):
        if getattr(args, k) is not None:
            body[k] = getattr(args, k)
    _out(_client(args).request("POST", "/v1/schedules", body=body)["data"])


def cmd_schedules_delete(args: argparse.Namespace) -> None:
    _confirm(f"delete schedule {args.schedule_id}?", args.yes)
    _out(_client(args).request("DELETE", f"/v1/schedules/{_seg(args.schedule_id)}")["data"])


def cmd_subscriptions_create(args: argparse.Namespace) -> None:
    _out(
        _client(args).create_subscription(
            args.webhook_url, args.event_types, definition_id=args.definition_id, description=args.description
        )
    )


def cmd_subscriptions_delete(args: argparse.Namespace) -> None:
    _confirm(f"delete subscription {args.subscription_id}?", args.yes)
    _out(_client(args).delete_subscription(args.subscription_id))


def _server_only(name: str) -> Callable[[argparse.Namespace], None]:
    def run(args: argparse.Namespace) -> None:
        raise CommandError(
            f"`ledgerflow {name}` {SERVER_ONLY[name]}: it is part of the server's distribution, not of "
            "the SDK (ledgerflow-sdk); run it where the server is installed (`pip install ledgerflow`, "
            "or `make install` in a checkout)",
            BAD_INPUT,
        )

    return run


# ----------------------------------------------------------------------------------------- the parser
class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"Error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(BAD_INPUT)


def _api_parent(url: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    if url:
        p.add_argument("--url", default=None, help="the server (or $LEDGERFLOW_URL; default :5000)")
    # unset: the client reads $LEDGERFLOW_TOKEN (as it reads $LEDGERFLOW_URL)
    p.add_argument("--token", default=None, help="credential token (or $LEDGERFLOW_TOKEN)")
    return p


def build_parser() -> argparse.ArgumentParser:
    api = _api_parent()
    as_json = argparse.ArgumentParser(add_help=False)
    as_json.add_argument("--json", action="store_true", help="print JSON (for scripts)")
    yes = argparse.ArgumentParser(add_help=False)
    yes.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    paged = argparse.ArgumentParser(add_help=False)
    paged.add_argument("--limit", type=_limit, default=20, metavar="1-100")
    paged.add_argument("--cursor")

    parser = _Parser(
        prog="ledgerflow",
        description="Ledgerflow from any machine, through the API (LEDGERFLOW_URL, LEDGERFLOW_TOKEN).",
    )
    groups = parser.add_subparsers(dest="group", metavar="COMMAND", parser_class=_Parser, required=True)

    def group(name: str, help_text: str) -> Any:
        g = groups.add_parser(name, help=help_text, description=help_text)
        return g.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser, required=True)

    def command(
        sub: Any, name: str, fn: Callable[[argparse.Namespace], None], help_text: str, *parents: Any
    ) -> Any:
        p = sub.add_parser(name, help=help_text, description=help_text, parents=[api, *parents])
        p.set_defaults(func=fn)
        return p

    # credentials
    sub = group(
        "credentials", "Issue, list and revoke this namespace's credentials (needs --credential-access)."
    )
    p = command(
        sub, "create", cmd_credentials_create, "Issue a credential with at most your own rights.", as_json
    )
    p.add_argument("--name", required=True, help="unique among the namespace's live credentials")
    p.add_argument("--namespace", help="your credential's namespace (the only one it issues in)")
    for s in SWITCHES:
        p.add_argument(f"--{s.replace('_', '-')}", dest=s, action="store_true")
    p.add_argument("--scope", dest="scopes", action="append", default=[], metavar="SCOPE")
    p.add_argument("--queue", dest="queues", action="append", default=[], metavar="QUEUE")
    p.add_argument("--platform", action="store_true")
    p.add_argument("--expires-in", metavar="DURATION", help="e.g. 3600, 90m, 12h, 30d")
    p.add_argument("--token-only", action="store_true", help="print only the token")
    command(sub, "list", cmd_credentials_list, "The namespace's credentials (never a token).", as_json, paged)
    p = command(sub, "revoke", cmd_credentials_revoke, "Revoke a credential by id (audited).")
    p.add_argument("credential_id")
    p.add_argument("--reason")

    # definitions
    sub = group("definitions", "Workflow definitions: publish a document file, list them.")
    p = command(
        sub,
        "publish",
        cmd_definitions_publish,
        "Publish the definition document in SOURCE: a JSON file, or MODULE:ATTRIBUTE (a workflow written "
        "in Python, ledgerflow.workflow).",
    )
    p.add_argument("source", metavar="SOURCE")
    p.add_argument(
        "--name", help="the definition's name (default: the file name without .json, or the workflow's name)"
    )
    p.add_argument("--description")
    command(sub, "list", cmd_definitions_list, "The namespace's definitions and their versions.")

    # workflows
    sub = group("workflows", "Workflow instances: start, watch, show, list, pause / resume / cancel, signal.")
    p = command(sub, "start", cmd_workflows_start, "Start a workflow of DEFINITION (a name or an id).")
    p.add_argument("definition", metavar="DEFINITION")
    p.add_argument("--version", help="a published version (default: the newest)")
    p.add_argument("--input", default="{}", help="the workflow's input, JSON")
    p.add_argument("--business-key")
    p.add_argument("--watch", action="store_true", help="then watch it until it finishes")
    p = command(sub, "watch", cmd_workflows_watch, "The workflow's steps until it finishes.")
    p.add_argument("workflow_id")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds")
    p = command(sub, "show", cmd_workflows_show, "One workflow and its steps.", as_json)
    p.add_argument("workflow_id")
    p = command(sub, "list", cmd_workflows_list, "The namespace's workflows, newest first.", as_json, paged)
    p.add_argument("--state")
    p.add_argument("--paused", choices=["true", "false"])
    p.add_argument("--definition-id")
    p.add_argument("--business-key")
    p.add_argument("--business-key-prefix")
    for op, help_text in (
        ("PAUSE", "Pause a workflow (W-CTL PAUSE)."),
        ("RESUME", "Resume a paused workflow (W-CTL RESUME)."),
        ("CANCEL", "Cancel a workflow (W-CTL CANCEL; compensations run)."),
    ):
        p = command(sub, op.lower(), cmd_workflows_control, help_text, as_json, yes)
        p.add_argument("workflow_id")
        p.add_argument("--reason", required=True, help="why (written to the audit)")
        p.add_argument("--expected-control-revision", type=int)
        p.set_defaults(operation=op)
    p = command(sub, "signal", cmd_workflows_signal, "Send a signal to a step's activation.", as_json, yes)
    p.add_argument("workflow_id")
    p.add_argument("--name", required=True)
    p.add_argument("--payload-version", required=True)
    p.add_argument("--step", required=True, help="target step key")
    p.add_argument("--activation", type=int, required=True, help="target activation sequence")
    p.add_argument("--correlation-key", required=True)
    p.add_argument("--payload", default="null", help="JSON payload")
    p.add_argument("--reason", required=True)
    p.add_argument("--evidence-ref")

    # tasks
    sub = group("tasks", "Tasks: show one, claim, complete, fail or release (a person doing a human task).")
    p = command(sub, "show", _api("GET", "/v1/tasks/{task_id}"), "One task.")
    p.add_argument("task_id")
    p = command(sub, "claim", cmd_tasks_claim, "Claim tasks of QUEUE (tasks:work).")
    p.add_argument("--queue", dest="queues", action="append", required=True)
    p.add_argument("--wait", type=int, default=0, help="long-poll seconds")
    p.add_argument("--max", type=int, default=1)
    for verb in ("complete", "fail", "release"):
        p = command(
            sub,
            verb,
            _api("POST", f"/v1/tasks/{{task_id}}/{verb}", _task_body(verb)),
            f"{verb.capitalize()} a claimed task (its epoch from the claim).",
        )
        p.add_argument("task_id")
        p.add_argument("--epoch", type=int, required=True)
        if verb == "complete":
            p.add_argument("--output", default="null", help="JSON")
        if verb == "fail":
            p.add_argument("--message", required=True)
            p.add_argument("--retryable", action="store_true")

    # schedules
    sub = group("schedules", "Schedules: list, show, fires, create, pause / resume, launch (now), delete.")
    p = command(sub, "list", _api("GET", "/v1/schedules"), "The namespace's schedules.", paged)
    for name, path, help_text in (
        ("show", "", "One schedule."),
        ("fires", "/fires", "Its latest fires."),
    ):
        p = command(sub, name, _api("GET", f"/v1/schedules/{{schedule_id}}{path}"), help_text)
        p.add_argument("schedule_id")
    for name, help_text in (
        ("pause", "Pause a schedule."),
        ("resume", "Resume a schedule."),
        ("launch", "Launch one fire now."),
    ):
        p = command(
            sub,
            name,
            _api("POST", f"/v1/schedules/{{schedule_id}}/{name}", _empty),
            help_text,
        )
        p.add_argument("schedule_id")
    p = command(sub, "create", cmd_schedules_create, "Create a schedule of a definition's version.")
    p.add_argument("--name", required=True)
    p.add_argument("--definition", required=True, help="a name or an id")
    p.add_argument("--version", help="default: the newest")
    p.add_argument("--input", default="{}", help="JSON")
    p.add_argument("--cron")
    p.add_argument("--timezone")
    p.add_argument("--interval-seconds", type=int)
    p.add_argument("--overlap")
    p.add_argument("--fire-time-field")
    p.add_argument("--paused", action="store_true")
    p = command(sub, "delete", cmd_schedules_delete, "Delete a schedule.", yes)
    p.add_argument("schedule_id")

    # subscriptions
    sub = group("subscriptions", "Event subscriptions (signed webhooks); needs --integration-access.")
    base = "/v1/event-subscriptions"
    command(sub, "list", _api("GET", base), "The namespace's subscriptions.", paged)
    p = command(sub, "show", _api("GET", base + "/{subscription_id}"), "One subscription.")
    p.add_argument("subscription_id")
    p = command(
        sub,
        "deliveries",
        _api("GET", base + "/{subscription_id}/deliveries"),
        "Its deliveries.",
        paged,
    )
    p.add_argument("subscription_id")
    for verb in ("enable", "disable"):
        p = command(
            sub,
            verb,
            _api("POST", f"{base}/{{subscription_id}}/{verb}", _reason_body),
            f"{verb.capitalize()} a subscription.",
        )
        p.add_argument("subscription_id")
        p.add_argument("--reason")
    p = sub.add_parser(
        "create",
        help="Create a subscription; its signing secret is printed once.",
        parents=[_api_parent(url=False)],
    )
    p.set_defaults(func=cmd_subscriptions_create)
    p.add_argument(
        "--url", dest="webhook_url", required=True, help="the webhook URL (the server: $LEDGERFLOW_URL)"
    )
    p.add_argument("--event", dest="event_types", action="append", required=True)
    p.add_argument("--definition-id")
    p.add_argument("--description", default="")
    p = command(sub, "delete", cmd_subscriptions_delete, "Delete a subscription.", yes)
    p.add_argument("subscription_id")

    for name, why in SERVER_ONLY.items():
        p = groups.add_parser(name, help=f"server distribution only: {why}", add_help=False)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=_server_only(name))
    return parser


def _limit(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise argparse.ArgumentTypeError(f"{raw!r} is not an integer from 1 to 100")
    return int(raw)


def _empty(args: argparse.Namespace) -> dict[str, Any]:
    return {}


def _reason_body(args: argparse.Namespace) -> dict[str, Any]:
    return {} if args.reason is None else {"reason": args.reason}


def _task_body(verb: str) -> Callable[[argparse.Namespace], dict[str, Any]]:
    def body(args: argparse.Namespace) -> dict[str, Any]:
        out: dict[str, Any] = {"epoch": args.epoch}
        if verb == "complete":
            out["output"] = json_arg(args.output, "--output")
        if verb == "fail":
            out["error"] = {"message": args.message, "retryable": args.retryable}
        return out

    return body


def main(argv: Sequence[str] | None = None) -> None:
    """The entry point of the SDK's ``ledgerflow`` command."""
    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except CommandError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except ApiError as exc:
        print(f"Error: {describe(exc)}", file=sys.stderr)
        raise SystemExit(exit_code_for(exc.code)) from None
    except ClientError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        raise SystemExit(FAILED) from None
    except KeyboardInterrupt:
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
