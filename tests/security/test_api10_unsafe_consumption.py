"""OWASP API10:2023 Unsafe Consumption of APIs, the SDK side: path segments are percent-encoded (an
id cannot address another resource), and a plain-http base URL to another machine warns that the
bearer token would travel unencrypted."""

from __future__ import annotations

import warnings

import httpx
import pytest

from ledgerflow.client import Client, InsecureTransportWarning, NotFound


def test_path_segments_are_percent_encoded():
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        return httpx.Response(404, json={"code": "NOT_FOUND", "message": "no"})

    client = Client("http://127.0.0.1:5999", "lf_x", transport=httpx.MockTransport(handler), retries=0)
    with pytest.raises(NotFound):
        client.get_workflow("../../api/workflows/engine/jobs?x=1#y")
    with pytest.raises(NotFound):
        client.get_workflow_step("a" * 32, "k/../../x")
    assert seen == [
        "/v1/workflows/..%2F..%2Fapi%2Fworkflows%2Fengine%2Fjobs%3Fx%3D1%23y",
        "/v1/workflows/" + "a" * 32 + "/steps/k%2F..%2F..%2Fx",
    ]


@pytest.mark.parametrize(
    ("url", "warns"),
    [
        ("http://api.example.com", True),
        ("http://10.0.0.5:5000", True),
        ("https://api.example.com", False),
        ("http://127.0.0.1:5000", False),
        ("http://localhost:5000", False),
        ("http://web.localhost", False),
    ],
)
def test_plain_http_to_another_machine_warns(url, warns):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Client(url, "lf_x").close()
    assert any(issubclass(w.category, InsecureTransportWarning) for w in caught) is warns
