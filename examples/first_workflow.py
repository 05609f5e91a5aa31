"""Your first workflow: define it, run a task worker in Python, watch it finish.

    .venv/bin/python examples/first_workflow.py

Needs `make run` in another shell and LEDGERFLOW_TOKEN (docs/tutorial.md shows how to get one);
the server address is LEDGERFLOW_URL (default http://127.0.0.1:5000). Safe to run again.
"""

from __future__ import annotations

from ledgerflow.client import Client, Task, TaskWorker, run_script

# A definition: two TASK steps, the second after the first. Strings like "$.input.name" and
# "$.steps.greet.output.text" are replaced by the values they name.
DEFINITION = {
    "version": "v1",
    "description": "Greet someone, then write them a note.",
    "input_schema": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
    "deadline_seconds": 600,
    "steps": [
        {"key": "greet", "kind": "TASK", "queue": "hello.greet", "input": {"name": "$.input.name"}},
        {
            "key": "note",
            "kind": "TASK",
            "queue": "hello.note",
            "after": ["greet"],
            "input": {"greeting": "$.steps.greet.output.text"},
        },
    ],
    "output": {"greeting": "$.steps.greet.output.text", "note": "$.steps.note.output.text"},
}

client = Client()  # LEDGERFLOW_URL and LEDGERFLOW_TOKEN
worker = TaskWorker(client, wait_seconds=1)  # a script: its claims wait at most 1 s, so it exits at once


@worker.task("hello.greet")  # your code: one function per queue; its return value is the step's output
def greet(task: Task) -> dict:
    return {"text": f"Hello, {task.input['name']}!"}


@worker.task("hello.note")
def note(task: Task) -> dict:
    return {"text": f"{task.input['greeting']} Your first workflow ran."}


def main() -> None:
    definition = client.ensure_definition("hello", DEFINITION)  # create + publish v1 unless done before
    print(f"definition {definition['name']} ({definition['id']})")
    with worker.in_background():
        started = client.start_workflow(definition["id"], "v1", {"name": "Ada"})
        print(f"started workflow {started.instance.id}")
        done = client.wait_for_workflow(started.instance.id, progress=print)
    print(f"{done.state}: {done.output}")


if __name__ == "__main__":
    run_script(main)
