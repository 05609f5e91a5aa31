"""Your first workflow: declare it in Python next to its task functions, run them, watch it finish.

    .venv/bin/python examples/first_workflow.py

Needs `make run` in another shell and LEDGERFLOW_TOKEN (docs/tutorial.md shows how to get one);
the server address is LEDGERFLOW_URL (default http://127.0.0.1:5000). Safe to run again.
The same workflow as a JSON document: examples/first_workflow.json (a test checks they are equal).
"""

from __future__ import annotations

from ledgerflow.client import Client, Task, TaskWorker, run_script
from ledgerflow.workflow import Workflow

# A workflow: two TASK steps, the second after the first. `wf.input["name"]` and
# `greet.output["text"]` name values of the running workflow; each step's function is its code.
wf = Workflow(
    "hello",
    version="v1",
    description="Greet someone, then write them a note.",
    input_schema={"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}},
    deadline_seconds=600,
)


@wf.task("hello.greet", input={"name": wf.input["name"]})  # its return value is the step's output
def greet(task: Task) -> dict:
    return {"text": f"Hello, {task.input['name']}!"}


@wf.task("hello.note", after=[greet], input={"greeting": greet.output["text"]})
def note(task: Task) -> dict:
    return {"text": f"{task.input['greeting']} Your first workflow ran."}


wf.output({"greeting": greet.output["text"], "note": note.output["text"]})


def main() -> None:
    client = Client()  # LEDGERFLOW_URL and LEDGERFLOW_TOKEN
    definition = wf.publish(client)  # create + publish v1 unless done before (the same document)
    print(f"definition {definition['name']} ({definition['id']})")
    worker = wf.register(TaskWorker(client, wait_seconds=1))  # greet and note, on their queues
    with worker.in_background():
        started = client.start_workflow(definition["id"], "v1", {"name": "Ada"})
        print(f"started workflow {started.instance.id}")
        done = client.wait_for_workflow(started.instance.id, progress=print)
    print(f"{done.state}: {done.output}")


if __name__ == "__main__":
    run_script(main)
