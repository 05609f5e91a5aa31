"""Observability: Prometheus metrics (``metrics``, ``ledger_metrics``), OpenTelemetry
traces (``tracing``, off unless configured) and structured logs (``logs``).

Every hook on a hot path is a cached label lookup plus one increment, or a module-level boolean
check when the feature is off; nothing here ever raises into the caller."""
