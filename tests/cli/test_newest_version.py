"""`ledgerflow workflows start NAME` starts the newest published version (issue 45: it started v1 after
v2 was published, although --help says the default is the newest, and the hint printed after publishing
v2 then started v1)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ledgerflow.cli import main
from ledgerflow.client import Client
from tests.web.wf_live import author_token, wf_server  # noqa: F401

DOC = {
    "version": "v1",
    "input_schema": {"type": "object"},
    "deadline_seconds": 7200,
    "steps": [{"key": "wait", "kind": "TIMER", "delay_seconds": 3600}],
}


def test_start_without_version_takes_the_newest_and_the_publish_hint_does_too(wf_server, tmp_path):  # noqa: F811
    token = author_token("nv")
    env = {"LEDGERFLOW_URL": wf_server, "LEDGERFLOW_TOKEN": token}
    path = tmp_path / "longwait.json"
    for version in ("v1", "v2", "v10"):  # v10 sorts before v2 as text: the newest is the last published
        path.write_text(json.dumps({**DOC, "version": version}))
        published = CliRunner().invoke(main, ["definitions", "publish", str(path)], env=env)
        assert published.exit_code == 0, published.output
        hint = published.stdout.splitlines()[-1].split(": ", 1)[1]
        assert hint.startswith("ledgerflow workflows start longwait")
        started = CliRunner().invoke(main, hint.split()[1:4] + ["--input", "{}"], env=env)
        assert started.exit_code == 0, started.output
        assert f"(longwait {version})" in started.stdout
        wid = started.stdout.split()[2]
        assert Client(wf_server, token).get_workflow(wid).version == version
    listed = CliRunner().invoke(main, ["definitions", "list"], env=env)
    assert "versions: v10 (newest), v2, v1" in listed.stdout
