"""OWASP API5:2023 Broken Function Level Authorization: the platform-wide views need a platform-wide
operator; tenant credentials reach no operator function at all."""

from __future__ import annotations

import httpx
import pytest

from tests.security.test_api1_broken_object_level_authorization import PREFIX, _operator


@pytest.mark.parametrize("path", ["/jobs/runtime-status"])
def test_platform_views_need_a_platform_operator(wf_ns, path):
    scoped = _operator(wf_ns.name, platform=False)
    r = httpx.get(wf_ns.url + PREFIX + path, headers=scoped)
    assert r.status_code == 403 and "--platform" in r.json()["message"]
    assert (
        httpx.get(wf_ns.url + PREFIX + path, headers=_operator(wf_ns.name, platform=True)).status_code == 200
    )


@pytest.mark.parametrize("path", ["/jobs", "/jobs/summary", "/jobs/runtime-status", "/jobs/failure-clusters"])
def test_tenant_credentials_reach_no_operator_function(wf_ns, path):
    for who in ("all", "worker", "start_only"):
        r = httpx.get(wf_ns.url + PREFIX + path, headers={"Authorization": f"Bearer {wf_ns.tokens[who]}"})
        assert r.status_code == 403, (who, r.text)
