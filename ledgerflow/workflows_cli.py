"""The first workflow from the shell, without writing Python: ``ledgerflow definitions publish FILE``,
``ledgerflow workflows start DEFINITION``, ``ledgerflow workflows watch ID`` (a live step table).

These go through the HTTP API at ``LEDGERFLOW_URL`` (default http://127.0.0.1:5000, what `make run`
serves) with the token in ``LEDGERFLOW_TOKEN``, exactly as the SDK does (``ledgerflow.client``): the
server checks, audits and counts them like any other client's calls. Errors are one line
(``Error: ...``), exit status 2 for a bad argument and 1 otherwise."""

from __future__ import annotations

import contextlib
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import click

from ledgerflow.cli_common import BAD_INPUT, Failure, prog
from ledgerflow.sdk_types import ABSENT, NotFound

FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")


def _client(url: str | None, token: str | None) -> Any:
    from ledgerflow.client import Client

    return Client(url, token)


def _api_options(fn: Any) -> Any:
    fn = click.option("--token", envvar="LEDGERFLOW_TOKEN", help="credential token (or $LEDGERFLOW_TOKEN)")(
        fn
    )
    return click.option(
        "--url", envvar="LEDGERFLOW_URL", help="the server (or $LEDGERFLOW_URL; default :5000)"
    )(fn)


def _json_value(raw: str, option: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise Failure(f"{option} is not JSON ({exc})", exit_code=BAD_INPUT) from None


# ----------------------------------------------------------------------------------------- definitions
@click.group("definitions")
def definitions() -> None:
    """Workflow definitions: publish a document file, list them (through the API, LEDGERFLOW_TOKEN)."""


@definitions.command("publish")
@click.argument("source")
@click.option(
    "--name", help="the definition's name (default: the file name without .json, or the workflow's name)"
)
@click.option("--description", help="the definition's description, when it is created")
@_api_options
def definitions_publish(
    source: str, name: str | None, description: str | None, url: str | None, token: str | None
) -> None:
    """Publish a definition document as a version of definition NAME, creating the definition first if
    needed. SOURCE is a JSON file (with its "version"; docs/reference.md shows a complete one) or
    MODULE:ATTRIBUTE, a workflow written in Python (``ledgerflow.workflow.Workflow``, imported from the
    current directory). Running it again with the same document does nothing; a changed document needs
    a new "version"."""
    file = Path(source)
    if not file.exists() and re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", source):
        document, default_name = _python_document(source)
    else:
        try:
            document = json.loads(file.read_text())
        except OSError as exc:
            raise Failure(f"cannot read {file}: {exc.strerror}", exit_code=BAD_INPUT) from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise Failure(f"{file} is not a JSON document ({exc})", exit_code=BAD_INPUT) from None
        default_name = file.stem
    if not isinstance(document, dict) or not isinstance(document.get("version"), str):
        raise Failure(
            f'{source}: a definition document is a JSON object with a "version"', exit_code=BAD_INPUT
        )
    name = name or default_name
    client = _client(url, token)
    before = client.find_definition(name)
    existed = before is not None and document["version"] in {v["version"] for v in before["versions"]}
    d = client.ensure_definition(name, document, description=description)
    what = "already published (the same document)" if existed else "published"
    click.echo(f"definition {name} ({d['id']}): version {document['version']} {what}")
    click.echo(f"start one: {prog()} workflows start {name} --input '{_example_input(document)}'")


def _python_document(source: str) -> tuple[Any, str]:
    """The document and name of the workflow at MODULE:ATTRIBUTE (its declaration errors are one line)."""
    import importlib

    module_name, _, attr = source.partition(":")
    sys.path.insert(0, str(Path.cwd()))
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise Failure(f"cannot load {source}: {exc}", exit_code=BAD_INPUT) from None
    except ValueError as exc:  # ledgerflow.workflow.WorkflowError: a declaration the server would refuse
        raise Failure(f"{source}: {exc}", exit_code=BAD_INPUT) from None
    finally:
        sys.path.remove(str(Path.cwd()))
    if not callable(getattr(obj, "document", None)) or not isinstance(getattr(obj, "name", None), str):
        raise Failure(f"{source} is not a workflow (ledgerflow.workflow.Workflow)", exit_code=BAD_INPUT)
    try:
        return obj.document(), obj.name
    except ValueError as exc:
        raise Failure(f"{source}: {exc}", exit_code=BAD_INPUT) from None


def _example_input(document: dict[str, Any]) -> str:
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


@definitions.command("list")
@_api_options
def definitions_list(url: str | None, token: str | None) -> None:
    """The namespace's definitions and their versions, newest first."""
    page = _client(url, token).list_definitions(limit=100)
    for d in page.items:
        versions = ", ".join(v["version"] for v in d.get("versions", [])) or "(no version yet)"
        click.echo(f"{d['name']}  {d['id']}  versions: {versions}")
    if not page.items:
        click.echo(f"no definitions yet: {prog()} definitions publish FILE")


# ----------------------------------------------------------------------------------------- workflows
def _resolve(client: Any, definition: str) -> dict[str, Any]:
    """A definition by name, or by id (32 hex)."""
    if re.fullmatch(r"[0-9a-f]{32}", definition):
        try:
            return client.get_definition(definition)
        except NotFound:
            pass
    found = client.find_definition(definition)
    if found is None:
        raise Failure(
            f"no definition named {definition!r} in this namespace: publish one first "
            f"({prog()} definitions publish FILE)"
        )
    return found


def start_command(workflows: click.Group) -> click.Command:
    @workflows.command("start")
    @click.argument("definition")
    @click.option("--version", help="a published version (default: the newest)")
    @click.option("--input", "input_json", default="{}", show_default=True, help="the workflow's input, JSON")
    @click.option("--business-key", help="your own key for this workflow (e.g. an order number)")
    @click.option("--watch", is_flag=True, help="then watch it until it finishes (as `workflows watch`)")
    @_api_options
    def workflows_start(
        definition: str,
        version: str | None,
        input_json: str,
        business_key: str | None,
        watch: bool,
        url: str | None,
        token: str | None,
    ) -> None:
        """Start a workflow of DEFINITION (a name or an id) through the API and print its id."""
        value = _json_value(input_json, "--input")
        client = _client(url, token)
        d = _resolve(client, definition)
        versions = [v["version"] for v in d.get("versions", [])]
        if not versions:
            raise Failure(
                f"definition {d['name']!r} has no published version yet (ledgerflow definitions publish)"
            )
        chosen = version or versions[0]
        started = client.start_workflow(d["id"], chosen, value, business_key=business_key)
        wid = started.instance.id
        click.echo(f"started workflow {wid} ({d['name']} {chosen}): {started.instance.state}")
        if watch:
            _watch(client, wid, timeout=600)
        else:
            click.echo(f"watch it: {prog()} workflows watch {wid}")

    return workflows_start


def watch_command(workflows: click.Group) -> click.Command:
    @workflows.command("watch")
    @click.argument("workflow_id")
    @click.option("--timeout", default=600.0, show_default=True, type=click.FloatRange(1), help="seconds")
    @_api_options
    def workflows_watch(workflow_id: str, timeout: float, url: str | None, token: str | None) -> None:
        """A live table of the workflow's steps until it finishes (exit status 0 when it SUCCEEDED, 1
        when it FAILED or was CANCELLED); each change is a new line when the output is not a terminal."""
        _watch(_client(url, token), workflow_id, timeout)

    return workflows_watch


def _views(client: Any, workflow_id: str, cache: dict[str, tuple[str, dict]]) -> tuple[str, list[dict]]:
    """(revision, one step view per step); a step's view is read again only when its revision moved."""
    from ledgerflow.sdk_types import _seg

    data = client.request("GET", f"/v1/workflows/{_seg(workflow_id)}/steps")["data"]
    views = []
    for s in data["steps"]:
        seen = cache.get(s["key"])
        if seen is None or seen[0] != s["revision"]:
            view = client.request("GET", f"/v1/workflows/{_seg(workflow_id)}/steps/{_seg(s['key'])}")["data"]
            cache[s["key"]] = seen = (s["revision"], view)
        views.append(seen[1])
    return data["revision"], views


def _watch(client: Any, workflow_id: str, timeout: float) -> None:
    from rich.console import Console
    from rich.live import Live

    from ledgerflow import step_table

    console = Console(highlight=False)
    cache: dict[str, tuple[str, dict]] = {}
    deadline = time.monotonic() + timeout
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    last = None
    with live if live is not None else contextlib.nullcontext():
        while True:
            inst = client.get_workflow(workflow_id)
            revision, views = _views(client, workflow_id, cache)
            title = f"workflow {workflow_id}: {inst.state}{' (paused)' if inst.paused else ''}, revision {revision}"
            if live is not None:
                live.update(step_table.table(title, views), refresh=True)
            else:
                line = ", ".join(f"{r[0]}={r[2]}" for r in step_table.rows(views))
                if line != last:
                    click.echo(f"revision {revision}: {line}")
                    last = line
            if inst.state in FINISHED:
                break
            if time.monotonic() > deadline:
                raise Failure(
                    f"workflow {workflow_id} is still {inst.state} after {timeout:g} s; "
                    "is a task worker running for its queues?"
                )
            time.sleep(0.5)
    if live is None:
        console.print(step_table.table(f"workflow {workflow_id}: {inst.state}", views))
    if inst.output is not ABSENT:
        click.echo(f"{inst.state}: output {json.dumps(inst.output, default=str)}")
    else:
        click.echo(f"{inst.state}" + (f" ({inst.stop_kind})" if inst.stop_kind else ""))
    if inst.state != "SUCCEEDED":
        sys.exit(1)
