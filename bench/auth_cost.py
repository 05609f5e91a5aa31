"""CPU of one request's authentication in a web process: a read of the token's credential (a pooled
connection in autocommit and one statement, what every request paid before issue 27's principal cache)
against the answer this process kept (``app.auth.authenticate_kept`` while ``web.listener`` hears
credential changes). Interleaved rounds in one process, CPU of this thread (``time.thread_time``): a
shared machine's drift affects both alike. Numbers, not assertions; not a test.

    DATABASE_URL=postgresql://... python -m bench.auth_cost [--rounds 15] [--n 300]"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

from app.auth import Principal, Scope, authenticate, authenticate_kept, create_credential, principals
from app.db import get_engine, transaction
from app.settings import get_settings
from bench.run import scratch_database
from web.auth import autocommit_connection
from web.listener import listener


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.auth_cost")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--n", type=int, default=300)
    a = p.parse_args()
    with scratch_database("lf_auth_cost") as url:
        os.environ["DATABASE_URL"] = url
        get_settings.cache_clear()
        with transaction() as conn:
            token = create_credential(conn, namespace="bench", name="a", scopes=[Scope.TASKS_WORK]).token
        listener.ensure_started()
        while not principals.hears(url):
            time.sleep(0.05)

        def read() -> Principal | None:
            with autocommit_connection() as conn:
                return authenticate(conn, token)

        def kept() -> Principal | None:
            return authenticate_kept(autocommit_connection, url, token)

        ways: dict[str, Callable[[], Principal | None]] = {"read": read, "kept": kept}
        cpu: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(a.rounds):
            for name, way in ways.items():
                t = time.thread_time()
                for _ in range(a.n):
                    way()
                cpu[name].append((time.thread_time() - t) / a.n * 1e6)
        print(f"CPU per authentication (µs; {a.rounds} interleaved rounds of {a.n})")
        for name, values in cpu.items():
            print(f"  {name:5} min {min(values):8.1f}   median {statistics.median(values):8.1f}")
        get_engine().dispose()


if __name__ == "__main__":
    main()
