"""How ``JournalStore``'s writes look up their item (``flows.langgraph._lookup``): without reading
the scope's other unsynced files, and still seeing every other writer's put and delete."""

from __future__ import annotations

import itertools
import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flows.langgraph import JournalStore
from flows.langgraph._store import SCOPE_PREFIX
from memory import MemoryStore, Unreachable

NS = ("look",)


@pytest.fixture
def opened() -> Iterator[list[str]]:
    """The paths this process opens (the ``open`` audit event of ``os.open`` and ``open``) while
    the list is being filled; an audit hook cannot be removed, so it stops filling after the test."""
    paths: list[str] = []
    on = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if on[0] and event == "open" and isinstance(args[0], str | Path):
            paths.append(str(args[0]))

    sys.addaudithook(hook)
    yield paths
    on[0] = False


def _live(store: JournalStore, key: str) -> list[Any]:
    scope = store.finding(NS, key)
    assert scope is not None
    return [
        r
        for r in store.memory.recall(scope=scope.scope, meta={"key": key}, limit=None)
        if r.metadata["key"] == key
    ]


def test_a_put_opens_none_of_the_scopes_other_unsynced_files(tmp_path: Path, opened: list[str]) -> None:
    # The scope folder is fresh (just written), so the memory's read would look at each of its
    # unsynced files again; a write's look-up lists the folder and asks the DB instead.
    with JournalStore(
        db=str(tmp_path / "history.db"), journal=str(tmp_path / "journal"), sync_every=0
    ) as store:
        for i in range(12):
            store.put(NS, f"k{i}", {"n": i})
        others = {}  # item key -> its file's name (the memory opens files by name in their folder)
        for i in range(12):
            found = store.finding(NS, f"k{i}")
            assert found is not None
            others[f"k{i}"] = f"{found.key}.json"
        opened.clear()
        store.put(NS, "new", {"n": 99})  # a new item
        store.put(NS, "k3", {"n": 33})  # an update of one
        touched = {os.path.basename(p) for p in opened} & set(others.values())
        assert touched <= {others["k3"]}, touched
        item = store.get(NS, "k3")
        assert item is not None and item.value == {"n": 33}
        assert len(_live(store, "k3")) == 1


@pytest.mark.parametrize("sync_other", [False, True])
def test_a_put_supersedes_the_version_another_store_put_since_its_last_look(
    journal_location: str, tmp_path: Path, sync_other: bool
) -> None:
    # ``sync_other``: the other store's version is moved into the DB before this store looks again
    # (a file gone from the folder, found in the DB).
    db = str(tmp_path / "history.db")
    with (
        JournalStore(db=db, journal=journal_location) as mine,
        JournalStore(db=db, journal=journal_location) as other,
    ):
        mine.put(NS, "k", {"v": "mine-1"})
        first = mine.get(NS, "k")
        other.put(NS, "k", {"v": "other"})
        if sync_other:
            other.memory.sync(materialize=False)
        mine.put(NS, "k", {"v": "mine-2"})
        assert len(_live(mine, "k")) == 1
        for store in (mine, other):
            item = store.get(NS, "k")
            assert item is not None and item.value == {"v": "mine-2"}
            assert first is not None and item.created_at == first.created_at


def test_a_put_after_another_stores_delete_makes_a_new_item(journal_location: str, tmp_path: Path) -> None:
    db = str(tmp_path / "history.db")
    ticks = itertools.count(1_700_000_000_000, 1000)  # this store's clock: every creation time its own
    with (
        JournalStore(db=db, journal=journal_location, clock=lambda: next(ticks)) as mine,
        JournalStore(db=db, journal=journal_location) as other,
    ):
        mine.put(NS, "k", {"v": 1})
        mine.put(NS, "gone", {"v": 1})
        mine.memory.sync(materialize=False)  # one of the two as a row, the other a file
        mine.put(NS, "k", {"v": 2})
        first = {key: item.created_at for key in ("k", "gone") if (item := mine.get(NS, key)) is not None}
        for key in ("k", "gone"):
            other.delete(NS, key)
            assert mine.get(NS, key) is None
            mine.put(NS, key, {"v": 3})
            item = mine.get(NS, key)
            assert item is not None and item.value == {"v": 3}
            assert len(_live(mine, key)) == 1
            assert item.created_at > first[key]  # a new item, not a version of the deleted one


def test_a_version_this_store_did_not_write_is_settled_by_the_next_put(tmp_path: Path) -> None:
    # A version learned beside the item's (as a put that lost every race leaves one): the next put
    # supersedes the newest and forgets the other, as the memory's read would have it.
    with JournalStore(db=str(tmp_path / "history.db"), journal=str(tmp_path / "journal")) as store:
        store.put(NS, "k", {"v": 1})
        older = store.finding(NS, "k")
        assert older is not None
        beside = {
            "text": older.text + " again",
            "source": older.source,
            "metadata": {**older.metadata, "rev": "x"},
        }
        with store.memory.session(scope=older.scope, flow="race") as s:
            s.learn(beside)
        assert len(_live(store, "k")) == 2
        store.put(NS, "k", {"v": 2})
        live = _live(store, "k")
        assert [r.metadata["value"] for r in live] == [{"v": 2}]


def test_two_puts_creating_one_item_at_once_leave_one_live_version(
    journal_location: str, tmp_path: Path
) -> None:
    # The other store creates the item after this put looked (and found none) and before it
    # learns: each put looks again after its commit, and the key is one item when this one returns.
    db = str(tmp_path / "history.db")
    with (
        JournalStore(db=db, journal=journal_location) as mine,
        JournalStore(db=db, journal=journal_location) as other,
    ):
        mine.put(NS, "warm", {"v": 0})  # this store has written: its own look-up is in use
        learn = mine.memory.learn

        def raced(finding: Any, root: Any, *, supersedes: str | None = None) -> Any:
            if finding["metadata"]["key"] == "k":
                other.put(NS, "k", {"v": "other"})
            return learn(finding, root, supersedes=supersedes)

        mine.memory.learn = raced  # type: ignore[method-assign]
        mine.put(NS, "k", {"v": "mine"})
        mine.memory.learn = learn  # type: ignore[method-assign]
        live = _live(mine, "k")
        assert [r.metadata["value"] for r in live] == [{"v": "mine"}]
        for store in (mine, other):
            item = store.get(NS, "k")
            assert item is not None and item.value == {"v": "mine"}


def test_a_file_no_record_backs_fails_the_put_of_its_item_as_the_memorys_read_does(tmp_path: Path) -> None:
    # A learned file for the item that cites a record of another journal: this store did not write
    # it, so its write's look-up leaves it to the memory's read, which refuses to serve it.
    db = str(tmp_path / "history.db")
    with JournalStore(db=db, journal=str(tmp_path / "journal")) as store:
        store.put(NS, "warm", {"v": 0})  # this store has written: its own look-up is in use
        elsewhere = MemoryStore(db, journal=str(tmp_path / "another-journal"))
        with elsewhere.session(scope=SCOPE_PREFIX + "look", flow="forged", source="LangGraphStore") as s:
            s.learn(
                {
                    "text": "forged",
                    "source": "LangGraphStore",
                    "metadata": {"key": "k", "value": {"v": "forged"}, "createdMs": 1, "rev": "f"},
                }
            )
        elsewhere.close()
        with pytest.raises(Unreachable):
            store.put(NS, "k", {"v": "mine"})
        store.put(NS, "other", {"v": 1})  # another item of the scope is still written
        assert store.get(NS, "other") is not None


def test_names_in_the_folder_that_are_no_learned_file_are_set_aside_once(tmp_path: Path) -> None:
    """A synced folder keeps the hidden names of the files a sync dropped until the background
    unlink (and stages come and go): a write's look-up sets each such name aside once, by set
    operations, and still sees a learned file that appears later."""
    db = str(tmp_path / "history.db")
    with JournalStore(db=db, journal=str(tmp_path / "journal"), sync_every=0) as store:
        store.put(NS, "a", {"n": 1})
        found = store.finding(NS, "a")
        assert found is not None
        folder = Path(store.memory.db_path).parent / "flows-memory"
        (scope_dir,) = {p.parent for p in folder.rglob(f"{found.key}.json")}
        planted = [".stage-sync-000000000000.x.json", ".hidden.json", "notes.txt"]
        for name in planted:
            (scope_dir / name).write_bytes(b"not a learned file")
        store.put(NS, "b", {"n": 2})
        lookup = store._lookup
        assert lookup is not None
        files = lookup._scope(SCOPE_PREFIX + "look")
        assert set(planted) <= files.other
        assert all(name not in files.items for name in planted)
        with JournalStore(db=db, journal=str(tmp_path / "journal"), sync_every=0) as other:
            other.put(NS, "c", {"n": 3})  # another store's file, listed after the names set aside
        (scope_dir / planted[0]).unlink()
        store.put(NS, "c", {"n": 33})
        # (the hidden names of this store's own set-aside files may be there too: a put that
        # replaced an item lists the folder again after its commit)
        assert files.other & set(planted) == set(planted[1:])
        assert all(name.startswith(".") for name in files.other - set(planted))
        assert len(_live(store, "c")) == 1
        item = store.get(NS, "c")
        assert item is not None and item.value == {"n": 33}


def test_a_new_items_look_after_its_commit_asks_the_db_nothing_of_its_own_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The look after a new item's commit asks whether any *other* version is live: the version the
    # put has just learned is neither looked up in the DB (one query a put) nor, when only its own
    # file is listed, given a DB statement naming it at all.
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    with JournalStore(
        db=str(tmp_path / "history.db"), journal=str(tmp_path / "journal"), sync_every=0
    ) as store:
        for i in range(4):
            store.put(NS, f"k{i}", {"n": i})
        store.memory.sync()  # the DB is there, so a look-up's DB part runs
        statements.clear()
        store.put(NS, "new", {"n": 99})
        asked = list(statements)  # the put's statements (the reads below make their own)
        found = store.finding(NS, "new")
        assert found is not None
        assert asked and not [s for s in asked if found.key in s], asked
        assert len(_live(store, "new")) == 1


def test_a_creator_racing_a_new_item_is_seen_in_the_db_by_the_look_after_the_commit(
    journal_location: str, tmp_path: Path
) -> None:
    # As ``test_two_puts_creating_one_item_at_once_leave_one_live_version``, with the other store's
    # version moved into the DB before this put looks again: its row, not a file, shows the race.
    db = str(tmp_path / "history.db")
    with (
        JournalStore(db=db, journal=journal_location) as mine,
        JournalStore(db=db, journal=journal_location) as other,
    ):
        mine.put(NS, "warm", {"v": 0})
        learn = mine.memory.learn

        def raced(finding: Any, root: Any, *, supersedes: str | None = None) -> Any:
            if finding["metadata"]["key"] == "k":
                other.put(NS, "k", {"v": "other"})
                other.memory.sync()
            return learn(finding, root, supersedes=supersedes)

        mine.memory.learn = raced  # type: ignore[method-assign]
        mine.put(NS, "k", {"v": "mine"})
        mine.memory.learn = learn  # type: ignore[method-assign]
        assert [r.metadata["value"] for r in _live(mine, "k")] == [{"v": "mine"}]


def test_a_new_items_looks_read_the_db_in_one_statement_each_without_a_transaction_around_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing of the item is listed before its learn, and only its own file after: each look asks
    # the DB one thing (the item's rows), a statement that is one read by itself, with no BEGIN and
    # ROLLBACK around it. A look that also asks which listed versions the DB holds (two statements)
    # still reads both in one transaction.
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    with JournalStore(
        db=str(tmp_path / "history.db"), journal=str(tmp_path / "journal"), sync_every=0
    ) as store:
        for i in range(4):
            store.put(NS, f"k{i}", {"n": i})
        store.memory.sync()  # the DB is there, so a look-up's DB part runs
        store.put(NS, "k1", {"n": 10})  # k1's new version is an unsynced file, its old one a row
        statements.clear()
        store.put(NS, "new", {"n": 99})
        assert [s for s in statements if "finding_meta" in s], statements  # the looks asked the DB
        assert [s for s in statements if s in ("BEGIN", "ROLLBACK")] == [], statements
        statements.clear()
        store.put(NS, "k1", {"n": 11})  # its unsynced version listed: the DB is asked two things
        assert [s for s in statements if s in ("BEGIN", "ROLLBACK")] == ["BEGIN", "ROLLBACK"], statements
        assert [r.metadata["value"] for r in _live(store, "k1")] == [{"n": 11}]
        assert len(_live(store, "new")) == 1
