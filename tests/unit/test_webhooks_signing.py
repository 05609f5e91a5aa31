"""Standard Webhooks signing (X-EVENT): the published test vector, two signatures during a rotation,
the SDK's verifier, and the delivered body's shape. No I/O."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from app.integrations.subscriptions import new_secret
from app.integrations.webhooks import payload_of, signature
from ledgerflow.client import WebhookVerificationError, verify_webhook

VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def test_the_standard_webhooks_test_vector() -> None:
    at = datetime.fromtimestamp(1614265330, UTC)
    sig = signature([VECTOR_SECRET], "msg_p5jXN8AQM9LWM0D4loKWxJek", at, '{"test": 2432232314}')
    assert sig == "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_rotation_signs_with_both_and_either_verifies() -> None:
    old, new = new_secret(), new_secret()
    assert old.startswith("whsec_") and old != new
    ev = SimpleNamespace(
        event_id="e" * 32,
        event_type="workflow.started",
        seq=1,
        instance_id="i" * 32,
        event_at=datetime.now(UTC),
        body='{"trace_id": "t"}',
    )
    body = payload_of(ev)
    now = datetime.now(UTC)
    headers = {
        "webhook-id": ev.event_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature([new, old], ev.event_id, now, body),
    }
    assert len(headers["webhook-signature"].split(" ")) == 2
    for s in (old, new):
        event = verify_webhook(s, body.encode(), headers)
        assert event["id"] == ev.event_id and event["data"] == {"trace_id": "t"} and event["seq"] == 1
    with pytest.raises(WebhookVerificationError):
        verify_webhook(new_secret(), body, headers)
    with pytest.raises(WebhookVerificationError):  # a changed body does not verify
        verify_webhook(new, body.replace("workflow.started", "workflow.failed"), headers)
    stale = {**headers, "webhook-timestamp": str(int(now.timestamp()) - 3600)}
    with pytest.raises(WebhookVerificationError):  # a replay an hour later is refused
        verify_webhook(new, body, stale)
