"""The tables of README.md and docs/reference.md that describe the code, rendered from the code: the
`ledgerflow` commands, the credential switches and options, the ledger's job types. tests/docs checks
that the documents contain exactly these tables, so they cannot drift from the code again; after a change,
``.venv/bin/python -m ledgerflow.doc_tables`` prints them to paste."""

from __future__ import annotations

import click

TABLES = ("commands", "credential_switches", "credential_options", "job_types")


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _short_help(cmd: click.Command) -> str:
    return _cell(cmd.get_short_help_str(limit=300)).rstrip(".")


def commands() -> str:
    """README's command table: every command (a group with its subcommands) and what it does."""
    from ledgerflow.cli import main

    rows = ["| command | what it does |", "|---|---|"]
    for name, cmd in main.commands.items():
        if isinstance(cmd, click.Group):
            sub = "\\|".join(cmd.commands)
            rows.append(f"| `ledgerflow {name} {sub}` | {_short_help(cmd)} |")
        else:
            rows.append(f"| `ledgerflow {' '.join([name, *_required(cmd)])}` | {_short_help(cmd)} |")
    return "\n".join(rows)


def _required(cmd: click.Command) -> list[str]:
    """The arguments and required options of ``cmd`` as its usage line names them."""
    out = []
    for p in cmd.params:
        if isinstance(p, click.Argument):
            out.append(p.human_readable_name)
        elif isinstance(p, click.Option) and p.required:
            value = "\\|".join(p.type.choices) if isinstance(p.type, click.Choice) else p.name.upper()
            out.append(f"{p.opts[0]} {value}")
    return out


def credential_switches() -> str:
    """The permission switches of `ledgerflow credentials create` and the scopes each grants."""
    from app.auth import SWITCHES
    from ledgerflow.credentials_cli import _HELP

    rows = ["| switch | permissions (scopes) |", "|---|---|"]
    rows += [f"| `--{name.replace('_', '-')}` | {_cell(_HELP[name])} |" for name in SWITCHES]
    return "\n".join(rows)


def credential_options() -> str:
    """The other options of `ledgerflow credentials create`."""
    from app.auth import SWITCHES
    from ledgerflow.credentials_cli import create

    switches = {f"--{n.replace('_', '-')}" for n in SWITCHES}
    rows = ["| option | what it does |", "|---|---|"]
    for p in create.params:
        if isinstance(p, click.Option) and p.opts[0] not in switches:
            value = "" if p.is_flag else f" {p.metavar or p.name.upper()}"
            rows.append(f"| `{p.opts[0]}{value}` | {_cell(p.help or '')} |")
    return "\n".join(rows)


def job_types() -> str:
    """The ledger's job types: pool, the module of the built-in handler, what each does."""
    from actors.handler_modules import BUILTIN_HANDLER_MODULES
    from app.ledger import handlers
    from app.ledger.states import POOL_OF_TYPE, JobType
    from ledgerflow.cli import JOB_TYPES

    handlers.load_modules(BUILTIN_HANDLER_MODULES)
    rows = ["| type | pool | built-in handler | what it does |", "|---|---|---|---|"]
    for t, purpose in JOB_TYPES.items():
        module = handlers.resolve(t).__module__
        rows.append(f"| `{t}` | {POOL_OF_TYPE[JobType(t)].value} | `{module}` | {_cell(purpose)} |")
    return "\n".join(rows)


def main() -> None:
    for name in TABLES:
        print(f"<!-- {name} -->\n{globals()[name]()}\n")


if __name__ == "__main__":
    main()
