"""What an engine transaction writes once, at its commit, in ONE named statement
(``engine_commit_batch``): its event batches (``app.engine.events``: one row of
``workflow_event_batches`` per instance, or a few for a very long transaction) and its changes of the
namespaces' unfinished instances (``app.engine.quotas``: one upsert of ``workflow_quota_counts`` per
namespace). ``app.sql.at_commit`` sends it with the COMMIT in one round trip; a rollback drops it."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection

from app import jsonx
from app.ids import new_id
from app.sql import CommitBuffer, Query, at_commit, query

# Two backends whose pids share a stripe wait for each other's commit when they commit together (the row
# lock of the upsert, held through the commit's WAL flush): with 16 stripes a start's commit-time statement
# took 0.71 ms on average (max 26 ms) in the task-task bench, with 64 0.18 ms (max 1.9 ms); the quota
# check sums the namespace's rows, 64 at most.
STRIPES = 64
# Events and audit entries of one batch row: their ids are the batch's first 29 hex digits and a 3-hex
# ordinal (events 0..2047, audit entries 2048..4095); a transaction with more writes several batches.
BATCH_EVENTS = 2048
BATCH_AUDIT = 2048
# An event's JSON text without the spaces ``json.dumps`` puts after separators: the row keeps the text as
# written (``events_json``, migration 0038)
_COMPACT = (",", ":")

# What a batch row stores of its instance (the compact form, migration 0031): only what the transaction
# changed, its state as it left it (a JSON string; ``{"state", "paused": true}`` while paused). Its id is
# ``instance_id``; what never changes (definition, version, business key, trace id) the view
# ``workflow_events`` reads from the instance row (``definition_id`` and ``trace_id`` are '' in a compact
# row). Rows written before hold the whole summary and the ids, which the views read as they are. The
# events and audit entries are compact too (``event_text``, ``compact_entries``).
#
# The quota counts: one upsert per namespace (its stripe: the committing backend's pid modulo STRIPES).
# The batches: each continues its instance's sequence from the instance's newest batch (none: from 1); the
# batches of one instance in this statement follow one another (``before``: the events of the batches
# before it here). Every writer of an instance's events holds its row lock.
ENGINE_COMMIT_BATCH = query(
    "engine_commit_batch",
    f"""
WITH counted AS (
    INSERT INTO workflow_quota_counts AS c (namespace_id, stripe, unfinished)
    SELECT d.ns, pg_backend_pid() % {STRIPES}, d.change
    FROM unnest(CAST(:count_namespaces AS text[]), CAST(:count_changes AS bigint[])) AS d(ns, change)
    ON CONFLICT (namespace_id, stripe) DO UPDATE SET unfinished = c.unfinished + EXCLUDED.unfinished),
b AS (
    SELECT b.*, sum(b.n) OVER (PARTITION BY b.iid ORDER BY b.ord) - b.n AS before
    FROM json_to_recordset(CAST(:batches AS json)) AS b(ord int, id text, iid text, n int, events json,
        audit json, job bigint, response text))
INSERT INTO workflow_event_batches (id, namespace_id, instance_id, first_seq, last_seq, definition_id, instance,
    trace_id, events_json, audit_json, dispatch_job_id, start_response)
SELECT b.id, i.namespace_id, i.id,
    CASE WHEN b.n > 0 THEN s.last + b.before + 1 END, CASE WHEN b.n > 0 THEN s.last + b.before + b.n END,
    '', CASE WHEN i.paused THEN jsonb_build_object('state', i.state, 'paused', true) ELSE to_jsonb(i.state) END,
    '', b.events, b.audit, b.job, b.response
FROM b
    -- each batch finds its instance by primary key (LIMIT 1: a subquery the planner keeps as it is, so the
    -- batches are the outer side whatever the tables' statistics say; as a plain join a plan made on small
    -- tables read every instance and looked up each one's newest batch, at every commit)
    CROSS JOIN LATERAL (SELECT i.namespace_id, i.id, i.paused, i.state, i.created_at
                        FROM workflow_instances i WHERE i.id = b.iid LIMIT 1) i
    -- the partitions (by week, migration 0031) from the instance's creation on: a batch is written by a
    -- transaction that sees the instance (no transaction lasts a day, so none began a day before it)
    CROSS JOIN LATERAL (SELECT COALESCE(max(last_seq), 0) AS last FROM workflow_event_batches
                        WHERE instance_id = b.iid AND created_at >= i.created_at - interval '1 day') s
""",
)


_START_ENTRY = '{"action":"workflow.start",'
_AFTER = ',"after":'
_RESPONSE_INSTANCE = '"data":{"instance":'


def compact_start_entry(entry: str, response: str) -> str:
    """The ``workflow.start`` audit entry ``entry`` (a JSON text written by ``app.jsonx``) without its
    ``after`` when that is, text for text, the instance object of the start's response ``response``
    (the view reads it from there); otherwise ``entry`` unchanged (e.g. a URL in the input, whose user
    info and query values the audit does not keep but the response does). ``after`` is the entry's
    last member (``events._audit``); the response's ``"data":{"instance":`` is taken only as its
    top-level member (a raw ``"`` is never inside a JSON string), where the instance object begins."""
    if not entry.startswith(_START_ENTRY) or not entry.endswith("}"):
        return entry
    at = entry.find(_AFTER)  # the members before it are strings or null: their text holds no raw '"'
    start = response.find(_RESPONSE_INSTANCE)
    if at < 0 or start < 0 or response[:start].count("{") != 1:  # not the response's top-level "data"
        return entry
    after = entry[at + len(_AFTER) : -1]
    begin = start + len(_RESPONSE_INSTANCE)
    if response[begin : begin + len(after)] != after or not _one_value(after):
        return entry
    return entry[:at] + ',"after_in_response":true}'


# A start's response keeps the workflow's input once (issue 50): the instance row holds it, and a response
# whose input is longer than this (the marker costs ~25 bytes) is stored with ``"input": null`` in its
# instance and ``"input_on_instance": true`` at its top level (``stored_response``). Its readers put the
# instance's input back: a resent start (``app.engine.start_keys``, ``full_response``) and the audit's
# view ``workflow_operations`` (migration 0040), where the start's entry says ``after_in_response``.
INPUT_ON_INSTANCE = "input_on_instance"
_ELIDED_FROM = 128


def stored_response(response: str) -> str:
    """The text kept of the start's response ``response``: without its instance's input when that is
    long, when ``full_response`` gives the text back exactly from the instance's input as the instance
    row returns it (the response's ``data.instance`` is that row: ``instances.instance_view``);
    ``response`` as it is otherwise."""
    body = jsonx.loads_exact_db(response)
    data = body.get("data") if isinstance(body, dict) else None
    instance = data.get("instance") if isinstance(data, dict) else None
    if not isinstance(instance, dict) or "input" not in instance or INPUT_ON_INSTANCE in body:
        return response
    input_text = jsonx.dumps(instance["input"])
    if len(input_text) < _ELIDED_FROM:
        return response
    instance["input"] = None
    body[INPUT_ON_INSTANCE] = True
    kept = jsonx.dumps(body)
    return kept if full_response(kept, input_text) == response else response


def full_response(kept: str, instance_input: str | None) -> str:
    """The start's response as answered from the text ``kept`` (``stored_response``) and the instance's
    input (JSON text: ``workflow_instances.input``)."""
    if f'"{INPUT_ON_INSTANCE}":true' not in kept:
        return kept
    body = jsonx.loads_exact_db(kept)
    if not isinstance(body, dict) or body.pop(INPUT_ON_INSTANCE, None) is not True or instance_input is None:
        return kept
    body["data"]["instance"]["input"] = jsonx.loads_exact_db(instance_input)
    return jsonx.dumps(body)


def _one_value(text: str) -> bool:
    """Is ``text`` exactly one JSON value (so that the response holds no longer value at that place)?"""
    try:
        _, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return False
    return end == len(text)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def step_after(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    """What the engine's audit entry ``workflow.<event_type>`` of a step says in ``after`` that its event
    ``event_type`` (with ``data``) of the same batch says too (the view ``workflow_operations`` builds the
    same from the stored event)."""
    out = {"step_key": data.get("step_key"), "activation_id": data.get("activation_id")}
    if event_type == "step.activated":
        out["activation_sequence"] = data.get("sequence")
    return out


def event_text(batch: InstanceBatch, event_type: str, data: dict[str, Any]) -> str:
    """The JSON text of one event of ``batch`` in the compact form: ``[type, data]`` (``[type]`` without
    data); an event of the step activation (``step_key`` and ``activation_id``) of an earlier event of the
    same batch row names that event (``"+"``: its index in the row) instead of repeating both (the view
    ``workflow_events`` reads them from there). Rows written before migration 0031 hold ``{type, data}``."""
    n = len(batch.events)
    step_key, activation_id = data.get("step_key"), data.get("activation_id")
    if isinstance(step_key, str) and isinstance(activation_id, str) and "+" not in data:
        pair = (step_key, activation_id)
        k = batch.pairs.get(pair)
        if k is not None and k // BATCH_EVENTS == n // BATCH_EVENTS:
            rest = {x: v for x, v in data.items() if x not in ("step_key", "activation_id")}
            rest["+"] = k % BATCH_EVENTS
            return json.dumps([event_type, rest], default=str, separators=_COMPACT)
        batch.pairs[pair] = n
    return json.dumps([event_type, data] if data else [event_type], default=str, separators=_COMPACT)


def read_events(events: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """``(type, data)`` of each event of one batch row (``event_text``'s form or the whole form)."""
    out: list[tuple[str, dict[str, Any]]] = []
    for text in events:
        ev = jsonx.loads_exact_db(text)
        if isinstance(ev, dict):
            out.append((ev["type"], ev.get("data") or {}))
            continue
        data = dict(ev[1]) if len(ev) > 1 else {}
        if "+" in data:
            ref = out[data.pop("+")][1]
            data["step_key"], data["activation_id"] = ref.get("step_key"), ref.get("activation_id")
        out.append((ev[0], data))
    return out


def compact_entries(audit: list[str], events: list[str], instance_id: str, response: str | None) -> list[str]:
    """The audit entries of one batch row (``events``: that row's events; ``response``: the start's, on
    the row of a start) in the compact form, each of which the view ``workflow_operations`` reads back
    as written:

    - a target that is the instance itself (``"workflow"``, its id) is left out;
    - the start's entry: ``after`` and ``request_id`` when the response says the same
      (``compact_start_entry``);
    - an engine entry keeps no ``operation_id`` (each was a fresh id used nowhere else: the view shows the
      entry's own id, as the API did for an entry without one), and an entry of a step whose event is in
      the row names that event (``"ev"``: its index) instead of its action, target and what ``after``
      shares with the event (``step_after``)."""
    resolved: list[tuple[str, dict[str, Any]]] | None = None
    request_id: Any = None
    out: list[str] = []
    for text in audit:
        if response is not None:
            text = compact_start_entry(text, response)
        entry = jsonx.loads_exact_db(text)
        if "actor_id" in entry:
            if entry.get("after_in_response") is True and isinstance(entry.get("request_id"), str):
                if request_id is None:
                    request_id = jsonx.loads_exact_db(response or "{}").get("request_id")
                if entry["request_id"] == request_id:
                    del entry["request_id"]
        elif isinstance(entry.get("operation_id"), str):
            del entry["operation_id"]
            action, after = entry.get("action"), entry.get("after")
            if (
                isinstance(action, str)
                and action.startswith("workflow.step.")
                and entry.get("target_type") == "step"
                and isinstance(after, dict)
                and set(entry) == {"action", "target_type", "target_id", "after"}
            ):
                if resolved is None:
                    resolved = read_events(events)
                kind = action.removeprefix("workflow.")
                for k, (typ, data) in enumerate(resolved):
                    if typ != kind or data.get("step_key") != entry["target_id"]:
                        continue
                    shared = step_after(kind, data)
                    rest = {key: v for key, v in after.items() if key not in shared}
                    if _canonical({**rest, **shared}) == _canonical(after):
                        entry = {"ev": k, **({"after": rest} if rest else {})}
                        break
        if entry.get("target_type") == "workflow" and entry.get("target_id") == instance_id:
            del entry["target_type"], entry["target_id"]
        out.append(jsonx.dumps(entry))
    return out


def batch_id() -> str:
    """A new batch id: 29 random hex digits and ``000`` (the ordinal of its first event)."""
    return new_id()[:29] + "000"


class InstanceBatch:
    """The events and audit entries of one instance in one transaction."""

    __slots__ = ("events", "audit", "job", "response", "pairs")

    def __init__(self, job: int | None) -> None:
        self.events: list[str] = []  # JSON texts of [type, data] (``event_text``)
        self.pairs: dict[tuple[str, str], int] = {}  # (step key, activation) -> its first event's index
        self.audit: list[str] = []  # JSON texts of the audit entries (the engine's, a start's)
        self.job = job
        self.response: str | None = None  # the exact response of the start that created the instance


class CommitBatch(CommitBuffer):
    """One transaction's event batches by instance and quota count changes by namespace."""

    def __init__(self) -> None:
        self.by_instance: dict[str, InstanceBatch] = {}
        self.jobs: dict[str, int | None] = {}  # the dispatch job of each instance (None: nobody listens)
        self.known: dict[str, tuple[bool, str]] = {}  # (listened, trace id) read before the first event
        self.unfinished: dict[str, int] = {}  # the change of each namespace's unfinished instances

    def statements(self) -> list[tuple[Query, dict[str, Any]]]:
        counts = [(ns, n) for ns, n in self.unfinished.items() if n]
        if not counts and not self.by_instance:
            return []
        rows: list[str] = []
        for iid, b in self.by_instance.items():
            n_chunks = max(1, -(-len(b.events) // BATCH_EVENTS), -(-len(b.audit) // BATCH_AUDIT))
            if b.audit and n_chunks == 1:  # an entry may name an event or the response of its own row
                b.audit = compact_entries(b.audit, b.events, iid, b.response)
            for k in range(n_chunks):
                evs = b.events[k * BATCH_EVENTS : (k + 1) * BATCH_EVENTS]
                aud = b.audit[k * BATCH_AUDIT : (k + 1) * BATCH_AUDIT]
                head = json.dumps(
                    {
                        "ord": len(rows),
                        "id": batch_id(),
                        "iid": iid,
                        "n": len(evs),
                        "job": b.job,
                        "response": stored_response(b.response) if k == 0 and b.response else None,
                    }
                )
                # the events and audit entries are JSON texts already: spliced in, not encoded again, and
                # stored as written (``json``: migration 0038); an empty list is stored as NULL
                events = f"[{','.join(evs)}]" if evs else "null"
                audit = f"[{','.join(aud)}]" if aud else "null"
                rows.append(f'{head[:-1]}, "events": {events}, "audit": {audit}}}')
        params = {
            "count_namespaces": [ns for ns, _ in counts],
            "count_changes": [n for _, n in counts],
            "batches": "[" + ",".join(rows) + "]",
        }
        return [(ENGINE_COMMIT_BATCH, params)]


def of(conn: Connection) -> CommitBatch:
    """The commit batch of ``conn``'s transaction."""
    return at_commit(conn, "engine_commit_batch", CommitBatch)
