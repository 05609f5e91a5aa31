"""SDK calls for workflow events, event subscriptions, webhook deliveries and automation rules
(X-EVENT, X-AUTO), mixed into ``ledgerflow.client.Client``; and ``verify_webhook``, the receiver's
side of a signed delivery (Standard Webhooks, through the ``standardwebhooks`` library).

Answers are the API's ``data`` objects as dicts (their fields are documented in /openapi.json)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from ledgerflow.sdk_types import _data

__all__ = ["IntegrationsMixin", "WebhookVerificationError", "verify_webhook"]


def verify_webhook(secret: str, body: bytes | str, headers: Mapping[str, str]) -> dict[str, Any]:
    """Check a delivery's ``webhook-signature`` (any of its ``v1,`` signatures: two during a secret
    rotation) over ``webhook-id.webhook-timestamp.body`` and the timestamp (5 minutes tolerance);
    returns the parsed event or raises ``WebhookVerificationError``. Deduplicate on ``webhook-id``."""
    event: dict[str, Any] = Webhook(secret).verify(body, dict(headers))
    return event


class IntegrationsMixin:
    request: Any  # provided by Client

    # -- events ------------------------------------------------------------------------------
    def list_workflow_events_page(
        self, workflow_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return _data(self.request("GET", f"/v1/workflows/{workflow_id}/events", params=params))

    def list_workflow_events(self, workflow_id: str, *, page_size: int = 100) -> Iterator[dict[str, Any]]:
        """Every event of a workflow in sequence order."""
        cursor = None
        while True:
            page = self.list_workflow_events_page(workflow_id, limit=page_size, cursor=cursor)
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    # -- subscriptions -----------------------------------------------------------------------
    def create_subscription(
        self,
        url: str,
        event_types: list[str],
        *,
        definition_id: str | None = None,
        description: str = "",
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """The new subscription with its ``secret`` (shown only now)."""
        body = {"url": url, "event_types": event_types, "description": description}
        if definition_id:
            body["definition_id"] = definition_id
        return _data(
            self.request("POST", "/v1/event-subscriptions", body=body, idempotency_key=idempotency_key)
        )

    def list_subscriptions(self, *, limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return _data(self.request("GET", "/v1/event-subscriptions", params=params))

    def get_subscription(self, subscription_id: str) -> dict[str, Any]:
        return _data(self.request("GET", f"/v1/event-subscriptions/{subscription_id}"))

    def update_subscription(self, subscription_id: str, **changes: Any) -> dict[str, Any]:
        """``url``, ``event_types``, ``definition_id``, ``description``."""
        return _data(self.request("PATCH", f"/v1/event-subscriptions/{subscription_id}", body=changes))

    def disable_subscription(self, subscription_id: str, reason: str | None = None) -> dict[str, Any]:
        return _data(
            self.request(
                "POST", f"/v1/event-subscriptions/{subscription_id}/disable", body={"reason": reason}
            )
        )

    def enable_subscription(self, subscription_id: str, reason: str | None = None) -> dict[str, Any]:
        return _data(
            self.request("POST", f"/v1/event-subscriptions/{subscription_id}/enable", body={"reason": reason})
        )

    def delete_subscription(self, subscription_id: str) -> dict[str, Any]:
        return _data(self.request("DELETE", f"/v1/event-subscriptions/{subscription_id}"))

    def rotate_subscription_secret(
        self, subscription_id: str, *, grace_seconds: int | None = None
    ) -> dict[str, Any]:
        """The subscription with its new ``secret``; the previous one also signs for ``grace_seconds``."""
        body = {} if grace_seconds is None else {"grace_seconds": grace_seconds}
        return _data(
            self.request("POST", f"/v1/event-subscriptions/{subscription_id}/rotate-secret", body=body)
        )

    def list_deliveries(
        self, subscription_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return _data(
            self.request("GET", f"/v1/event-subscriptions/{subscription_id}/deliveries", params=params)
        )

    def redeliver(self, subscription_id: str, delivery_id: str, reason: str | None = None) -> dict[str, Any]:
        return _data(
            self.request(
                "POST",
                f"/v1/event-subscriptions/{subscription_id}/deliveries/{delivery_id}/redeliver",
                body={"reason": reason},
            )
        )

    def redeliver_since(
        self, subscription_id: str, since: datetime, *, include_succeeded: bool = False, rate: int = 20
    ) -> dict[str, Any]:
        body = {"since": since.isoformat(), "include_succeeded": include_succeeded, "rate": rate}
        return _data(self.request("POST", f"/v1/event-subscriptions/{subscription_id}/redeliver", body=body))

    # -- automation rules --------------------------------------------------------------------
    def create_automation_rule(
        self,
        name: str,
        event_type: str,
        action: dict[str, Any],
        *,
        definition_id: str | None = None,
        conditions: list[dict[str, Any]] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "name": name,
            "event_type": event_type,
            "action": action,
            "conditions": conditions or [],
        }
        if definition_id:
            body["definition_id"] = definition_id
        return _data(self.request("POST", "/v1/automation-rules", body=body, idempotency_key=idempotency_key))

    def list_automation_rules(self, *, limit: int = 100, cursor: str | None = None) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return _data(self.request("GET", "/v1/automation-rules", params=params))

    def get_automation_rule(self, rule_id: str) -> dict[str, Any]:
        return _data(self.request("GET", f"/v1/automation-rules/{rule_id}"))

    def set_automation_rule_enabled(self, rule_id: str, enabled: bool) -> dict[str, Any]:
        verb = "enable" if enabled else "disable"
        return _data(self.request("POST", f"/v1/automation-rules/{rule_id}/{verb}", body={}))

    def list_automation_executions(
        self, rule_id: str, *, limit: int = 100, cursor: str | None = None
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        return _data(self.request("GET", f"/v1/automation-rules/{rule_id}/executions", params=params))
