"""The operator CLI: ``ledgerflow jobs list|show|retry|skip|replay|clusters|status`` and
``ledgerflow workflows list|show|pause|resume|cancel|signal``.

Every command acts as a named operator: a credential token (``--token`` or ``LEDGERFLOW_TOKEN``) is
authenticated against the database exactly as the API does, the command needs the same scope as the
matching route (reads ``workflow:instance:monitor`` / ``workflows:read``; job mutations
``workflow:engine:operate``; workflow control ``workflows:control``; signals ``workflows:signal``),
calls the same domain functions in one short transaction each, and those write the same operation
audit rows (``request_id`` ``cli_<hex>``). Tables for people, ``--json`` for scripts, a confirmation
prompt before every change (``--yes`` skips it), and a progress bar for batch retry and replay, which
run in chunks of ``--chunk`` jobs (one transaction and one batch audit row per chunk, sharing one
``operation_id``; the stagger continues across chunks).
"""

from __future__ import annotations

import functools
import shutil
import sys
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import click

from app.auth import Scope, missing_permission_message
from app.settings import PROMETHEUS_MULTIPROC_DIR
from ledgerflow.cli_common import describe, exit_code_for

TOKEN_ENV = "LEDGERFLOW_TOKEN"
DEFAULT_CHUNK = 50


# ----------------------------------------------------------------------------------------- plumbing
class CliFailure(click.ClickException):
    """A refused or failed command: printed as one line ``Error: message`` like every other error of the
    CLI (or JSON with the code, with ``--json``); exit status ``cli_common.exit_code_for(code)``."""

    def __init__(self, code: str, message: str, as_json: bool = False, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.code, self.as_json = code, as_json
        self.exit_code = exit_code_for(code) if exit_code is None else exit_code

    def show(self, file: Any = None) -> None:
        if self.as_json:
            from app import jsonx

            click.echo(jsonx.dumps({"error": {"code": self.code, "message": self.message}}))
        else:
            click.echo(f"Error: {self.message}", err=True)


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    width = None if sys.stdout.isatty() else max(160, shutil.get_terminal_size((160, 24)).columns)
    return Console(stderr=stderr, width=width, highlight=False)


def _emit_json(data: Any) -> None:
    from app import jsonx

    click.echo(jsonx.dumps(data))


def operator_command(*scopes: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Adds ``--token`` / ``--json``, authenticates the token, checks ``scopes`` (all required, as
    ``web.auth.requires``) and turns domain errors into ``error CODE: message`` with exit code 1."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        @click.option("--json", "as_json", is_flag=True, help="print JSON (for scripts) instead of tables")
        @click.option("--token", envvar=TOKEN_ENV, help=f"operator credential token (or ${TOKEN_ENV})")
        @functools.wraps(fn)
        def wrapper(*args: Any, token: str | None, as_json: bool, **kwargs: Any) -> Any:
            from app.errors import LedgerflowError

            try:
                principal = authenticate(token, scopes, as_json)
                return fn(*args, principal=principal, as_json=as_json, **kwargs)
            except LedgerflowError as exc:
                raise CliFailure(exc.code, describe(exc), as_json) from None

        return wrapper

    return deco


def authenticate(token: str | None, scopes: Iterable[str], as_json: bool = False) -> Any:
    """The principal of ``token`` if it is live and holds every scope (the API's rules)."""
    from app.auth import authenticate as auth
    from app.db import get_engine
    from app.observability import logs

    if not token:
        raise CliFailure(
            "UNAUTHENTICATED",
            f"an operator credential is required: --token or ${TOKEN_ENV} "
            "(issue one with `ledgerflow credentials create`)",
            as_json,
            exit_code=2,
        )
    with get_engine().connect() as conn:
        principal = auth(conn, token.strip())
    if principal is None:
        raise CliFailure(
            "UNAUTHENTICATED", f"the token (--token or ${TOKEN_ENV}) is unknown, revoked or expired", as_json
        )
    missing = [s for s in scopes if s not in principal.scopes]
    if missing:  # the API's 403 message: names the switch that grants each missing scope
        raise CliFailure("PERMISSION_DENIED", missing_permission_message(missing), as_json)
    logs.set_process_context(namespace=principal.namespace)
    return principal


def cli_request_id() -> str:
    return "cli_" + uuid.uuid4().hex


def _confirm(question: str, yes: bool) -> None:
    if not yes:
        click.confirm(question, abort=True, err=True)


def _split(values: Iterable[str]) -> tuple[str, ...]:
    out: list[str] = []
    for v in values:
        out.extend(x.strip() for x in v.split(",") if x.strip())
    return tuple(dict.fromkeys(out))


def _choices(values: Iterable[str], allowed: Iterable[str], name: str) -> tuple[str, ...]:
    got, ok = _split(values), set(allowed)
    bad = [v for v in got if v not in ok]
    if bad:
        raise click.BadParameter(
            f"unknown value(s) {', '.join(bad)}; one of {', '.join(sorted(ok))}", param_hint=name
        )
    return got


def _age(value: Any) -> str:
    if not isinstance(value, datetime):
        return "" if value is None else str(value)
    secs = (datetime.now(UTC) - value).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(secs) >= size:
            return f"{secs / size:.0f}{unit} ago"
    return f"{secs:.0f}s ago"


def _short(text: Any, n: int = 60) -> str:
    s = "" if text is None else str(text).replace("\n", " ")
    return s if len(s) <= n else s[: n - 1] + "…"


def _table(title: str | None, columns: list[str], rows: Iterable[Iterable[Any]]) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_lines=False)
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*["" if v is None else str(v) for v in r])
    return t


def _kv(title: str, pairs: Iterable[tuple[str, Any]]) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for k, v in pairs:
        t.add_row(k, "" if v is None else (v.isoformat() if isinstance(v, datetime) else str(v)))
    return t


def _chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def _progress() -> Any:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(stderr=True),
        transient=False,
    )


def _actor(principal: Any, reason: str | None, operation_id: str) -> Any:
    from app.ledger.job_actions import Actor

    return Actor(principal=principal, request_id=cli_request_id(), reason=reason, operation_id=operation_id)


def _read(fn: Callable[[Any], Any]) -> Any:
    from app.db import get_engine

    with get_engine().connect() as conn, conn.begin():
        return fn(conn)


def _write(fn: Callable[[Any], Any]) -> Any:
    """One short transaction; wake hints of retried jobs go out after its commit."""
    from actors import hints
    from app.db import transaction

    hints.install_publisher()
    with transaction() as conn:
        return fn(conn)


def _job_ids(ids: tuple[str, ...], from_file: Any) -> list[int]:
    from app.ledger import job_reads

    raw = list(ids)
    if from_file is not None:
        raw.extend(line.strip() for line in from_file if line.strip() and not line.startswith("#"))
    out = []
    for value in raw:
        job_id = job_reads.parse_job_id(value)
        if job_id is None:
            raise click.BadParameter(
                f"{value!r} is not a job id (a positive decimal integer)", param_hint="JOB_ID"
            )
        out.append(job_id)
    if not out:
        raise click.UsageError("name at least one job id (arguments or --ids-from)")
    return list(dict.fromkeys(out))


# ----------------------------------------------------------------------------------------- jobs
@click.group("jobs")
def jobs() -> None:
    """Job ledger operations (the operator API's rules, as a named operator, audited)."""


MONITOR, OPERATE = Scope.ENGINE_MONITOR, Scope.ENGINE_OPERATE
WF_READ, WF_CONTROL, WF_SIGNAL = Scope.WORKFLOWS_READ, Scope.WORKFLOWS_CONTROL, Scope.WORKFLOWS_SIGNAL


@jobs.command("list")
@click.option("--type", "types", multiple=True, help="job type(s), comma-separated or repeated")
@click.option("--status", "statuses", multiple=True, help="status(es), comma-separated or repeated")
@click.option("--instance-id")
@click.option("--trace-id")
@click.option("--keyword", help="matches the id, operation key, error text or payload text")
@click.option("--min-age", "min_age", type=click.IntRange(0), help="seconds since creation, at least")
@click.option("--max-age", "max_age", type=click.IntRange(0), help="seconds since creation, at most")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@click.option("--cursor", help="next_cursor of the previous page")
@operator_command(MONITOR)
def jobs_list(
    principal: Any,
    as_json: bool,
    types: tuple[str, ...],
    statuses: tuple[str, ...],
    instance_id: str | None,
    trace_id: str | None,
    keyword: str | None,
    min_age: int | None,
    max_age: int | None,
    limit: int,
    cursor: str | None,
) -> None:
    """List jobs, newest first (the filters of GET /jobs)."""
    from app.ledger import job_reads
    from app.ledger.states import JobStatus, JobType

    f = job_reads.JobFilter(
        types=_choices(types, [t.value for t in JobType], "--type"),
        statuses=_choices(statuses, [s.value for s in JobStatus], "--status"),
        instance_id=instance_id,
        trace_id=trace_id,
        keyword=keyword,
        min_age_seconds=min_age,
        max_age_seconds=max_age,
        namespace_id=principal.job_namespace,
    )
    page = _read(lambda c: job_reads.list_jobs(c, f, limit=limit, cursor=cursor))
    if as_json:
        _emit_json({"items": page.items, "next_cursor": page.next_cursor})
        return
    rows = [
        (
            j["id"],
            j["type"],
            j["status"],
            f"{j['attempts']}/{j['max_attempts']}",
            j["generation"],
            j["instance_id"] or "",
            j["error_code"] or "",
            _age(j["created_at"]),
            _short(j["last_error"], 50),
        )
        for j in page.items
    ]
    console = _console()
    console.print(
        _table(
            f"{len(rows)} job(s)",
            ["id", "type", "status", "attempts", "gen", "instance", "error_code", "created", "last error"],
            rows,
        )
    )
    if page.next_cursor:
        console.print(f"more: --cursor {page.next_cursor}")


@jobs.command("show")
@click.argument("job_id")
@operator_command(MONITOR)
def jobs_show(principal: Any, as_json: bool, job_id: str) -> None:
    """One job with every attempt of every generation and its receipts."""
    from app.ledger import job_reads

    jid = _job_ids((job_id,), None)[0]
    job = _read(lambda c: job_reads.job_detail(c, jid, principal.job_namespace))
    if as_json:
        _emit_json(job)
        return
    from app import jsonx

    console = _console()
    fields = [
        k for k in job if k not in ("attempts_history", "receipts", "payload", "result", "effect_marker")
    ]
    console.print(_kv(f"job {job['id']}", [(k, job[k]) for k in fields]))
    for k in ("payload", "result", "effect_marker"):
        if job.get(k) is not None:
            console.print(f"[bold]{k}[/bold]: {_short(jsonx.dumps(job[k]), 400)}")
    attempts = job.get("attempts_history") or []
    console.print(
        _table(
            f"{len(attempts)} attempt(s)",
            ["gen", "attempt", "status", "worker", "started", "ms", "error_code", "error"],
            [
                (
                    a["generation"],
                    a["attempt"],
                    a["status"],
                    a["worker_id"],
                    a["started_at"],
                    a["duration_ms"],
                    a["error_code"],
                    _short(a["error"], 60),
                )
                for a in attempts
            ],
        )
    )
    if job.get("receipts"):
        console.print(f"{len(job['receipts'])} effect receipt(s)")


def _retry_or_skip(
    principal: Any,
    as_json: bool,
    ids: list[int],
    *,
    retry: bool,
    reason: str | None,
    rate: int,
    chunk: int,
    yes: bool,
    payload: Any = None,
    has_payload: bool = False,
) -> None:
    from app.ids import new_id
    from app.ledger import job_actions

    verb = "retry" if retry else "skip"
    if len(ids) == 1:
        jid = ids[0]
        _confirm(f"{verb.capitalize()} job {jid}?", yes)
        actor = _actor(principal, reason, new_id())
        if retry:
            out = _write(
                lambda c: job_actions.retry_one(c, jid, actor, payload=payload, has_payload=has_payload)
            )
        else:
            out = _write(lambda c: job_actions.skip_one(c, jid, actor))
        if as_json:
            _emit_json(out)
        else:
            j = out["job"]
            _console().print(
                f"job {j['id']}: {j['status']} (generation {j['generation']})"
                + (f", runs at {j['run_at'].isoformat()}" if j.get("run_at") else "")
            )
        return
    if has_payload:
        raise click.UsageError("--payload applies to a single job")
    extra = f" staggered at {rate}/s" if retry else ""
    _confirm(f"{verb.capitalize()} {len(ids)} jobs{extra}?", yes)
    operation_id = new_id()
    totals: dict[str, Any] = {
        "operation_id": operation_id,
        "submitted": 0,
        "skipped_for_state": 0,
        "not_found": 0,
        "submitted_ids": [],
        "skipped": [],
    }
    if retry:
        totals["rate"] = rate
    with _progress() as progress:
        task = progress.add_task(f"batch {verb}", total=len(ids))
        for part in _chunks(ids, chunk):
            actor = _actor(principal, reason, operation_id)
            start = totals["submitted"]
            if retry:
                out = _write(
                    functools.partial(
                        job_actions.batch_retry, ids=part, actor=actor, rate=rate, start_index=start
                    )
                )
            else:
                out = _write(functools.partial(job_actions.batch_skip, ids=part, actor=actor))
            for k in ("submitted", "skipped_for_state", "not_found"):
                totals[k] += out[k]
            totals["submitted_ids"].extend(out["submitted_ids"])
            totals["skipped"].extend(out["skipped"])
            progress.advance(task, len(part))
    if as_json:
        _emit_json(totals)
        return
    console = _console()
    console.print(
        f"{verb}: {totals['submitted']} submitted, {totals['skipped_for_state']} skipped for their state, "
        f"{totals['not_found']} not found (operation {operation_id})"
    )
    if totals["skipped"]:
        console.print(
            _table(
                "not changed",
                ["id", "status", "reason"],
                [(s["id"], s["status"], s["reason"]) for s in totals["skipped"]],
            )
        )


@jobs.command("retry")
@click.argument("job_ids", nargs=-1)
@click.option(
    "--ids-from", "ids_from", type=click.File("r"), help="file with one job id per line ('-' = stdin)"
)
@click.option("--reason", help="why (written to the audit)")
@click.option("--payload", "payload_json", help="single job only: retry with this JSON payload")
@click.option(
    "--rate", default=20, show_default=True, type=click.IntRange(1, 1000), help="batch: jobs per second"
)
@click.option("--chunk", default=DEFAULT_CHUNK, show_default=True, type=click.IntRange(1, 500), hidden=True)
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@operator_command(OPERATE)
def jobs_retry(
    principal: Any,
    as_json: bool,
    job_ids: tuple[str, ...],
    ids_from: Any,
    reason: str | None,
    payload_json: str | None,
    rate: int,
    chunk: int,
    yes: bool,
) -> None:
    """Retry failed / dead / canceled jobs (generation + 1, attempts reset); several ids = a batch
    retry staggered at --rate per second, with a progress bar."""
    from app import jsonx

    ids = _job_ids(job_ids, ids_from)
    payload, has_payload = None, payload_json is not None
    if payload_json is not None:
        try:
            payload = jsonx.loads(payload_json)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None
        if payload is None:
            raise click.BadParameter("null is not a payload", param_hint="--payload")
    _retry_or_skip(
        principal,
        as_json,
        ids,
        retry=True,
        reason=reason,
        rate=rate,
        chunk=chunk,
        yes=yes,
        payload=payload,
        has_payload=has_payload,
    )


@jobs.command("skip")
@click.argument("job_ids", nargs=-1)
@click.option(
    "--ids-from", "ids_from", type=click.File("r"), help="file with one job id per line ('-' = stdin)"
)
@click.option("--reason", help="why (written to the audit and as the job's error)")
@click.option("--chunk", default=DEFAULT_CHUNK, show_default=True, type=click.IntRange(1, 500), hidden=True)
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@operator_command(OPERATE)
def jobs_skip(
    principal: Any,
    as_json: bool,
    job_ids: tuple[str, ...],
    ids_from: Any,
    reason: str | None,
    chunk: int,
    yes: bool,
) -> None:
    """Skip (cancel) pending / running / paused / failed / dead jobs."""
    ids = _job_ids(job_ids, ids_from)
    _retry_or_skip(principal, as_json, ids, retry=False, reason=reason, rate=20, chunk=chunk, yes=yes)


def _replay_filter(
    statuses: tuple[str, ...],
    types: tuple[str, ...],
    instance_id: str | None,
    trace_id: str | None,
    error_keyword: str | None,
    error_pattern: str | None,
    min_age: int | None,
    max_age: int | None,
) -> Any:
    from app.ledger import replay
    from app.ledger.states import JobType

    return replay.ReplayFilter(
        statuses=_choices(statuses, replay.REPLAYABLE, "--status") or tuple(replay.REPLAYABLE),
        types=_choices(types, [t.value for t in JobType], "--type"),
        instance_id=instance_id,
        trace_id=trace_id,
        error_keyword=error_keyword,
        error_pattern=error_pattern,
        min_age_seconds=min_age,
        max_age_seconds=max_age,
    )


@jobs.command("replay")
@click.option("--status", "statuses", multiple=True, help="dead and/or failed (default both)")
@click.option("--type", "types", multiple=True)
@click.option("--instance-id")
@click.option("--trace-id")
@click.option("--error-keyword", help="substring of the last error")
@click.option("--error-pattern", help="a normalized reason, as `jobs clusters` prints it")
@click.option("--min-age", "min_age", type=click.IntRange(0))
@click.option("--max-age", "max_age", type=click.IntRange(0))
@click.option(
    "--limit", default=500, show_default=True, type=click.IntRange(1, 100_000), help="at most this many"
)
@click.option("--rate", default=20, show_default=True, type=click.IntRange(1, 1000), help="jobs per second")
@click.option("--reason", help="why (written to the audit)")
@click.option("--dry-run", is_flag=True, help="print the preview only")
@click.option("--chunk", default=DEFAULT_CHUNK, show_default=True, type=click.IntRange(1, 500), hidden=True)
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@operator_command(OPERATE)
def jobs_replay(
    principal: Any,
    as_json: bool,
    statuses: tuple[str, ...],
    types: tuple[str, ...],
    instance_id: str | None,
    trace_id: str | None,
    error_keyword: str | None,
    error_pattern: str | None,
    min_age: int | None,
    max_age: int | None,
    limit: int,
    rate: int,
    reason: str | None,
    dry_run: bool,
    chunk: int,
    yes: bool,
) -> None:
    """Replay dead / failed jobs matching the conditions, oldest first, staggered at --rate per second
    (preview, confirmation, then a progress bar)."""
    from app.ids import new_id
    from app.ledger import job_actions, replay

    f = _replay_filter(statuses, types, instance_id, trace_id, error_keyword, error_pattern, min_age, max_age)
    f = replace(f, namespace_id=principal.job_namespace)  # a namespace operator previews its own jobs
    preview = _read(lambda c: replay.preview(c, f, sample_size=10))
    target = min(limit, preview["count"])
    if dry_run or target == 0:
        if as_json:
            _emit_json({"preview": preview, "would_replay": target})
        else:
            _print_preview(preview, target)
        return
    if not as_json:
        _print_preview(preview, target)
    _confirm(f"Replay {target} of {preview['count']} matching job(s) at {rate}/s?", yes)
    operation_id = new_id()
    submitted: list[str] = []
    with _progress() as progress:
        task = progress.add_task("replay", total=target)
        while len(submitted) < target:
            actor = _actor(principal, reason, operation_id)
            n = min(chunk, target - len(submitted))
            out = _write(
                functools.partial(
                    job_actions.replay, f=f, actor=actor, limit=n, rate=rate, start_index=len(submitted)
                )
            )
            if not out["success"]:
                break  # nothing left that matches (changed meanwhile)
            submitted.extend(out["submitted_ids"])
            progress.advance(task, out["success"])
    result = {
        "operation_id": operation_id,
        "success": len(submitted),
        "matched": preview["count"],
        "remaining": max(0, preview["count"] - len(submitted)),
        "rate": rate,
        "submitted_ids": submitted,
        "conditions": f.as_dict(),
    }
    if as_json:
        _emit_json(result)
    else:
        _console().print(
            f"replayed {len(submitted)} job(s); {result['remaining']} matching left "
            f"(operation {operation_id})"
        )


def _print_preview(preview: dict[str, Any], target: int) -> None:
    console = _console()
    console.print(f"{preview['count']} job(s) match; {target} would be replayed (oldest first)")
    if preview["sample"]:
        console.print(
            _table(
                "sample",
                ["id", "type", "status", "attempts", "error_code", "last error"],
                [
                    (
                        s["id"],
                        s["type"],
                        s["status"],
                        s["attempts"],
                        s["error_code"],
                        _short(s["last_error"], 70),
                    )
                    for s in preview["sample"]
                ],
            )
        )


@jobs.command("clusters")
@click.option("--group-by", default="reason,type", show_default=True, help="reason, type, instance, trace")
@click.option("--type", "types", multiple=True)
@click.option("--status", "statuses", multiple=True, help="dead and/or failed (default both)")
@click.option("--instance-id")
@click.option("--trace-id")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@operator_command(MONITOR)
def jobs_clusters(
    principal: Any,
    as_json: bool,
    group_by: str,
    types: tuple[str, ...],
    statuses: tuple[str, ...],
    instance_id: str | None,
    trace_id: str | None,
    limit: int,
) -> None:
    """Failed / dead jobs clustered by normalized error (and type, instance, trace)."""
    from app.ledger import replay
    from app.ledger.states import JobType

    dims = _choices((group_by,), replay.CLUSTER_DIMENSIONS, "--group-by")
    data = _read(
        lambda c: replay.failure_clusters(
            c,
            group_by=dims,
            types=_choices(types, [t.value for t in JobType], "--type"),
            statuses=_choices(statuses, replay.REPLAYABLE, "--status") or tuple(replay.REPLAYABLE),
            instance_id=instance_id,
            trace_id=trace_id,
            limit=limit,
            namespace_id=principal.job_namespace,
        )
    )
    if as_json:
        _emit_json(data)
        return
    _console().print(
        _table(
            f"{data['cluster_count']} cluster(s) by {', '.join(data['group_by'])}",
            ["count", "dead", "failed", "type", "reason", "last seen", "sample ids"],
            [
                (
                    c["count"],
                    c["dead"],
                    c["failed"],
                    c["type"] or "",
                    _short(c["reason"], 70),
                    _age(c["last_seen"]),
                    " ".join(c["sample_job_ids"]),
                )
                for c in data["clusters"]
            ],
        )
    )


@jobs.command("status")
@operator_command(MONITOR)
def jobs_status(principal: Any, as_json: bool) -> None:
    """Runtime status (live workers, slots, backlog, stuck, queue wait, failure rate), counts and the
    worker registry (a node whose heartbeat stopped without a clean exit shows as lost)."""
    from app.ledger import job_reads, nodes, status

    data = _read(
        lambda c: {
            "runtime": status.runtime_status(c),
            "summary": job_reads.summary(c, principal.job_namespace),
            "nodes": nodes.list_nodes(c),
        }
    )
    if as_json:
        _emit_json(data)
        return
    console = _console()
    console.print(_kv("runtime status", _runtime_rows(data["runtime"])))
    by_status = data["summary"]["by_status"]
    console.print(_table("jobs by status", ["status", "count"], sorted(by_status.items())))
    _print_nodes(console, data["nodes"])


def _runtime_rows(rt: dict[str, Any]) -> list[tuple[str, Any]]:
    """The runtime status for people: one row per figure, none a Python dict."""

    def num(v: Any, unit: str = "") -> str:
        return "-" if v is None else f"{v:g}{unit}" if isinstance(v, float) else f"{v}{unit}"

    slots = rt["slots"]
    return [
        ("live worker processes", rt["live_workers"]["live"]),
        ("slots in use", f"{slots['in_use']} of {slots['capacity']}"),
        ("jobs running", rt["in_flight"]),
        ("due, waiting for a slot", rt["backlog"]),
        ("oldest due job waiting", num(rt["oldest_queued_seconds"], " s")),
        ("stuck (lease expired)", rt["stuck"]),
        ("dead letters", rt["dead"]),
        (
            "queue wait p95 / p99 (1 h)",
            f"{num(rt['queue_wait_p95_seconds'], ' s')} / {num(rt['queue_wait_p99_seconds'], ' s')}",
        ),
        (
            "attempts (1 h)",
            f"{rt['attempts_1h']}, {rt['failed_attempts_1h']} failed ({rt['failure_rate_1h'] * 100:.1f} %)",
        ),
        ("average attempt (1 h)", num(rt["avg_duration_ms_1h"], " ms")),
        ("last claim", _age(rt["last_claim_at"]) or "-"),
    ]


def _print_nodes(console: Any, nodes: list[dict[str, Any]]) -> None:
    """Live and lost nodes in a table; nodes that stopped cleanly only counted (they hold nothing)."""
    shown = [n for n in nodes if n["state"] != "stopped"]
    stopped = len(nodes) - len(shown)
    live = sum(1 for n in shown if n["live"])
    title = f"{live} live worker node(s), {len(shown) - live} not live"
    if stopped:
        title += f"; {stopped} stopped cleanly in the last day (not listed)"
    console.print(
        _table(
            title,
            ["node", "state", "pools", "slots in use", "heartbeat", "host / pid"],
            [
                (
                    n["node_id"],
                    n["state"],
                    ",".join(n["pools"]),
                    f"{n['slots_in_use']}/{n['slot_capacity']}",
                    f"{n['heartbeat_age_seconds']:.0f} s ago",
                    f"{n['hostname']} / {n['pid']}",
                )
                for n in shown
            ],
        )
    )


# ----------------------------------------------------------------------------------------- workflows
@click.group("workflows")
def workflows() -> None:
    """Workflow instances: start and watch one (through the API), list, show, pause / resume / cancel,
    signal, rerun, batch actions, failure groups (as a named operator, audited)."""


def _instance_rows(items: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [
        (
            i["id"],
            i.get("state"),
            "yes" if i.get("paused") else "",
            i.get("version"),
            i.get("business_key") or "",
            i.get("control_revision"),
            _age(_parse_time(i.get("created_at"))),
        )
        for i in items
    ]


def _parse_time(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value
    return value


@workflows.command("list")
@click.option("--state", help="RUNNING, WAITING, CANCELLING, NEEDS_REVIEW, SUCCEEDED, FAILED, CANCELLED")
@click.option("--paused", type=click.Choice(["true", "false"]))
@click.option("--definition-id")
@click.option("--business-key")
@click.option("--business-key-prefix")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 100))
@click.option("--cursor")
@operator_command(WF_READ)
def workflows_list(
    principal: Any,
    as_json: bool,
    state: str | None,
    paused: str | None,
    definition_id: str | None,
    business_key: str | None,
    business_key_prefix: str | None,
    limit: int,
    cursor: str | None,
) -> None:
    """List the namespace's workflow instances, newest first (GET /v1/workflows)."""
    from app.engine import instances
    from schemas import load
    from schemas.workflows import ListQuery

    args = {
        k: v
        for k, v in (
            ("state", state),
            ("paused", paused),
            ("definition_id", definition_id),
            ("business_key", business_key),
            ("business_key_prefix", business_key_prefix),
            ("limit", str(limit)),
            ("cursor", cursor),
        )
        if v is not None
    }
    query = load(ListQuery(), args)  # the API's own query schema: same rules, same messages
    data = _read(
        lambda c: instances.list_instances(
            c, principal.namespace_id, query["filters"], query["limit"], query["cursor"], principal.queues
        )
    )
    if as_json:
        _emit_json(data)
        return
    console = _console()
    console.print(
        _table(
            f"{len(data['items'])} workflow(s) in namespace {principal.namespace}",
            ["id", "state", "paused", "version", "business key", "control rev", "created"],
            _instance_rows(data["items"]),
        )
    )
    if data.get("next_cursor"):
        console.print(f"more: --cursor {data['next_cursor']}")


@workflows.command("show")
@click.argument("instance_id")
@operator_command(WF_READ)
def workflows_show(principal: Any, as_json: bool, instance_id: str) -> None:
    """One workflow instance and its steps."""
    from app.engine import instances, operator_commands, views

    def read(conn: Any) -> dict[str, Any]:
        inst = operator_commands.visible_instance(conn, principal, instance_id)
        steps = views.steps_view(conn, instance_id, principal.namespace_id)
        details = [
            views.step_view(conn, instance_id, principal.namespace_id, s["key"]) for s in steps["steps"]
        ]
        return {"instance": instances.instance_view(inst), "steps": steps, "step_details": details}

    data = _read(read)
    if as_json:
        _emit_json(data)
        return
    from app import jsonx
    from ledgerflow.workflows_cli import rich_step_table

    console = _console()
    inst = data["instance"]
    console.print(
        _kv(
            f"workflow {inst['id']}",
            [
                (k, v if not isinstance(v, (dict, list)) else _short(jsonx.dumps(v), 200))
                for k, v in inst.items()
            ],
        )
    )
    details = data["step_details"]
    console.print(rich_step_table(f"{len(details)} step(s)", details))


def _control(
    principal: Any,
    as_json: bool,
    instance_id: str,
    operation: str,
    reason: str,
    expected: int | None,
    yes: bool,
) -> None:
    from app.engine import operator_commands
    from schemas import load
    from schemas.workflow_control import ControlRequest

    current = _read(lambda c: operator_commands.visible_instance(c, principal, instance_id))
    revision = expected if expected is not None else current["control_revision"]
    req = load(
        ControlRequest(),
        {"operation": operation, "expected_control_revision": str(revision), "reason": reason},
    )
    _confirm(f"{operation} workflow {instance_id} ({current['state']}, control revision {revision})?", yes)
    request_id = cli_request_id()
    view = _write(
        lambda c: operator_commands.control_workflow(c, principal, instance_id, req, request_id=request_id)
    )
    if as_json:
        _emit_json({"instance": view})
    else:
        paused = " (paused)" if view.get("paused") else ""
        _console().print(
            f"workflow {view['id']}: {view['state']}{paused}, control revision {view['control_revision']}"
        )


def _control_command(operation: str, help_text: str) -> Any:
    @workflows.command(operation.lower(), help=help_text)
    @click.argument("instance_id")
    @click.option("--reason", required=True, help="why (written to the audit)")
    @click.option(
        "--expected-control-revision",
        "expected",
        type=click.IntRange(1),
        help="refuse if the control revision changed (default: the one read now)",
    )
    @click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
    @operator_command(WF_CONTROL)
    def cmd(
        principal: Any, as_json: bool, instance_id: str, reason: str, expected: int | None, yes: bool
    ) -> None:
        _control(principal, as_json, instance_id, operation, reason, expected, yes)

    return cmd


workflows_pause = _control_command("PAUSE", "Pause a workflow (W-CTL PAUSE).")
workflows_resume = _control_command("RESUME", "Resume a paused workflow (W-CTL RESUME).")
workflows_cancel = _control_command("CANCEL", "Cancel a workflow (W-CTL CANCEL; compensations run).")


@workflows.command("signal")
@click.argument("instance_id")
@click.option("--name", required=True)
@click.option("--payload-version", required=True)
@click.option("--step", "target_step_key", required=True, help="target step key")
@click.option(
    "--activation",
    "target_activation_sequence",
    required=True,
    type=click.IntRange(1),
    help="target activation sequence",
)
@click.option("--correlation-key", required=True)
@click.option("--payload", "payload_json", default="null", show_default=True, help="JSON payload")
@click.option("--reason", required=True)
@click.option("--evidence-ref")
@click.option("--yes", "-y", is_flag=True, help="do not ask for confirmation")
@operator_command(WF_SIGNAL)
def workflows_signal(
    principal: Any, as_json: bool, instance_id: str, payload_json: str, yes: bool, **fields: Any
) -> None:
    """Send a signal to a step's activation (POST /v1/workflows/{id}/signals)."""
    from app import jsonx
    from app.engine import operator_commands
    from schemas import load
    from schemas.workflow_control import SignalRequest

    try:
        payload = jsonx.loads(payload_json)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--payload") from None
    # the options are named as the request's fields; an option not given (--evidence-ref) is left out
    body = {k: v for k, v in fields.items() if v is not None} | {"payload": payload}
    req = load(SignalRequest(), body)
    _read(lambda c: operator_commands.visible_instance(c, principal, instance_id))
    target = f"{fields['target_step_key']}#{fields['target_activation_sequence']}"
    _confirm(f"Send signal {fields['name']} to {target} of {instance_id}?", yes)
    request_id = cli_request_id()
    view = _write(
        lambda c: operator_commands.send_signal(c, principal, instance_id, req, request_id=request_id)
    )
    if as_json:
        _emit_json({"signal": view})
    else:
        disposition = f" ({view['disposition']})" if view.get("disposition") else ""
        _console().print(f"signal {view['id']}: {view.get('state')}{disposition}")


def dev_environment(data_dir: Any) -> None:
    """What ``ledgerflow dev`` sets for its processes: a fresh shared PROMETHEUS_MULTIPROC_DIR (so
    /metrics sums every process) and readable logs when it runs in a terminal."""
    import os
    from pathlib import Path

    if not PROMETHEUS_MULTIPROC_DIR.is_set():
        path = Path(data_dir) / "prometheus-multiproc"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    if sys.stdout.isatty():
        os.environ.setdefault("LOG_FORMAT", "console")
