"""Integrations above the workflow engine (ARCHITECTURE.md): today the schedules (X-SCHED)."""
