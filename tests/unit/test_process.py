"""A long-running process freezes its start-up heap once it has started (``app.process``)."""

from __future__ import annotations

import gc

from app.process import freeze_startup_heap
from web import gunicorn_conf


def _unfreeze_after(fn):
    try:
        return fn()
    finally:
        gc.unfreeze()  # the test process goes on collecting as before


def test_the_start_up_heap_leaves_the_full_collections():
    def check() -> None:
        tracked = len(gc.get_objects())
        frozen = freeze_startup_heap()
        # what was tracked (less start-up garbage) is frozen; a full collection scans what is made after.
        # (gc.get_freeze_count() is not compared with ``frozen``: a frozen object that another thread
        # frees meanwhile leaves the permanent generation, as in a full test run.)
        assert frozen >= tracked // 2
        assert len(gc.get_objects()) < frozen // 10
        made_after = [[i] for i in range(1000)]
        assert len(gc.get_objects()) >= len(made_after)  # new objects are tracked (and collected) as before

    _unfreeze_after(check)


def test_every_gunicorn_worker_freezes_once_its_app_is_loaded(monkeypatch):
    frozen_by_hook = None
    wrapped = []
    # the hook also wraps the worker's SIGTERM handler: not in this test process
    monkeypatch.setattr(gunicorn_conf, "end_long_polls_on_sigterm", wrapped.append)

    def run() -> None:
        nonlocal frozen_by_hook
        gunicorn_conf.post_worker_init("worker")
        frozen_by_hook = gc.get_freeze_count()

    _unfreeze_after(run)
    assert frozen_by_hook and frozen_by_hook > 1000
    assert wrapped == ["worker"]
