"""psycopg's wait under gevent: psycopg's own (gevent's ``select.poll`` emulation) against
``web.green_wait`` (the kernel asked first without blocking, gevent's hub only when the socket is not
ready), in one gevent-patched process on ``DATABASE_URL``'s server: CPU per call of one statement, two
in a row, and two or three in a pipeline, the best of ``--rounds`` interleaved rounds (a shared
machine's noise only ever adds). Numbers, not assertions; not a test.

    DATABASE_URL=postgresql://... python -m bench.green_wait [--rounds 12] [--n 300]"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402 - after the patching, on purpose (as gunicorn.conf.py)
import os  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402

import psycopg  # noqa: E402
import psycopg.waiting as waiting  # noqa: E402
from sqlalchemy import make_url  # noqa: E402

from web import green_wait  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.green_wait")
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--n", type=int, default=300)
    a = p.parse_args()
    url = make_url(os.environ["DATABASE_URL"]).set(drivername="postgresql")
    conn = psycopg.connect(url.render_as_string(hide_password=False))
    c1, c2, c3 = conn.cursor(), conn.cursor(), conn.cursor()
    q1, q2 = "SELECT %(a)s::int + 1", "SELECT %(b)s::text || 'x'"

    def one() -> None:
        c1.execute(q2, {"b": "y"})
        c1.fetchall()

    def two() -> None:
        c2.execute(q1, {"a": 1})
        c1.execute(q2, {"b": "y"})
        c1.fetchall()

    def pipeline2() -> None:
        with conn.pipeline():
            c2.execute(q1, {"a": 1})
            c1.execute(q2, {"b": "y"})
        c1.fetchall()

    def pipeline3() -> None:
        with conn.pipeline():
            c3.execute(q1, {"a": 2})
            c2.execute(q1, {"a": 1})
            c1.execute(q2, {"b": "y"})
        c1.fetchall()

    waits: dict[str, Callable] = {"psycopg's wait": waiting.wait, "web.green_wait": green_wait.wait}
    calls = {
        "one statement": one,
        "two in a row": two,
        "two in a pipeline": pipeline2,
        "three in a pipeline": pipeline3,
    }
    best: dict[tuple[str, str], float] = {}
    for _ in range(a.rounds):
        for wname, fn in waits.items():
            waiting.wait = fn
            for cname, call in calls.items():
                c0 = time.thread_time()
                for _ in range(a.n):
                    call()
                us = 1e6 * (time.thread_time() - c0) / a.n
                best[(cname, wname)] = min(best.get((cname, wname), float("inf")), us)
            conn.rollback()
    print(f"CPU µs per call, gevent-patched, best of {a.rounds} rounds of {a.n}")
    print("| call | " + " | ".join(waits) + " |\n|---|---|---|")
    for cname in calls:
        print(f"| {cname} | " + " | ".join(f"{best[(cname, w)]:.0f}" for w in waits) + " |")


if __name__ == "__main__":
    main()
