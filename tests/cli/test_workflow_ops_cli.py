"""``ledgerflow workflows rerun|batch|failure-groups`` (issue 47) against the live API's database."""

from __future__ import annotations

import json

from click.testing import CliRunner

from app.auth import ALL_SCOPES, create_credential
from app.db import transaction
from ledgerflow.cli import main
from tests.web.test_workflow_ops import CHAIN, _run_until_c_fails
from tests.web.wf_live import wf_server  # noqa: F401
from tests.web.wf_ops import Ops, ops  # noqa: F401


def cli(token: str, *args: str):
    return CliRunner().invoke(main, list(args), env={"LEDGERFLOW_TOKEN": token}, prog_name="ledgerflow")


def _token(ops: Ops) -> str:  # noqa: F811
    with transaction() as conn:
        return create_credential(conn, namespace=ops.ns.name, name="cli-op", scopes=sorted(ALL_SCOPES)).token


def test_rerun_groups_and_batch_from_the_shell(ops: Ops):  # noqa: F811
    token = _token(ops)
    wid = ops.start(ops.define(CHAIN))
    _run_until_c_fails(ops, wid)
    groups = cli(token, "workflows", "failure-groups", "--json")
    assert groups.exit_code == 0, groups.output
    [g] = json.loads(groups.stdout)["groups"]
    assert (g["step_key"], g["count"], g["message_group"]) == ("c", 1, "card declined")
    preview = cli(token, "workflows", "batch", "rerun", "--error-group", "card declined", "--from-step", "c",
                  "--reason", "fixed", "--preview", "--json")  # fmt: skip
    assert preview.exit_code == 0, preview.output
    assert json.loads(preview.stdout)["submitted_ids"] == [wid]
    r = cli(token, "workflows", "rerun", wid, "--from-step", "c", "--reason", "fixed", "--yes", "--json")
    assert r.exit_code == 0, r.output
    done = json.loads(r.stdout)
    assert done["rerun_of"] == wid and done["copied_steps"] == ["a", "b"]
    r = cli(token, "workflows", "rerun", done["instance"]["id"], "--reason", "again", "--yes")
    assert r.exit_code == 1 and "FAILED or CANCELLED" in r.output  # the rerun runs: refused
    r = cli(
        token,
        "workflows",
        "batch",
        "cancel",
        "--id",
        done["instance"]["id"],
        "--reason",
        "stop",
        "--yes",
        "--json",
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["submitted"] == 1
