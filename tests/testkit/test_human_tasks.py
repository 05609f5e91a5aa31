"""The tutorial's part 7 (human tasks) as it is written: its TASK step publishes, and a person claims the
step's task in the console and completes it with a JSON output, which the workflow takes as the step's
output (the test kit's server, logged in to its console as the tutorial says)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.testkit.test_paused_views import _console
from tests.web.test_console import _csrf

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial.md"


def _section_step() -> dict:
    section = TUTORIAL.read_text().split("## 7. Human tasks")[1].split("\n## ")[0]
    assert "/console/tasks" in section and "Claim next on" in section
    return json.loads(section.split("```json\n")[1].split("```")[0])


def test_a_person_does_the_tutorial_s_human_task_in_the_console(ledgerflow_env):
    env = ledgerflow_env
    step = _section_step()
    document = {
        "version": "v1",
        "input_schema": {"type": "object"},
        "deadline_seconds": 2 * 86400,
        "steps": [step],
        "output": {"approved": "$.steps.approve.output.approved"},
    }
    wid = env.start(env.publish("refunds", document), {"order_id": "A-1", "amount": 12})
    console = _console(env)
    page = console.get("/console/tasks")
    assert f"Claim next on {step['queue']}" in page.text
    claimed = console.post(
        "/console/tasks/claim", data={"queue": step["queue"], "csrf_token": _csrf(page.content)}
    )
    assert claimed.status_code == 302
    page = console.get("/console/tasks")
    task_id = re.search(r"/console/tasks/([0-9a-f]{32})/complete", page.text).group(1)
    completed = console.post(
        f"/console/tasks/{task_id}/complete",
        data={"output": '{"approved": true}', "csrf_token": _csrf(page.content)},
    )
    assert completed.status_code == 302
    done = env.wait(wid)
    assert (done.state, done.output) == ("SUCCEEDED", {"approved": True})
    assert env.client.get_workflow_step(wid, "approve").input == {"order": "A-1", "amount": 12}
