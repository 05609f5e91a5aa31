"""Workflows written in Python (docs/sdk.md, "Workflows in Python"): the steps are declared next to the
functions that run them, and turn into exactly the JSON definition document the server publishes
(docs/reference.md). The document stays the wire format: nothing here adds to the API.

    wf = Workflow("invoice", version="v1", deadline_seconds=600,
                  input_schema={"type": "object", "required": ["email", "lines"]})

    @wf.task("invoices.render", input={"lines": wf.input["lines"]})
    def render(task): ...

    @wf.task("invoices.send", after=[render], when=render.output["total"] > 0,
             input={"email": wf.input["email"], "total": render.output["total"]})
    def send(task): ...

    wf.output({"invoice": render.output, "delivery": send.output})

    wf.publish(client)          # idempotent: the same document is the same version
    wf.register(worker)         # the task functions, on their queues, with a TaskWorker

A dependency is a step object, a reference is built from ``wf.input[...]``, ``wf.business_key`` and
``step.output[...]``, and a condition from comparisons of references (``==`` ``!=`` ``<`` ``<=`` ``>``
``>=``, ``.is_in([...])``, ``.exists()``, combined with ``&``, ``|`` and ``~``). Every mistake the
server would refuse at publish that can be seen here — a reference to a step that is not a (transitive)
dependency, a step of another workflow, a duplicate key, a cycle — raises ``WorkflowError`` when the
declaration runs (at import time), naming the step by its Python name.

Part of the light SDK: the standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_PART = re.compile(r"^[A-Za-z0-9_-]+$")
_MISSING: Any = object()


class WorkflowError(ValueError):
    """A workflow declared in Python that the server would refuse (or that cannot be expressed)."""


# --------------------------------------------------------------------------- references and conditions
class Cond:
    """A condition: a JSON expression tree (``.json``). Combine with ``&``, ``|`` and ``~``."""

    __slots__ = ("json", "steps")

    def __init__(self, tree: dict[str, Any], steps: Iterable[Step]) -> None:
        self.json = tree
        self.steps: tuple[Step, ...] = tuple(steps)

    def __and__(self, other: Cond) -> Cond:
        return _combine("and", self, other)

    def __or__(self, other: Cond) -> Cond:
        return _combine("or", self, other)

    def __invert__(self) -> Cond:
        return Cond({"not": self.json}, self.steps)

    def __bool__(self) -> bool:
        raise TypeError(
            "a workflow condition is data, not a Python boolean: combine conditions with &, | and ~ "
            "(not and / or / not), and compare one reference at a time (not a < b < c)"
        )

    def __repr__(self) -> str:
        return f"Cond({self.json!r})"


def _combine(op: str, a: Cond, b: Any) -> Cond:
    if not isinstance(b, Cond):
        raise WorkflowError(f"{op}: both sides must be conditions (got {type(b).__name__})")
    items = [
        *(a.json[op] if set(a.json) == {op} else [a.json]),
        *(b.json[op] if set(b.json) == {op} else [b.json]),
    ]
    return Cond({op: items}, (*a.steps, *b.steps))


class Ref:
    """A reference to a value of the workflow: ``wf.input["amount"]``, ``step.output["id"]``,
    ``wf.business_key``; index with ``[name]`` or ``[n]``. Compared with a literal or another reference,
    it makes a condition (``Cond``); inside an input / output mapping it becomes its ``$.…`` string."""

    __slots__ = ("path", "step")

    def __init__(self, path: str, step: Step | None = None) -> None:
        self.path = path
        self.step = step

    def __getitem__(self, part: str | int) -> Ref:
        if isinstance(part, bool) or not isinstance(part, (str, int)):
            raise WorkflowError(f"{self.path}[{part!r}]: index a reference with a name or a number")
        if isinstance(part, int):
            if part < 0:
                raise WorkflowError(f"{self.path}[{part}]: negative indexes are not supported")
            return Ref(f"{self.path}[{part}]", self.step)
        if not _PART.fullmatch(part):
            raise WorkflowError(f"{self.path}[{part!r}]: a name of letters, digits, _ and -")
        return Ref(f"{self.path}.{part}", self.step)

    def _cmp(self, op: str, other: Any) -> Cond:
        if isinstance(other, (list, tuple, dict, Cond)):
            raise WorkflowError(
                f"{self.path} {op} ...: compare with a string, number, boolean, None or a reference"
            )
        return Cond({op: [self.path, _operand(other)]}, _steps_of(self, other))

    def __eq__(self, other: object) -> Cond:  # type: ignore[override]
        return self._cmp("==", other)

    def __ne__(self, other: object) -> Cond:  # type: ignore[override]
        return self._cmp("!=", other)

    def __lt__(self, other: Any) -> Cond:
        return self._cmp("<", other)

    def __le__(self, other: Any) -> Cond:
        return self._cmp("<=", other)

    def __gt__(self, other: Any) -> Cond:
        return self._cmp(">", other)

    def __ge__(self, other: Any) -> Cond:
        return self._cmp(">=", other)

    __hash__ = None  # type: ignore[assignment]

    def is_in(self, values: Ref | Iterable[Any]) -> Cond:
        """True when the value is one of ``values`` (a list of literals, or a reference to a list)."""
        if isinstance(values, Ref):
            return Cond({"in": [self.path, values.path]}, _steps_of(self, values))
        items = list(values)
        for v in items:
            if isinstance(v, (Ref, Cond, list, tuple, dict)):
                raise WorkflowError(f"{self.path}.is_in(...): a list of strings, numbers, booleans or None")
        return Cond({"in": [self.path, items]}, _steps_of(self))

    def exists(self) -> Cond:
        """True when the reference names a value that is not null."""
        return Cond({"exists": self.path}, _steps_of(self))

    def __bool__(self) -> bool:
        raise TypeError(f"{self.path} is a reference to a value of a running workflow, not a Python value")

    def __repr__(self) -> str:
        return f"Ref({self.path!r})"


def _operand(v: Any) -> Any:
    if isinstance(v, Ref):
        return v.path
    if isinstance(v, str) and v.startswith("$."):
        raise WorkflowError(f"literal {v!r}: a string starting with $. would be read as a reference")
    return v


def _steps_of(*values: Any) -> tuple[Step, ...]:
    return tuple(v.step for v in values if isinstance(v, Ref) and v.step is not None)


def _mapping(value: Any, where: str, found: list[Step]) -> Any:
    """The JSON of a mapping: references become their ``$.…`` strings (their steps go to ``found``)."""
    if isinstance(value, Ref):
        if value.step is not None:
            found.append(value.step)
        return value.path
    if isinstance(value, Cond):
        raise WorkflowError(f"{where}: a condition is not a value (use it as when=...)")
    if isinstance(value, Step):
        raise WorkflowError(f"{where}: use {value.python_name}.output, not the step itself")
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise WorkflowError(f"{where}: object keys are strings (got {k!r})")
            out[k] = _mapping(v, f"{where}.{k}", found)
        return out
    if isinstance(value, (list, tuple)):
        return [_mapping(v, f"{where}[{i}]", found) for i, v in enumerate(value)]
    if isinstance(value, str) and value.startswith("$."):
        raise WorkflowError(f"{where}: write the reference {value!r} as wf.input[...] / step.output[...]")
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise WorkflowError(f"{where}: {type(value).__name__} is not a JSON value")


# --------------------------------------------------------------------------- steps
class Step:
    """One step of a workflow. ``output`` is a reference to its output; ``key`` its key in the document."""

    def __init__(self, wf: Workflow, key: str, kind: str, python_name: str) -> None:
        self.workflow = wf
        self.key = key
        self.kind = kind
        self.python_name = python_name
        self.after: tuple[Step, ...] = ()
        self.fields: dict[str, Any] = {}

    @property
    def output(self) -> Ref:
        return Ref(f"$.steps.{self.key}.output", self)

    def ancestors(self) -> set[Step]:
        seen: set[Step] = set()
        todo = list(self.after)
        while todo:
            s = todo.pop()
            if s not in seen:
                seen.add(s)
                todo.extend(s.after)
        return seen

    def __repr__(self) -> str:
        return f"<{self.kind} step {self.key!r} of workflow {self.workflow.name!r}>"


class TaskStep(Step):
    """A TASK (or POLL) step and the function that runs it: calling the object calls the function."""

    def __init__(self, wf: Workflow, key: str, kind: str, fn: Callable[..., Any], queue: str) -> None:
        # the name a reader finds in the module: Class.method, or the function (not its enclosing scope)
        super().__init__(wf, key, kind, getattr(fn, "__qualname__", key).rpartition("<locals>.")[2])
        self.fn = fn
        self.queue = queue
        self.undo: Callable[..., Any] | None = None
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def compensate(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """Decorator: the function that serves this step's compensation queue (``compensation=``)."""
        if "compensation" not in self.fields:
            raise WorkflowError(f"step {self.python_name}: declare compensation='queue' on the step first")
        self.undo = fn
        return fn


# --------------------------------------------------------------------------- the workflow
class Workflow:
    """A workflow definition declared in Python; ``document()`` is its JSON document."""

    def __init__(
        self,
        name: str,
        *,
        version: str,
        deadline_seconds: int,
        input_schema: Any = True,
        description: str | None = None,
    ) -> None:
        self.name = name
        self.version = version
        self.deadline_seconds = deadline_seconds
        self.input_schema = input_schema
        self.description = description
        self.steps: list[Step] = []
        self.signals: list[dict[str, Any]] = []
        self._output: Any = _MISSING
        self.input = Ref("$.input")
        self.business_key = Ref("$.business_key")
        self.item = Ref("$.item")  # in a fan-out step's input: its element, and the element's index
        self.index = Ref("$.index")

    # -- declaring steps ---------------------------------------------------------------------
    def _add(
        self,
        step: Step,
        after: Iterable[Step],
        when: Cond | None,
        description: str | None,
        refs: dict[str, Any],
    ) -> Step:
        who = f"step {step.python_name}" + (f" (key {step.key!r})" if step.key != step.python_name else "")
        if not _KEY.fullmatch(step.key):
            raise WorkflowError(f"{who}: a key is 1-64 letters, digits, _ and - (pass key=...)")
        if any(s.key == step.key for s in self.steps):
            raise WorkflowError(f"{who}: workflow {self.name!r} already has a step {step.key!r}")
        deps: list[Step] = []
        for i, d in enumerate(after):
            if not isinstance(d, Step):
                raise WorkflowError(f"{who}: after[{i}] is {d!r}; a dependency is a step object, not a name")
            if d.workflow is not self or d not in self.steps:
                raise WorkflowError(f"{who}: after[{i}] is {d.python_name} of workflow {d.workflow.name!r}")
            if d in deps:
                raise WorkflowError(f"{who}: {d.python_name} is listed twice in after")
            deps.append(d)
        step.after = tuple(deps)
        reachable = step.ancestors()
        if when is not None and not isinstance(when, Cond):
            raise WorkflowError(f"{who}: when= takes a condition such as wf.input['amount'] > 1000")
        named: list[tuple[str, Step]] = [("when", s) for s in (when.steps if when is not None else ())]
        fields: dict[str, Any] = {}
        for field, value in refs.items():
            if value is _MISSING:
                continue
            found: list[Step] = []
            fields[field] = _mapping(value, field, found)
            named += [(field, s) for s in found]
        for field, s in named:
            if s.workflow is not self:
                raise WorkflowError(
                    f"{who}: {field} refers to {s.python_name} of workflow {s.workflow.name!r}"
                )
            if s is step:
                raise WorkflowError(f"{who}: {field} refers to its own output")
            if s not in reachable:
                raise WorkflowError(
                    f"{who}: {field} refers to {s.python_name}.output, but {s.python_name} is not a (transitive) "
                    f"dependency: add after=[{s.python_name}, ...]"
                )
        step.fields = {
            **({"description": description} if description is not None else {}),
            **({"condition": when.json} if when is not None else {}),
            **step.fields,
            **fields,
        }
        self.steps.append(step)
        return step

    def task(
        self,
        queue: str,
        *,
        key: str | None = None,
        after: Iterable[Step] = (),
        when: Cond | None = None,
        input: Any = _MISSING,
        timeout_seconds: int | None = None,
        retry: Mapping[str, int] | None = None,
        compensation: str | None = None,
        description: str | None = None,
        for_each: Ref | list[Any] | None = None,
        max_items: int | None = None,
        max_parallel: int | None = None,
        tolerance: int | None = None,
    ) -> Callable[[Callable[..., Any]], TaskStep]:
        """Decorator: a TASK step run by the function (on ``queue``); its key is the function's name.
        With ``for_each`` (a reference to an array, or a list), a fan-out: one task per element (its
        input may name ``wf.item`` and ``wf.index``), at most ``max_parallel`` at once, the step's output
        the elements' outputs in order (docs/reference.md, "Fan-out")."""

        def deco(fn: Callable[..., Any]) -> TaskStep:
            step = TaskStep(self, key or fn.__name__, "TASK", fn, queue)
            fan = _fan_out(step, for_each, max_items, max_parallel, tolerance, input)
            step.fields = {
                "queue": queue,
                **({"timeout_seconds": timeout_seconds} if timeout_seconds is not None else {}),
                **({"retry": dict(retry)} if retry is not None else {}),
                **({"compensation": {"queue": compensation}} if compensation is not None else {}),
            }
            self._add(step, after, when, description, {"for_each": fan or _MISSING, "input": input})
            step.fields = _ordered(step.fields, ("description", "condition", "queue", "for_each", "input"))
            return step

        return deco

    def poll(
        self,
        queue: str,
        *,
        interval_ms: int,
        max_rounds: int,
        max_attempts_per_round: int,
        key: str | None = None,
        after: Iterable[Step] = (),
        when: Cond | None = None,
        input: Any = _MISSING,
        timeout_seconds: int | None = None,
        description: str | None = None,
    ) -> Callable[[Callable[..., Any]], TaskStep]:
        """Decorator: a POLL step (the function answers ``{"done": true, ...}`` when it is done)."""

        def deco(fn: Callable[..., Any]) -> TaskStep:
            step = TaskStep(self, key or fn.__name__, "POLL", fn, queue)
            step.fields = {
                "queue": queue,
                "interval_ms": interval_ms,
                "max_rounds": max_rounds,
                "max_attempts_per_round": max_attempts_per_round,
                **({"timeout_seconds": timeout_seconds} if timeout_seconds is not None else {}),
            }
            self._add(step, after, when, description, {"input": input})
            step.fields = _ordered(step.fields, ("description", "condition", "queue", "input"))
            return step

        return deco

    def timer(
        self,
        key: str,
        *,
        seconds: int,
        after: Iterable[Step] = (),
        when: Cond | None = None,
        description: str | None = None,
    ) -> Step:
        """A TIMER step: waits ``seconds`` (durably) once its dependencies are done."""
        step = Step(self, key, "TIMER", key)
        step.fields = {"delay_seconds": seconds}
        return self._add(step, after, when, description, {})

    def signal(
        self,
        key: str,
        *,
        name: str,
        payload_version: str,
        correlation: Ref | str,
        schema: Any = True,
        after: Iterable[Step] = (),
        when: Cond | None = None,
        timeout_seconds: int | None = None,
        description: str | None = None,
    ) -> Step:
        """A SIGNAL step waiting for signal ``name`` (its contract is declared with ``schema``)."""
        contract = {"name": name, "payload_version": payload_version, "schema": schema}
        same = [c for c in self.signals if (c["name"], c["payload_version"]) == (name, payload_version)]
        if same and same[0] != contract:
            raise WorkflowError(
                f"step {key}: signal ({name}, {payload_version}) is declared with another schema"
            )
        step = Step(self, key, "SIGNAL", key)
        step.fields = {"signal": name, "payload_version": payload_version}
        if timeout_seconds is not None:
            step.fields["timeout_seconds"] = timeout_seconds
        self._add(step, after, when, description, {"correlation": correlation})
        step.fields = _ordered(
            step.fields, ("description", "condition", "signal", "payload_version", "correlation")
        )
        if not same:
            self.signals.append(contract)
        return step

    def child(
        self,
        key: str,
        *,
        definition_id: str,
        version: str,
        input: Any = _MISSING,
        after: Iterable[Step] = (),
        when: Cond | None = None,
        description: str | None = None,
        for_each: Ref | list[Any] | None = None,
        max_items: int | None = None,
        max_parallel: int | None = None,
        tolerance: int | None = None,
    ) -> Step:
        """A SUBWORKFLOW step: a child instance of a published version. With ``for_each`` (a reference
        to an array, or a list), a fan-out: one child instance per element (its input may name
        ``wf.item`` and ``wf.index``), at most ``max_parallel`` unfinished at once, the step's output the
        children's outputs in element order (docs/reference.md, "Fan-out")."""
        step = Step(self, key, "SUBWORKFLOW", key)
        fan = _fan_out(step, for_each, max_items, max_parallel, tolerance, input)
        step.fields = {"definition_id": definition_id, "version": version}
        self._add(step, after, when, description, {"for_each": fan or _MISSING, "input": input})
        step.fields = _ordered(
            step.fields, ("description", "condition", "definition_id", "version", "for_each", "input")
        )
        return step

    def trigger(
        self,
        key: str,
        *,
        url: str,
        method: str | None = None,
        headers: Mapping[str, str] | None = None,
        body: Any = _MISSING,
        timeout_seconds: int | None = None,
        after: Iterable[Step] = (),
        when: Cond | None = None,
        description: str | None = None,
    ) -> Step:
        """A TRIGGER step: one outbound HTTP call."""
        step = Step(self, key, "TRIGGER", key)
        step.fields = {
            "url": url,
            **({"method": method} if method is not None else {}),
            **({"headers": dict(headers)} if headers is not None else {}),
            **({"timeout_seconds": timeout_seconds} if timeout_seconds is not None else {}),
        }
        return self._add(step, after, when, description, {"body": body})

    def output(self, mapping: Any) -> None:
        """The workflow's output mapping (references to any of its steps and to its input)."""
        found: list[Step] = []
        value = _mapping(mapping, "output", found)
        for s in found:
            if s.workflow is not self:
                raise WorkflowError(f"output refers to {s.python_name} of workflow {s.workflow.name!r}")
        self._output = value

    # -- the document ------------------------------------------------------------------------
    def document(self) -> dict[str, Any]:
        """The JSON definition document (what ``publish`` sends; the server validates it again)."""
        _check_acyclic(self.steps)
        doc: dict[str, Any] = {"version": self.version}
        if self.description is not None:
            doc["description"] = self.description
        doc["input_schema"] = self.input_schema
        doc["deadline_seconds"] = self.deadline_seconds
        if self.signals:
            doc["signals"] = [dict(c) for c in self.signals]
        doc["steps"] = [
            {
                "key": s.key,
                "kind": s.kind,
                **({"after": [d.key for d in s.after]} if s.after else {}),
                **s.fields,
            }
            for s in self.steps
        ]
        if self._output is not _MISSING:
            doc["output"] = self._output
        return doc

    def publish(self, client: Any) -> dict[str, Any]:
        """Create the definition unless it exists and publish this version unless it is published:
        the same document again is the same version (``Client.ensure_definition``); a changed
        document under a published version is refused (StateConflict: give it a new version)."""
        definition: dict[str, Any] = client.ensure_definition(
            self.name, self.document(), description=self.description
        )
        return definition

    def start(
        self, client: Any, input: Any, *, business_key: str | None = None, idempotency_key: str | None = None
    ) -> Any:
        """Publish (idempotently) and start one instance of this version; returns the StartResult."""
        definition = self.publish(client)
        return client.start_workflow(
            definition["id"], self.version, input, business_key=business_key, idempotency_key=idempotency_key
        )

    def register(self, worker: Any) -> Any:
        """Register the functions of the task (and poll) steps, and their compensations, with a
        ``TaskWorker``; returns the worker. Two steps on one queue must share their function."""
        served: dict[str, Callable[..., Any]] = {}
        for s in self.steps:
            if not isinstance(s, TaskStep):
                continue
            pairs = [(s.queue, s.fn)]
            if s.undo is not None:
                pairs.append((s.fields["compensation"]["queue"], s.undo))
            for queue, fn in pairs:
                if served.get(queue, fn) is not fn:
                    raise WorkflowError(
                        f"step {s.python_name}: queue {queue!r} is served by another function"
                    )
                served[queue] = fn
        for queue, fn in served.items():
            worker.register(queue, fn)
        return worker


def _names_element(value: Any) -> bool:
    if isinstance(value, Ref):
        return value.path == "$.index" or value.path.startswith("$.item")
    if isinstance(value, Mapping):
        return any(_names_element(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_names_element(v) for v in value)
    return False


def _fan_out(
    step: Step,
    for_each: Any,
    max_items: int | None,
    max_parallel: int | None,
    tolerance: int | None,
    input: Any,
) -> dict[str, Any]:
    """A step's ``for_each`` object (empty: not a fan-out, and then its input may not name the element)."""
    fan: dict[str, Any] = {}
    if for_each is not None:
        fan["items"] = for_each
        for name, v in (("max_items", max_items), ("max_parallel", max_parallel), ("tolerance", tolerance)):
            if v is not None:
                fan[name] = v
    elif input is not _MISSING and _names_element(input):
        raise WorkflowError(f"step {step.python_name}: wf.item / wf.index are for a fan-out step (for_each=)")
    return fan


def _ordered(fields: dict[str, Any], first: tuple[str, ...]) -> dict[str, Any]:
    """``fields`` with the ``first`` names (those present) in front, in that order."""
    return {
        **{k: fields[k] for k in first if k in fields},
        **{k: v for k, v in fields.items() if k not in first},
    }


def _check_acyclic(steps: list[Step]) -> None:
    state: dict[Step, int] = {}

    def visit(s: Step, path: list[Step]) -> None:
        state[s] = 1
        for d in s.after:
            if state.get(d) == 1:
                cycle = [*path[path.index(d) :], d] if d in path else [s, d]
                raise WorkflowError("dependency cycle: " + " -> ".join(x.python_name for x in cycle))
            if d not in state:
                visit(d, [*path, d])
        state[s] = 2

    for s in steps:
        if s not in state:
            visit(s, [s])
