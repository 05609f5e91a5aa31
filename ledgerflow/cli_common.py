"""What every ``ledgerflow`` command shares: one-line failures instead of tracebacks for the errors a
user can cause or fix (bad arguments, services not found, database unreachable). One format:
``Error: <what happened and what to do>`` on stderr; exit status 2 when the command line itself is
wrong (a usage error, an invalid argument, a missing token), 1 for anything else (not found, refused,
a conflict, a service that cannot be reached)."""

from __future__ import annotations

import re

import click

from app.settings import DATABASE_URL, SettingError
from ledgerflow.light_cli import BAD_INPUT, FAILED, CommandError, describe, exit_code_for, prog

__all__ = [
    "BAD_INPUT",
    "FAILED",
    "Failure",
    "describe",
    "exit_code_for",
    "expected_failure",
    "one_line",
    "prog",
]


class Failure(click.ClickException):
    """Printed as one line ``Error: <message>``; exit code 1 (environment) or 2 (bad input)."""

    def __init__(self, message: str, exit_code: int = FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def one_line(exc: click.ClickException) -> str:
    """``exc``'s message as one line; a usage error says where the command's help is."""
    message = " ".join(exc.format_message().split())
    ctx = getattr(exc, "ctx", None)
    if isinstance(exc, click.UsageError) and ctx is not None:
        message = message.rstrip(".") + f" (see `{ctx.command_path} --help`)"
    return message


def _redacted_database_url() -> str:
    url = DATABASE_URL.raw()
    try:
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url) if url else "DATABASE_URL"
    except Exception:  # an unparsable URL is shown as "DATABASE_URL"
        return "DATABASE_URL"


def expected_failure(exc: BaseException) -> Failure | None:
    """The one-line Failure for an expected error, or None for a bug (which keeps its traceback)."""
    from ledgerflow.devenv import ServicesUnavailable

    if isinstance(exc, ServicesUnavailable):
        return Failure(str(exc))
    if isinstance(exc, CommandError):  # the API commands shared with the SDK's command (ledgerflow.light_cli)
        return Failure(exc.message, exit_code=exc.exit_code)
    if isinstance(exc, SettingError):  # a variable's value is not allowed: bad input, named
        return Failure(str(exc), exit_code=2)
    module = type(exc).__module__ or ""
    if module.startswith("sqlalchemy") and type(exc).__name__ in ("OperationalError", "InterfaceError"):
        first = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        return Failure(f"cannot reach PostgreSQL at {_redacted_database_url()} (DATABASE_URL): {first}")
    if module.startswith("sqlalchemy") and getattr(getattr(exc, "orig", None), "sqlstate", None) == "42P01":
        return Failure(
            f"the database at {_redacted_database_url()} has no Ledgerflow tables yet: "
            "run `ledgerflow db upgrade` (`make run` does it)"
        )
    if module.startswith("sqlalchemy") and type(exc).__name__ == "ArgumentError":
        return Failure(f"DATABASE_URL is not a database URL: {exc}")
    if module == "app.errors":
        return Failure(describe(exc), exit_code=exit_code_for(getattr(exc, "code", "")))
    from ledgerflow.sdk_types import ApiError, ClientError

    if isinstance(exc, ApiError):  # a command that goes through the API (definitions, workflows start)
        return Failure(describe(exc), exit_code=exit_code_for(exc.code))
    if isinstance(exc, ClientError):
        return Failure(str(exc))
    return None
