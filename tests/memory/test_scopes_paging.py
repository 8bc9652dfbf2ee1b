"""``MemoryStore.scopes(after=, limit=)`` pages the scopes at the source: the pages, read in turn,
give every scope ``scopes()`` lists exactly once and in its order, over a store with synced findings,
unsynced files, forgotten, expired and erased ones; and a page reads about a page of scopes, not all."""

from __future__ import annotations

from pathlib import Path

import pytest

import memory

LIVE_SYNCED = ["a-synced", "b-both", "é-synced", "Z-upper"]
LIVE_UNSYNCED = ["b-both", "c-unsynced", "zz-unsynced", "\U0001f600-emoji"]
GONE = ["d-forgotten-synced", "e-forgotten-unsynced", "f-erased", "g-expired", "h-expired-synced"]


def _learn(store: memory.MemoryStore, scope: str, text: str, **extra: object) -> str:
    with store.session(scope=scope, flow="test") as session:
        return session.learn({"text": text, **extra}).key


def _forget(store: memory.MemoryStore, scope: str, key: str) -> None:
    with store.session(scope=scope, flow="test") as session:
        session.forget(key, reason="gone")


@pytest.fixture
def store(tmp_path: Path) -> memory.MemoryStore:
    opened = memory.MemoryStore(tmp_path / "history.db")
    for scope in LIVE_SYNCED:
        _learn(opened, scope, f"a synced finding of {scope}")
    forgotten_synced = _learn(opened, "d-forgotten-synced", "forgotten after its sync")
    erased = _learn(opened, "f-erased", "erased after its sync")
    kept_one = _learn(opened, "a-synced", "a second finding, forgotten: the scope still has one")
    _learn(opened, "h-expired-synced", "expired, and synced", expiresMs=1)
    opened.sync()
    _forget(opened, "d-forgotten-synced", forgotten_synced)
    _forget(opened, "a-synced", kept_one)
    with opened.session(scope="f-erased", flow="test") as session:
        session.erase(erased, reason="erased")
    for scope in LIVE_UNSYNCED:
        _learn(opened, scope, f"an unsynced finding of {scope}")
    _forget(opened, "e-forgotten-unsynced", _learn(opened, "e-forgotten-unsynced", "forgotten, never synced"))
    _learn(opened, "g-expired", "expired long ago", expiresMs=1)
    return opened


def _pages(store: memory.MemoryStore, size: int) -> list[list[str]]:
    pages, after = [], None
    while True:
        page = store.scopes(after=after, limit=size)
        pages.append(page)
        if len(page) < size:
            return pages
        after = page[-1]


@pytest.mark.parametrize("size", [1, 2, 3, 7, 100])
def test_pages_give_every_scope_once_in_order_as_the_unpaged_list(
    store: memory.MemoryStore, size: int
) -> None:
    with store:
        every = store.scopes()
        expected = sorted(set(LIVE_SYNCED) | set(LIVE_UNSYNCED))
        assert every == expected  # by code point: upper case, then lower, then é, then the emoji
        held = {s for s in (*expected, *GONE) if store.recall(scope=s, limit=1)}
        assert set(every) == held  # a scope is listed when a read of it finds a live finding
        pages = _pages(store, size)
        assert [s for page in pages for s in page] == every
        assert all(len(page) <= size for page in pages)
        assert store.scopes(after=every[2], limit=2) == every[3:5]
        assert store.scopes(after=every[-1]) == []
        assert store.scopes(after="", limit=0) == []
        assert store.scopes(after="b") == [s for s in every if s > "b"]  # a cursor that names no scope


@pytest.mark.parametrize(
    ("kwargs", "named"), [({"after": 5}, "after"), ({"limit": -1}, "limit"), ({"limit": True}, "limit")]
)
def test_a_page_with_a_bad_cursor_or_limit_is_refused(
    store: memory.MemoryStore, kwargs: dict[str, object], named: str
) -> None:
    with store, pytest.raises(memory.ArgumentInvalid, match=named):
        store.scopes(**kwargs)  # type: ignore[arg-type]


def test_a_page_reads_the_scopes_it_lists_not_every_scope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each scope listed is checked for a live finding by a read of that scope; a page of 3 used to
    read all 40 before it was cut."""
    with memory.MemoryStore(tmp_path / "history.db") as store:
        scopes = [f"user-{i:02d}" for i in range(40)]
        for scope in scopes:
            _learn(store, scope, f"a finding of {scope}")
        store.sync()
        read: list[object] = []
        search = store._search
        recall = search.recall

        def counted(**kwargs: object) -> object:
            read.append(kwargs.get("scope"))
            return recall(**kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(search, "recall", counted)
        assert store.scopes(after="user-10", limit=3) == ["user-11", "user-12", "user-13"]
        assert read == ["user-11", "user-12", "user-13"]
