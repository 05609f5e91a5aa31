"""The ``Procfile`` as `make run` (``ledgerflow dev``) runs it: every process type but ``release``
under honcho, stopped the way a Heroku-style process manager stops a dyno — SIGTERM to every
process, SIGKILL only ``KILL_AFTER_SECONDS`` later (honcho's own default is 5 s, which killed jobs
in flight) — and an exit status that says what happened: 0 when every process stopped cleanly
(Ctrl-C and SIGTERM included, so `make` reports no error), else non-zero."""

from __future__ import annotations

import sys
from pathlib import Path

# every process is out within 25 s of SIGTERM (the shutdown grace is at most 20 s); Heroku kills at 30 s
KILL_AFTER_SECONDS = 25
# process types that are not long-running: Heroku runs ``release`` once per deploy, before the others
ONE_OFF = frozenset({"release"})


def processes(procfile: Path) -> dict[str, str]:
    """The Procfile's process types and their commands, in file order."""
    from honcho.environ import parse_procfile

    return dict(parse_procfile(procfile.read_text()).processes)


def long_running(procfile: Path) -> dict[str, str]:
    return {name: cmd for name, cmd in processes(procfile).items() if name not in ONE_OFF}


def run(procfile: Path, cwd: Path, port: int) -> int:
    """Run the long-running process types until one exits, Ctrl-C or SIGTERM; returns the exit status."""
    import honcho.manager
    from honcho.environ import expand_processes
    from honcho.printer import Printer

    honcho.manager.KILL_WAIT = KILL_AFTER_SECONDS  # read by Manager.loop at every turn

    class Manager(honcho.manager.Manager):
        killed: list[str]

        def _killall(self, force: bool = False) -> None:
            if force:
                self.killed = [n for n, p in self._processes.items() if "returncode" not in p]
            super()._killall(force)

    manager = Manager(Printer(sys.stdout))
    manager.killed = []
    for p in expand_processes(long_running(procfile), port=port):
        # ``exec``: the shell honcho starts becomes the process, so its exit status is the process's own.
        # No env: each process gets this one's environment (``ledgerflow dev`` set PORT for ``web``, the
        # first process type; honcho's PORT + 100 for the next ones would mean nothing to them).
        manager.add_process(p.name, f"exec {p.cmd}", quiet=p.quiet, cwd=str(cwd))
    manager.loop()
    codes = {name: p.get("returncode") for name, p in manager._processes.items()}
    if manager.killed:
        print(
            f"[ledgerflow] {', '.join(manager.killed)} did not stop within {KILL_AFTER_SECONDS} s of SIGTERM "
            "and were killed",
            flush=True,
        )
        return 1
    if all(code == 0 for code in codes.values()):
        return 0
    return manager.returncode or 1
