"""The failover scenario (``postgres-failover``): the four Procfile processes on a primary and a
synchronous standby managed by pg_auto_failover (chaos/autofailover.py), their DATABASE_URL naming both
nodes (libpq's multi-host form, ``target_session_attrs=read-write``), under load (starts, early
signals, task completions through the SDK's task worker, timers, subworkflows, outbound ledger jobs);
the primary fails over twice: the manager's switchover, then the primary's node killed (SIGKILL of
its keeper and postmaster) and brought back as the standby.

The run keeps its own log of events (``failover-events.log`` in the cluster's directory: the faults,
the monitor's view of the primary, every API answer the clients got) and prints, per failover, the
seconds from the primary's loss to its standby's promotion, to the first 2xx the API answered after
the promotion and to the pools' first claim. Checked from the database afterwards: every acknowledged
start, signal and task completion has its effect, no effect doubled, every workflow SUCCEEDED; no
answer was a 500."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg
from sqlalchemy import Engine, text

from app.auth import Scope, create_credential
from app.db import transaction
from app.ledger.states import EXTERNAL_OUTCOME_UNKNOWN
from app.settings import normalize_database_url
from chaos.autofailover import Formation, primary_of
from chaos.harness import Cluster, retry_db, wait_until
from chaos.scenarios import Result, Size, _late_writes, run
from chaos.workload import Workload
from ledgerflow.client import Client, CompletionResult
from ledgerflow.wire import Answer, TransportFailure

NAME = "postgres-failover"
# the processes' settings besides the suite's short leases: a 503's Retry-After of 1 s (the SDKs wait
# it out and resend with the same key), 2 s per host to connect, the local webhook receiver allowed
SETTINGS = {
    "LEDGERFLOW_DB_RETRY_AFTER_SECONDS": "1",
    "LEDGERFLOW_DB_CONNECT_TIMEOUT_SECONDS": "2",
    "LEDGERFLOW_OUTBOUND_ALLOW": "127.0.0.1/32",  # the local webhook receiver
}
RECOVERY_GOAL_SECONDS = 15.0


@dataclass
class Journal:
    """The run's own log: timestamped events (wall clock, comparable with the database's now() on this
    host) and every answer of the API."""

    path: Path | None = None
    events: list[tuple[float, str]] = field(default_factory=list)
    answers: list[tuple[float, float, str, int]] = field(default_factory=list)  # sent, done, path, status
    completed: list[str] = field(default_factory=list)  # task ids whose completion was answered 200
    signals: list[str] = field(default_factory=list)  # signal ids the API accepted
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def event(self, what: str, at: float | None = None) -> float:
        at = time.time() if at is None else at
        with self._lock:
            self.events.append((at, what))
            if self.path is not None:
                with open(self.path, "a") as f:
                    f.write(f"{at:.3f} {what}\n")
        return at

    def answer(self, sent: float, path: str, status: int) -> None:
        with self._lock:
            self.answers.append((sent, time.time(), path, status))

    def first_2xx_after(self, t: float) -> float | None:
        with self._lock:
            return min(
                (done for sent, done, _, s in self.answers if sent >= t and 200 <= s < 300), default=None
            )


class RecordingClient(Client):
    """The SDK's client, noting every answer (status and time) and every acknowledged completion."""

    journal: Journal

    def _send(
        self,
        method: str,
        path: str,
        content: bytes | None,
        params: dict[str, Any] | None,
        headers: dict[str, str],
    ) -> Answer:
        sent = time.time()
        try:
            resp = super()._send(method, path, content, params, headers)
        except TransportFailure:
            self.journal.answer(sent, path, 0)
            raise
        self.journal.answer(sent, path, resp.status_code)
        return resp

    def complete_and_claim(self, *args: Any, **kwargs: Any) -> tuple[list[CompletionResult], list]:
        results, claimed = super().complete_and_claim(*args, **kwargs)
        with self.journal._lock:
            self.journal.completed.extend(r.id for r in results if r.status == 200)
        return results, claimed


class Receiver:
    """A local webhook receiver: every delivery's ``webhook-id`` and event, answered 204."""

    def __init__(self) -> None:
        self.deliveries: list[tuple[str, dict]] = []
        lock = threading.Lock()
        deliveries = self.deliveries

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    deliveries.append((self.headers.get("webhook-id") or "", json.loads(body or b"{}")))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, name="chaos-webhooks", daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def succeeded(self) -> set[str]:
        """The workflows whose ``workflow.succeeded`` event arrived."""
        return {
            e.get("workflow_id", "")
            for _, e in list(self.deliveries)
            if e.get("type") == "workflow.succeeded"
        }

    def one_event_per_id(self) -> int:
        """Webhook ids delivered as two different events (a retry must resend the same event)."""
        seen: dict[str, set[str]] = {}
        for hook_id, event in list(self.deliveries):
            seen.setdefault(hook_id, set()).add(json.dumps(event, sort_keys=True))
        return sum(1 for bodies in seen.values() if len(bodies) > 1)

    def one_id_per_event(self) -> int:
        """Events of one workflow and sequence number that came under two ids (an event written twice)."""
        ids: dict[tuple[str, Any], set[str]] = {}
        for hook_id, event in list(self.deliveries):
            ids.setdefault((event.get("workflow_id", ""), event.get("seq")), set()).add(hook_id)
        return sum(1 for found in ids.values() if len(found) > 1)


class FailoverWorkload(Workload):
    """The suite's workload with a signal per workflow and a webhook subscription to a local receiver
    (``workflow.*`` of the parent definition), every client call recorded in the journal."""

    journal: Journal
    receiver: Receiver | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.with_signal = True
        self.journal = CURRENT.journal

    def setup(self) -> None:
        super().setup()
        self.receiver = Receiver()
        with transaction(self.engine) as conn:
            token = create_credential(
                conn, namespace=self.namespace, name="chaos-hooks", scopes=[Scope.INTEGRATIONS_MANAGE]
            ).token
        Client(self.web_url, token, timeout=10).create_subscription(
            self.receiver.url, ["workflow.*"], definition_id=self.definition_id
        )

    def stop_task_worker(self) -> None:
        super().stop_task_worker()
        if self.receiver is not None:
            self.receiver.stop()

    def client(self) -> Client:
        c = RecordingClient(self.web_url, self.token, timeout=10, retries=40, backoff=0.25)
        c.journal = self.journal
        return c

    def send_signal(self, c: Client, instance_id: str, order: str) -> str:
        sid = super().send_signal(c, instance_id, order)
        with self.journal._lock:
            self.journal.signals.append(sid)
        return sid

    def _rejoined(self) -> dict[str, int]:
        """The killed node is the standby again (when ``CURRENT.rejoin`` asks: the manager's part, not
        Ledgerflow's; the short form leaves it to come back on its own)."""
        formation = CURRENT.formation
        if formation is None or not CURRENT.rejoin:
            return {}
        try:
            formation.wait_healthy(90)
            missing = 0
        except TimeoutError:
            missing = 1
        self.journal.event(f"the formation is a primary and a secondary again: {not missing}")
        return {"the killed node rejoined as the standby": missing}

    def more_invariants(self, engine: Engine) -> dict[str, int]:
        """Every acknowledged effect is in the database (ACKNOWLEDGED); every workflow's end reached the
        webhook receiver, each event under one id and each id one event."""
        self.journal.event("the workload is quiet")
        hooks = self.receiver
        assert hooks is not None
        want = set(self.instance_ids)
        with contextlib.suppress(TimeoutError):  # deliveries trail the workflows' ends by a pass or two
            wait_until(lambda: want <= hooks.succeeded(), 60, interval=0.5)
        # L-EFFECT-4: a delivery whose executor was lost with its effect marker recorded (a failover in the
        # middle of its attempt) may have been sent: it is held for an operator's confirmation, never
        # re-sent; the receiver missing it is then the rule kept, not an event lost (noted, not violated)
        lacking = sorted(want - hooks.succeeded())
        held = retry_db(lambda: held_for_confirmation(engine, lacking)) if lacking else set()
        lost = [i for i in lacking if i not in held]
        if held:
            CURRENT.explanations.append(
                f"workflow.succeeded deliveries held for confirmation (EXTERNAL_OUTCOME_UNKNOWN): {len(held)}"
            )
        if lost:  # what the database says of each: the note an operator would need
            CURRENT.explanations.extend(retry_db(lambda: explain_undelivered(engine, lost[:5])))
        found = {
            **self._rejoined(),
            "every workflow's workflow.succeeded webhook delivered or held for confirmation": len(lost),
            "no webhook id delivered as two different events": hooks.one_event_per_id(),
            "no event delivered under two webhook ids": hooks.one_id_per_event(),
        }
        j = self.journal
        ids = {"starts": self.instance_ids, "signals": j.signals, "completed": sorted(set(j.completed))}

        def once() -> dict[str, int]:
            with engine.connect() as conn:
                return {
                    name: int(conn.execute(text(sql), {"ids": ids.get(key, [])}).scalar_one())
                    for name, sql, key in ACKNOWLEDGED
                }

        return {**found, **retry_db(once)}


# A workflow whose workflow.succeeded never reached the receiver: its state, its workflow.* events, its event
# dispatch jobs (a delivery's job names no instance) and their attempts, and its deliveries with their jobs
# (status, attempts, last error), one part each.
EXPLAIN_UNDELIVERED = [
    (
        "instance",
        "SELECT state, updated_at::text FROM workflow_instances WHERE id = :i",
    ),
    (
        "batches",
        "SELECT e.seq, e.type, e.batch_id, e.dispatch_job_id, e.created_at::text FROM workflow_events e "
        "WHERE e.instance_id = :i AND e.type LIKE 'workflow.%' ORDER BY e.seq",
    ),
    (
        "dispatch jobs",
        "SELECT j.id, j.type, j.status, j.attempts, j.max_attempts, j.generation, j.error_code, "
        "left(j.last_error, 200), j.created_at::text, j.finished_at::text FROM workflow_jobs j "
        "WHERE j.instance_id = :i AND j.type = 'event_dispatch' ORDER BY j.id",
    ),
    (
        "dispatch attempts",
        "SELECT x.job_id, x.attempt, x.status, left(x.error, 200), x.started_at::text "
        "FROM workflow_job_executions x JOIN workflow_jobs j ON j.id = x.job_id "
        "WHERE j.instance_id = :i AND j.type = 'event_dispatch' ORDER BY x.job_id, x.attempt",
    ),
    (
        "deliveries",
        "SELECT d.event_type, d.status, d.attempts, d.job_id, left(d.last_error, 200), jd.status, jd.attempts, "
        "left(jd.last_error, 200) FROM webhook_deliveries d LEFT JOIN workflow_jobs jd ON jd.id = d.job_id "
        "WHERE left(d.event_id, 29) IN (SELECT left(e.id, 29) FROM workflow_events e WHERE e.instance_id = :i) "
        "ORDER BY d.created_at",
    ),
]


HELD_FOR_CONFIRMATION = (
    "SELECT DISTINCT e.instance_id FROM workflow_events e "
    "JOIN webhook_deliveries d ON d.event_id = e.id JOIN workflow_jobs j ON j.id = d.job_id "
    "WHERE e.instance_id = ANY(:ids) AND e.type = 'workflow.succeeded' AND j.status = 'dead' "
    f"AND j.error_code = '{EXTERNAL_OUTCOME_UNKNOWN}'"
)


def held_for_confirmation(engine: Engine, ids: list[str]) -> set[str]:
    """The workflows of ``ids`` whose ``workflow.succeeded`` delivery is the L-EFFECT-4 dead letter."""
    with engine.connect() as conn:
        return set(conn.execute(text(HELD_FOR_CONFIRMATION), {"ids": ids}).scalars())


def explain_undelivered(engine: Engine, ids: list[str]) -> list[str]:
    """One note per workflow of ``ids``: what the database holds of its events' way to the receiver."""
    notes = []
    with engine.connect() as conn:
        for iid in ids:
            parts = []
            for name, sql in EXPLAIN_UNDELIVERED:
                try:
                    with conn.begin_nested():
                        shown = [str(tuple(r)) for r in conn.execute(text(sql), {"i": iid})]
                except Exception as exc:  # a diagnostic: its own failure is reported, never raised
                    shown = [f"query failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"]
                parts.append(f"{name}: " + "; ".join(shown))
            notes.append(f"undelivered {iid}: " + " | ".join(parts))
    return notes


@dataclass
class _Current:
    """What the fault needs beyond the cluster (``run`` builds the workload itself)."""

    formation: Formation | None = None
    journal: Journal = field(default_factory=Journal)
    rejoin: bool = True  # wait for the killed node to be the standby again, as an invariant
    explanations: list[str] = field(default_factory=list)  # notes of the checks (explain_undelivered)


CURRENT = _Current()


def _feed(load: Workload, size: Size, stop: threading.Event) -> threading.Thread:
    """A start (with its signal) and outbound jobs every 0.5 s, until ``stop`` or ``size.workflows``."""

    def feed() -> None:
        c = load.client()
        while not stop.is_set() and len(load.instance_ids) < size.workflows:
            load.start_workflows(1, client=c)
            load.enqueue_jobs(max(1, size.jobs // size.workflows), work_seconds=0.2)
            time.sleep(0.5)

    t = threading.Thread(target=feed, name="chaos-failover-feed", daemon=True)
    t.start()
    return t


def _probe(load: Workload, journal: Journal, stop: threading.Event) -> threading.Thread:
    """An authenticated read every 0.2 s, not retried: the API's answers while the primary is away."""

    def probe() -> None:
        with httpx.Client(timeout=3) as c:
            while not stop.is_set():
                sent = time.time()
                try:
                    r = c.get(
                        f"{load.web_url}/v1/workflows",
                        params={"limit": "1"},
                        headers={"Authorization": f"Bearer {load.token}"},
                    )
                    journal.answer(sent, "probe", r.status_code)
                except httpx.HTTPError:
                    journal.answer(sent, "probe", 0)
                time.sleep(0.2)

    t = threading.Thread(target=probe, name="chaos-failover-probe", daemon=True)
    t.start()
    return t


def _watch(formation: Formation, journal: Journal, stop: threading.Event) -> threading.Thread:
    """The monitor's view of the nodes and of the primary, each change logged."""

    def watch() -> None:
        last: str | None = "?"
        seen: dict[str, tuple[str, str]] | None = None
        while not stop.is_set():
            try:
                states = formation.states()
            except psycopg.Error:
                states = {}
            if states != seen:
                journal.event("nodes " + " ".join(f"{n}={r}/{g}" for n, (r, g) in sorted(states.items())))
                seen = states
            now = primary_of(states)
            if now != last:
                journal.event(f"primary {now}")
                last = now
            time.sleep(0.1)

    t = threading.Thread(target=watch, name="chaos-failover-watch", daemon=True)
    t.start()
    return t


def _promoted_at(journal: Journal, after: float, node: str) -> float | None:
    return min((t for t, what in journal.events if t >= after and what == f"primary {node}"), default=None)


def _first_claim_after(cluster: Cluster, t: float) -> float | None:
    def once() -> float | None:
        with cluster.engine.connect() as conn:  # type: ignore[union-attr]
            value = conn.execute(
                text(
                    "SELECT extract(epoch FROM min(started_at)) FROM workflow_job_executions "
                    "WHERE started_at >= to_timestamp(:t)"
                ),
                {"t": t},
            ).scalar()
        return None if value is None else float(value)

    return retry_db(once)


def fail_over(cluster: Cluster, load: Workload, size: Size, result: Result) -> None:
    formation, journal = CURRENT.formation, CURRENT.journal
    assert formation is not None and isinstance(load, FailoverWorkload)
    journal.path = cluster.workdir / "failover-events.log"
    stop, feeding = threading.Event(), threading.Event()
    threads = [_watch(formation, journal, stop), _probe(load, journal, stop)]
    feed = _feed(load, size, feeding)
    try:
        for kind in ("switchover", "sigkill"):
            time.sleep(2)  # load on the current primary first
            old = formation.primary()
            assert old is not None, "no primary before the fault"
            lost = journal.event(f"fault {kind} of primary {old}")
            if kind == "switchover":
                formation.switchover()
            else:
                formation.kill_node(old)
            new = formation.wait_promoted(other_than=old)
            result.faults += 1
            promoted = _promoted_at(journal, lost, new) or time.time()
            first_2xx = wait_until(lambda p=promoted: journal.first_2xx_after(p), 60)
            claim = wait_until(lambda p=promoted: _first_claim_after(cluster, p), 60)
            journal.event(f"first 2xx after promotion of {new}", first_2xx)
            journal.event(f"first pool claim after promotion of {new}", claim)
            result.notes.append(
                f"{kind}: primary {old} -> {new}; promoted {promoted - lost:.1f} s after the loss; first 2xx "
                f"{first_2xx - lost:.1f} s after the loss ({first_2xx - promoted:.1f} s after the promotion); "
                f"pools' first claim {claim - lost:.1f} s after the loss ({claim - promoted:.1f} s after)"
            )
            result.invariants[f"{kind}: first 2xx within {RECOVERY_GOAL_SECONDS:g} s of the promotion"] = int(
                first_2xx - promoted > RECOVERY_GOAL_SECONDS
            )
            if kind == "sigkill":  # back as the standby (checked with the invariants, at the end)
                formation.restart_node(old)
                journal.event(f"node {old} restarted")
    finally:
        feeding.set()
        feed.join(30)
        stop.set()
        for t in threads:
            t.join(5)
    statuses = [s for _, _, _, s in journal.answers]
    result.invariants["answers of 500 (every client call and probe)"] = sum(
        1 for s in statuses if s >= 500 and s != 503
    )
    result.notes.append(
        f"API answers: {len(statuses)}, of which 503: {statuses.count(503)}, no answer: {statuses.count(0)}; "
        f"acknowledged: {len(load.instance_ids)} starts, {len(journal.signals)} signals, "
        f"{len(journal.completed)} task completions"
    )
    errors = sum(cluster.logs("web").count(s) for s in ("unhandled error", "database error\n"))
    result.invariants["no unhandled error in the web log"] = errors
    workers = cluster.logs("worker")
    reclaimed = sum(int(n) for n in re.findall(r"reclaimed (\d+) expired lease", workers))
    result.notes.append(
        f"leases reclaimed by the pools meanwhile (those jobs run again): {reclaimed}; late writes of "
        f"fenced executors refused: {_late_writes(workers)}"
    )


# ------------------------------------------------------------------------ checks after the run
ACKNOWLEDGED: list[tuple[str, str, str]] = [
    (
        "every acknowledged start exists",
        "SELECT cardinality(CAST(:ids AS text[])) - count(*) FROM workflow_instances WHERE id = ANY(:ids)",
        "starts",
    ),
    (
        "every acknowledged signal was consumed",
        "SELECT cardinality(CAST(:ids AS text[])) - count(*) FROM workflow_signals WHERE id = ANY(:ids) AND state = 'CONSUMED'",
        "signals",
    ),
    (
        "every acknowledged task completion is COMPLETED",
        "SELECT cardinality(CAST(:ids AS text[])) - count(*) FROM workflow_tasks WHERE id = ANY(:ids) AND state = 'COMPLETED'",
        "completed",
    ),
    (
        "no signal accepted twice for one step (one signal per workflow was sent)",
        "SELECT count(*) FROM (SELECT instance_id FROM workflow_signals "
        "GROUP BY instance_id, target_step_key, target_activation_sequence HAVING count(*) > 1) d",
        "",
    ),
    (
        "no start applied twice (one workflow per acknowledged start and its Idempotency-Key)",
        "SELECT count(*) - cardinality(CAST(:ids AS text[])) FROM workflow_instances i "
        "WHERE i.parent_instance_id IS NULL AND i.definition_id = "
        "(SELECT definition_id FROM workflow_instances WHERE id = (CAST(:ids AS text[]))[1])",
        "starts",
    ),
]


def run_failover(
    size: Size,
    *,
    keep_failed: bool = False,
    timeout: float = 240,
    workers_per_pool: int = 2,
    rejoin: bool = True,
) -> Result:
    """Start the formation, run the scenario on it (``workers_per_pool`` worker processes in each of
    the two pools; with ``rejoin``, the killed node must be the standby again by the end), stop it."""
    formation = Formation()
    CURRENT.formation, CURRENT.journal, CURRENT.rejoin = formation, Journal(), rejoin
    CURRENT.explanations = []
    try:
        started = time.monotonic()
        formation.start()
        setup = time.monotonic() - started
    except Exception as exc:
        formation.stop()
        return Result(NAME, error=f"{type(exc).__name__}: {exc}")
    try:
        server = normalize_database_url(formation.url("postgres"))
        result = run(
            NAME,
            size,
            server,
            timeout=timeout,
            keep_failed=keep_failed,
            settings=SETTINGS,
            scenario=(fail_over, {"advance": workers_per_pool, "outbound": workers_per_pool}),
            process_url_for=formation.url,
            workload=FailoverWorkload,
        )
        result.notes.insert(
            0, f"pg_auto_failover formation ready in {setup:.0f} s; DATABASE_URL {formation.url('…')}"
        )
        result.notes.extend(CURRENT.explanations)
        return result
    finally:
        formation.stop()


# the most the feed starts (one every 0.5 s while the faults run) and the outbound jobs beside them
QUICK = Size(workflows=40, jobs=40, kills=0, stops=0, backend_kills=0, redis_seconds=0, starts=0)
FULL = Size(workflows=100, jobs=200, kills=0, stops=0, backend_kills=0, redis_seconds=0, starts=0)
