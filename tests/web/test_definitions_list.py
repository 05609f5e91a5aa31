"""Finding definitions again: GET /v1/workflow-definitions (exact name filter, cursor pages bound to
the filter) and GET /v1/workflow-definitions/{id}/versions; not-found answers name what was asked
for; a 403 names the switch that grants the scope; each problem `type` resolves to /docs/problems."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import httpx
import pytest

from app.auth import Scope
from ledgerflow.client import Client, InvalidArgument, NotFound, PermissionDenied
from tests.web.wf_live import wf_ns, wf_server  # noqa: F401
from web.problems import PROBLEMS

ROOT = Path(__file__).resolve().parents[2]
DOC = {
    "version": "v1",
    "input_schema": {},
    "deadline_seconds": 600,
    "steps": [{"key": "t", "kind": "TIMER", "delay_seconds": 300}],
}


def test_list_definitions_by_name_and_pages(wf_ns):  # noqa: F811
    c = wf_ns.client()
    tag = uuid.uuid4().hex[:6]
    made = [c.create_definition(f"find-{tag}-{i}") for i in range(3)]
    c.publish_version(made[1]["id"], DOC)
    page1 = c.list_definitions(limit=2)
    assert [d["id"] for d in page1.items] == [made[2]["id"], made[1]["id"]] and page1.next_cursor
    page2 = c.list_definitions(limit=2, cursor=page1.next_cursor)
    assert [d["id"] for d in page2.items] == [made[0]["id"]] and page2.next_cursor is None
    found = c.find_definition(f"find-{tag}-1")
    assert found["id"] == made[1]["id"] and [v["version"] for v in found["versions"]] == ["v1"]
    assert c.find_definition(f"find-{tag}-9") is None
    with pytest.raises(InvalidArgument) as e:  # a cursor only works for the filter it came from
        c.list_definitions(name=f"find-{tag}-1", cursor=page1.next_cursor)
    assert e.value.errors == [
        {"field": "cursor", "message": "cursor is malformed or belongs to another query"}
    ]
    with pytest.raises(InvalidArgument) as e:
        c.list_definitions(name=" padded")
    assert e.value.errors[0]["field"] == "name"
    # another namespace sees none of them
    other = Client(wf_ns.url, _token(wf_ns.url, Scope.DEFINITIONS_READ))
    assert other.list_definitions().items == []


def _token(url: str, *scopes: str) -> str:
    from app.auth import create_credential
    from app.db import transaction

    with transaction() as conn:
        return create_credential(
            conn, namespace="other-" + uuid.uuid4().hex[:6], name="r", scopes=list(scopes)
        ).token


def test_versions_list_and_not_found_names_what_was_asked(wf_ns):  # noqa: F811
    c = wf_ns.client()
    d = c.create_definition("versions-" + uuid.uuid4().hex[:6])
    with pytest.raises(NotFound) as e:
        c.get_version(d["id"], "v1")
    assert e.value.message == f"definition {d['id']} has no version 'v1'; published versions: none yet"
    for v in ("v1", "v2", "v3"):
        c.publish_version(d["id"], {**DOC, "version": v, "description": f"release {v}"})
    page = c.list_definition_versions(d["id"], limit=2)
    assert [v["version"] for v in page.items] == ["v3", "v2"] and page.next_cursor
    assert page.items[0]["description"] == "release v3" and "document" not in page.items[0]
    rest = c.list_definition_versions(d["id"], cursor=page.next_cursor)
    assert [v["version"] for v in rest.items] == ["v1"] and rest.next_cursor is None
    with pytest.raises(NotFound) as e:
        c.get_version(d["id"], "v9")
    assert e.value.message == f"definition {d['id']} has no version 'v9'; published versions: v1, v2, v3"
    with pytest.raises(NotFound) as e:  # a start names the version too
        c.start_workflow(d["id"], "v9", {})
    assert e.value.message == f"definition {d['id']} has no version 'v9'; published versions: v1, v2, v3"
    missing = uuid.uuid4().hex
    for call in (lambda: c.get_definition(missing), lambda: c.list_definition_versions(missing)):
        with pytest.raises(NotFound) as e:
            call()
        assert e.value.message == (
            f"definition '{missing}' not found in this namespace "
            "(GET /v1/workflow-definitions?name=... finds a definition by name)"
        )


def test_403_names_the_switch_and_problem_types_resolve(wf_ns):  # noqa: F811
    worker = wf_ns.client("worker")  # tasks:work only
    with pytest.raises(PermissionDenied) as e:
        worker.list_definitions()
    assert e.value.message == (
        "this credential lacks the permission definitions:read (granted by --workflow-access): "
        "issue a credential with `ledgerflow credentials create` and that switch"
    )
    r = httpx.get(wf_ns.url + "/v1/workflows", headers={"Authorization": "Bearer " + wf_ns.tokens["worker"]})
    body = r.json()
    assert r.status_code == 403 and "workflows:read (granted by --workflow-run-access or" in body["message"]
    assert body["type"] == wf_ns.url + "/docs/problems#permission-denied"
    page = httpx.get(body["type"].split("#")[0])
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for p in PROBLEMS:
        assert f'<section id="{p.slug}">' in page.text, p.code
    auth = {"Authorization": "Bearer " + wf_ns.tokens["worker"]}
    bad = httpx.get(wf_ns.url + "/v1/workflow-definitions?limit=0", headers=auth).json()
    assert bad["code"] == "PERMISSION_DENIED"


def test_every_error_code_is_documented():
    from app import errors
    from ledgerflow.sdk_types import _BY_CODE

    codes = {c.code for c in vars(errors).values() if isinstance(c, type) and hasattr(c, "code")}
    codes |= set(_BY_CODE)
    documented = {p.code for p in PROBLEMS}
    assert codes <= documented, codes - documented
    reference = (ROOT / "docs" / "reference.md").read_text()
    for p in PROBLEMS:
        assert f"| `{p.code}` | {p.status} |" in reference, p.code


def test_user_docs_carry_no_internal_rule_codes():
    rule = re.compile(r"\b(?:[WXL]-[A-Z]+(?:-\d+)?|seed \d+|SPEC)\b")
    for doc in ("README.md", "docs/tutorial.md", "docs/reference.md", "docs/operations.md"):
        found = rule.findall((ROOT / doc).read_text())
        assert found == [], f"{doc}: {found}"
