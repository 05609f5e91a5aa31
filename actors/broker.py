"""The Dramatiq broker. With REDIS_URL unset there is no broker: pools simply poll."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import AgeLimit, Callbacks, Retries, ShutdownNotifications, TimeLimit

from app.config import get_settings


def build_broker() -> dramatiq.Broker:
    settings = get_settings()
    middleware = [AgeLimit(), TimeLimit(), ShutdownNotifications(), Callbacks(), Retries(max_retries=0)]
    if not settings.redis_url:
        return StubBroker(middleware=middleware)
    return RedisBroker(
        url=settings.redis_url,
        namespace=settings.redis_namespace,
        middleware=middleware,
        socket_connect_timeout=1,
        socket_timeout=5,
        health_check_interval=10,
    )


broker = build_broker()
dramatiq.set_broker(broker)


def has_redis() -> bool:
    return isinstance(broker, RedisBroker)
