"""The first workflow from the shell, without writing Python: ``ledgerflow definitions publish FILE``,
``ledgerflow workflows start DEFINITION``, ``ledgerflow workflows watch ID`` (a live step table).

These go through the HTTP API at ``LEDGERFLOW_URL`` (default http://127.0.0.1:5000, what `make run`
serves) with the token in ``LEDGERFLOW_TOKEN``, exactly as the SDK does (``ledgerflow.client``): the
server checks, audits and counts them like any other client's calls. Errors are one line
(``Error: ...``), exit status 2 for a bad argument and 1 otherwise."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import click

from ledgerflow import light_cli, step_table
from ledgerflow.cli_common import prog


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
    for line in light_cli.publish(_client(url, token), source, name, description):
        click.echo(line)


@definitions.command("list")
@_api_options
def definitions_list(url: str | None, token: str | None) -> None:
    """The namespace's definitions, newest first, each with its versions (the newest first)."""
    for line in light_cli.definition_lines(_client(url, token)):
        click.echo(line)


# ----------------------------------------------------------------------------------------- workflows
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
        value = light_cli.json_arg(input_json, "--input")
        client = _client(url, token)
        wid, line = light_cli.start(client, definition, version, value, business_key)
        click.echo(line)
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


def rich_step_table(title: str, views: list[dict[str, Any]]) -> Any:
    """``step_table.rows`` of ``views`` as a rich Table (the server's command)."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in step_table.COLUMNS:
        t.add_column(c, overflow="fold", no_wrap=c in ("step", "kind", "state", "attempts", "took"))
    for r in step_table.rows(views):
        t.add_row(*r)
    return t


def _watch(client: Any, workflow_id: str, timeout: float) -> None:
    from rich.console import Console
    from rich.live import Live

    console = Console(highlight=False)
    live = Live(console=console, auto_refresh=False) if console.is_terminal else None
    last: list[str | None] = [None]

    def show(inst: Any, revision: str, views: list[dict[str, Any]]) -> None:
        if live is not None:
            live.update(rich_step_table(light_cli.state_title(inst, revision), views), refresh=True)
            return
        line = ", ".join(f"{r[0]}={r[2]}" for r in step_table.rows(views))
        if line != last[0]:
            click.echo(f"revision {revision}: {line}")
            last[0] = line

    with live if live is not None else contextlib.nullcontext():
        inst, views = light_cli.watch(client, workflow_id, timeout, show)
    if live is None:
        console.print(rich_step_table(f"workflow {workflow_id}: {inst.state}", views))
    click.echo(light_cli.outcome_line(inst))
    if inst.state != "SUCCEEDED":
        sys.exit(1)
