"""The principals a web process keeps of the tokens it authenticated (``app.auth.principals``), and when it
may use them: only while it hears every credential change, never from a read older than a change heard,
for ``CACHE_SECONDS`` at most. Pure bookkeeping (no database); ``app.auth.authenticate_kept`` reads
through it and ``web.listener`` tells it what is heard."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

# How long a web process keeps the principal of a token it authenticated, and how many it keeps.
CACHE_SECONDS = 5
CACHE_ENTRIES = 10_000
P = TypeVar("P")


class PrincipalCache(Generic[P]):
    """The principals of the tokens this process authenticated, kept while the process hears every change
    to credentials, so that a request of a known token reads no credential row.

    - **Heard changes only**: an entry is kept and used only while the process's LISTEN connection hears
      ``lf_credentials`` for the database the app uses (``hearing(url)``, set by ``web.listener`` once its
      ``LISTEN`` ran, cleared when the connection is lost). A revocation, a deletion or a namespace change
      NOTIFYs that channel at commit (migration 0024) and ``changed()`` empties the cache; the process
      that revokes empties its own at once (``revoke_credential``).
    - **No read from before a change**: a read takes ``generation()`` before it asks the database and is
      kept (``put``) only if no change was heard meanwhile.
    - **Bounded**: an entry is used for ``CACHE_SECONDS`` at most (a notification lost with a connection
      not yet known to be broken costs that long at most), a credential expiring sooner is never kept,
      and at most ``CACHE_ENTRIES`` are kept (the oldest goes first).
    - Only positive answers are kept: an unknown token always reads (and is answered 401)."""

    def __init__(
        self,
        seconds: float = CACHE_SECONDS,
        entries: int = CACHE_ENTRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.seconds, self.entries, self._clock = seconds, entries, clock
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[P, float]] = {}
        self._generation = 0
        self._heard: tuple[int, str] | None = None  # (pid, database URL) whose changes are heard

    def hearing(self, url: str | None) -> None:
        """This process now hears every credential change of the database ``url`` (None: it no longer
        hears any); either way what was kept goes."""
        with self._lock:
            self._generation += 1
            self._kept.clear()
            self._heard = None if url is None else (os.getpid(), url)

    def changed(self) -> None:
        """A credential or namespace changed: nothing kept may be used again."""
        with self._lock:
            self._generation += 1
            self._kept.clear()

    def generation(self) -> int:
        """Changes heard so far; take it before a read that may be ``put``."""
        return self._generation

    def hears(self, url: str) -> bool:
        """Whether this process hears the credential changes of database ``url``."""
        return self._heard is not None and self._heard == (os.getpid(), url)

    def hears_any(self) -> bool:
        """Whether this process hears the credential changes of some database (so may keep principals)."""
        return self._heard is not None and self._heard[0] == os.getpid()

    def get(self, url: str, token_hash: str) -> P | None:
        """The kept principal of ``token_hash`` on database ``url``, or None (not kept, too old, or changes
        of that database are not heard)."""
        if not self.hears(url):
            return None
        kept = self._kept.get(token_hash)
        if kept is None or self._clock() - kept[1] >= self.seconds:
            return None
        return kept[0]

    def put(self, url: str, token_hash: str, principal: P, generation: int) -> None:
        """Keep what a read that began at ``generation`` found, unless a change was heard since."""
        with self._lock:
            if generation != self._generation or not self.hears(url):
                return
            if token_hash not in self._kept and len(self._kept) >= self.entries:
                del self._kept[next(iter(self._kept))]
            self._kept[token_hash] = (principal, self._clock())
