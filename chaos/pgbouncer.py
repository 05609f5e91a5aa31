"""A private PgBouncer (Debian's ``pgbouncer`` package, 1.18) in transaction mode in front of a
PostgreSQL server, for the fault suite's run through a pooler (tests/chaos/test_pgbouncer.py,
``python -m chaos --pgbouncer``): a generated config on a free local port, trust authentication for
the server URL's user, stopped with the context manager."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import make_url

from chaos.harness import free_port, wait_until


def binary() -> str | None:
    """The pgbouncer executable (Debian installs it in /usr/sbin), or None."""
    found = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    return found if os.access(found, os.X_OK) else None


def config(server_url: str, port: int, workdir: Path) -> str:
    url = make_url(server_url)
    host = url.query.get("host") or url.host or "127.0.0.1"  # a unix socket directory works too
    return f"""[databases]
* = host={host} port={url.port or 5432}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {workdir / "users.txt"}
admin_users = {url.username or "postgres"}
pool_mode = transaction
max_client_conn = 1000
default_pool_size = 40
logfile = {workdir / "pgbouncer.log"}
"""


@contextmanager
def running(server_url: str) -> Iterator[str]:
    """Start PgBouncer in front of ``server_url``'s server; yields the server URL through it."""
    exe = binary()
    if exe is None:
        raise FileNotFoundError("pgbouncer is not installed (apt-get install -y pgbouncer)")
    url = make_url(server_url)
    workdir = Path(tempfile.mkdtemp(prefix="lf-pgbouncer-"))
    port = free_port()
    (workdir / "users.txt").write_text(f'"{url.username or "postgres"}" ""\n')
    (workdir / "pgbouncer.ini").write_text(config(server_url, port, workdir))
    argv = [exe, str(workdir / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root: as the database's or an unprivileged user
        user = _socket_owner(url) or next((u for u in ("postgres", "nobody") if _exists(u)), None)
        if user is None:
            raise RuntimeError("running as root and neither a postgres nor a nobody user exists")
        shutil.chown(workdir, pwd.getpwnam(user).pw_uid)
        for f in workdir.iterdir():
            shutil.chown(f, pwd.getpwnam(user).pw_uid)
        argv[1:1] = ["-u", user]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: _listening(port) or proc.poll() is not None, 20)
        if proc.poll() is not None:
            raise RuntimeError(f"pgbouncer did not start:\n{_log(workdir)}")
        yield url.set(host="127.0.0.1", port=port, query={}).render_as_string(hide_password=False)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _socket_owner(url) -> str | None:
    """The user owning the server's unix socket directory when the URL names one that is not root's (the
    embedded PostgreSQL of `make test`: ``.data/pg``, mode 0700, owned by the ``pgserver`` user): only
    that user can reach the socket, so PgBouncer runs as it. Run as ``postgres`` it could not, and every
    client waited for a server connection until its query_wait_timeout (120 s)."""
    host = url.query.get("host") or url.host or ""
    if not str(host).startswith("/"):
        return None
    try:
        owner = pwd.getpwuid(Path(str(host)).stat().st_uid).pw_name
    except (OSError, KeyError):
        return None
    return owner if owner != "root" else None


def _exists(user: str) -> bool:
    try:
        pwd.getpwnam(user)
    except KeyError:
        return False
    return True


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _log(workdir: Path) -> str:
    try:
        return (workdir / "pgbouncer.log").read_text()[-3000:]
    except OSError:
        return ""
