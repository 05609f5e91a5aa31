"""psycopg's wait in the gevent web process (web/green_wait.py, installed by gunicorn.conf.py) keeps
psycopg's contract and gevent's cooperation: statements and pipelines answer, a greenlet waiting for
PostgreSQL lets the others run, a backend killed under a waiting statement raises instead of hanging,
a wait with a timeout ends, LISTEN / NOTIFY (the long-poll claims' wake-ups) arrive. Run in a child
process patched by gevent as gunicorn's worker is; orderings, not timings, are asserted."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from sqlalchemy import make_url

SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()
    import sys, gevent, psycopg, psycopg.waiting
    from web import green_wait
    green_wait.install()
    assert psycopg.waiting.wait is green_wait.wait
    dsn = sys.argv[1]

    conn = psycopg.connect(dsn, autocommit=True)
    assert conn.execute("SELECT %s::int + 1", [41]).fetchone() == (42,)
    with conn.pipeline():
        a = conn.execute("SELECT 1")
        b = conn.execute("SELECT 'two'")
    assert a.fetchone() == (1,) and b.fetchone() == ("two",)
    print("statements and pipelines")

    order = []
    def slow():
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("SELECT pg_sleep(2)")
        order.append("slow")
    def quick():
        with psycopg.connect(dsn, autocommit=True) as c:
            for i in range(20):
                c.execute("SELECT %s", [i])
        order.append("quick")
    g1 = gevent.spawn(slow); gevent.sleep(0.2); g2 = gevent.spawn(quick)
    gevent.joinall([g1, g2], raise_error=True)
    assert order == ["quick", "slow"], order
    print("a waiting greenlet lets the others run")

    victim = psycopg.connect(dsn, autocommit=True)
    pid = victim.info.backend_pid
    raised = []
    def doomed():
        try:
            victim.execute("SELECT pg_sleep(60)")
        except psycopg.OperationalError as exc:
            raised.append(type(exc).__name__)
    g = gevent.spawn(doomed); gevent.sleep(0.3)
    conn.execute("SELECT pg_terminate_backend(%s)", [pid])
    g.join(30)
    assert raised, "the killed backend's statement did not raise"
    print("a killed backend raises")

    listener = psycopg.connect(dsn, autocommit=True)
    listener.execute("LISTEN green_wait_test")
    assert list(listener.notifies(timeout=0.3)) == []
    print("a wait with a timeout ends")
    got = []
    def listen():
        for n in listener.notifies(timeout=30, stop_after=1):
            got.append(n.payload)
    g = gevent.spawn(listen); gevent.sleep(0.2)
    conn.execute("NOTIFY green_wait_test, 'hello'")
    g.join(30)
    assert got == ["hello"], got
    print("notifications arrive")
    """
)


def test_psycopgs_wait_under_gevent_keeps_its_contract():
    url = make_url(os.environ["DATABASE_URL"]).set(drivername="postgresql")
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, url.render_as_string(hide_password=False)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.getcwd(),
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[:5] == [
        "statements and pipelines",
        "a waiting greenlet lets the others run",
        "a killed backend raises",
        "a wait with a timeout ends",
        "notifications arrive",
    ], out.stdout
