"""``app.principal_cache.PrincipalCache``: what a web process keeps of the tokens it authenticated, and when it may
use it. Pure logic (a fake clock, no database); the live cache with its LISTEN connection is tested in
tests/web/test_principal_cache.py."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.auth import Principal
from app.principal_cache import PrincipalCache

URL = "postgresql://db/app"


def _principal(name: str = "p", version: int = 0) -> Principal:
    return Principal(f"id-{name}", f"{name}-{version}", "ns-id", "ns", frozenset({"tasks:work"}), None)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _heard(**kw) -> PrincipalCache:
    cache = PrincipalCache(**kw)
    cache.hearing(URL)
    return cache


def test_nothing_is_kept_while_no_change_is_heard():
    cache = PrincipalCache()
    cache.put(URL, "h", _principal(), cache.generation())
    assert cache.get(URL, "h") is None and not cache.hears_any()
    cache.hearing(URL)
    cache.put(URL, "h", _principal(), cache.generation())
    assert cache.get(URL, "h") == _principal() and cache.hears_any()
    cache.hearing(None)  # the LISTEN connection was lost: what was kept goes, and nothing is kept after
    assert cache.get(URL, "h") is None
    cache.put(URL, "h", _principal(), cache.generation())
    assert cache.get(URL, "h") is None


def test_only_the_database_whose_changes_are_heard():
    cache = _heard()
    cache.put("postgresql://db/other", "h", _principal(), cache.generation())
    assert cache.get("postgresql://db/other", "h") is None
    cache.put(URL, "h", _principal(), cache.generation())
    assert cache.get("postgresql://db/other", "h") is None and cache.get(URL, "h") is not None


def test_a_read_that_began_before_a_change_is_not_kept():
    cache = _heard()
    began = cache.generation()
    cache.changed()  # a revocation heard while the read was on its way
    cache.put(URL, "h", _principal(), began)
    assert cache.get(URL, "h") is None


def test_a_change_empties_the_cache():
    cache = _heard()
    cache.put(URL, "a", _principal("a"), cache.generation())
    cache.put(URL, "b", _principal("b"), cache.generation())
    cache.changed()
    assert cache.get(URL, "a") is None and cache.get(URL, "b") is None


def test_an_entry_is_used_for_the_cache_seconds_at_most():
    clock = Clock()
    cache = _heard(seconds=5, clock=clock)
    cache.put(URL, "h", _principal(), cache.generation())
    clock.now += 4.999
    assert cache.get(URL, "h") is not None
    clock.now += 0.001
    assert cache.get(URL, "h") is None


def test_the_oldest_entry_goes_first_when_full():
    cache = _heard(entries=2)
    for name in "abc":
        cache.put(URL, name, _principal(name), cache.generation())
    assert [cache.get(URL, n) is not None for n in "abc"] == [False, True, True]
    cache.put(URL, "b", _principal("b", 1), cache.generation())  # kept again: no eviction
    assert cache.get(URL, "c") is not None and cache.get(URL, "b") == _principal("b", 1)


def test_a_forked_child_uses_nothing_of_its_parent(monkeypatch):
    cache = _heard()
    cache.put(URL, "h", _principal(), cache.generation())
    monkeypatch.setattr("app.principal_cache.os.getpid", lambda: -1)
    assert cache.get(URL, "h") is None and not cache.hears_any()


# Property: a database of tokens (token -> version), reads that begin (taking the generation and the
# row as it is then) and end later (``put``), changes that are heard (``changed``) or lost with the
# connection (then ``hearing(None)`` and later ``hearing(URL)``, as web.listener does), in any order.
# Whatever the interleaving, the cache never answers a version the database no longer has.
_TOKENS = ["t0", "t1", "t2"]
_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("begin"), st.sampled_from(_TOKENS)),
        st.tuples(st.just("end"), st.integers(0, 5)),
        st.tuples(st.just("change"), st.sampled_from(_TOKENS)),
        st.tuples(st.just("lose"), st.none()),
        st.tuples(st.just("listen"), st.none()),
    ),
    max_size=60,
)


@given(_OPS)
def test_the_cache_never_answers_a_changed_credential(ops):
    cache = PrincipalCache()
    cache.hearing(URL)
    db = dict.fromkeys(_TOKENS, 0)
    reads: list[tuple[str, int, int]] = []  # (token, generation at its start, version it read)
    heard = True
    for op, arg in ops:
        if op == "begin":
            reads.append((arg, cache.generation(), db[arg]))
        elif op == "end" and reads:
            token, generation, version = reads.pop(arg % len(reads))
            cache.put(URL, token, _principal(token, version), generation)
        elif op == "change":
            db[arg] += 1
            if heard:
                cache.changed()
        elif op == "lose" and heard:
            cache.hearing(None)
            heard = False
        elif op == "listen" and not heard:
            cache.hearing(URL)
            heard = True
        for token in _TOKENS:
            kept = cache.get(URL, token)
            assert kept is None or kept == _principal(token, db[token])
