"""The LangGraph store on two hosts (separate ``db``s) sharing one PostgreSQL journal: an item put
on one host is read, updated and deleted as that one item on the other, with no sync between, and
puts of one key racing on both hosts leave one item."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("psycopg")

from flows.langgraph import JournalStore
from tests.langgraph.helpers import next_millisecond

ROOT = Path(__file__).resolve().parents[2]


def test_an_item_put_on_one_host_is_one_item_on_both(tmp_path: Path, postgres_dsn: str) -> None:
    ns = ("users", "u1")
    with (
        JournalStore(db=str(tmp_path / "a" / "history.db"), journal=postgres_dsn) as a,
        JournalStore(db=str(tmp_path / "b" / "history.db"), journal=postgres_dsn) as b,
    ):
        a.put(ns, "prefs", {"drink": "tea"})
        got = b.get(ns, "prefs")
        assert got is not None and got.value == {"drink": "tea"}
        b.put(ns, "prefs", {"drink": "coffee"})  # an update of A's item, not a second item
        for store in (a, b):
            item = store.get(ns, "prefs")
            assert item is not None and item.value == {"drink": "coffee"}
            assert [(i.key, i.value) for i in store.search(ns)] == [("prefs", {"drink": "coffee"})]
        created = a.get(ns, "prefs")
        assert created is not None and got.created_at == created.created_at  # one item all along
        a.delete(ns, "prefs")
        assert b.get(ns, "prefs") is None and b.search(ns) == []
        b.put(ns, "prefs", {"drink": "water"})
        assert [(i.key, i.value) for i in a.search(ns)] == [("prefs", {"drink": "water"})]


@pytest.mark.parametrize("read", ["get", "search"])
def test_a_read_meeting_another_hosts_update_made_after_the_batchs_catch_up_finds_the_item(
    tmp_path: Path, postgres_dsn: str, read: str
) -> None:
    """A batch catches up with other hosts, then reads. A read learns of another host's update from
    its retirement as it runs, but of the new version only by catching up: an update committed in
    between made the read answer with neither version, a live item nobody deleted read as None
    (about one get in sixteen while another host kept updating it)."""
    ns = ("users", "u1")
    with (
        JournalStore(db=str(tmp_path / "a" / "history.db"), journal=postgres_dsn) as a,
        JournalStore(db=str(tmp_path / "b" / "history.db"), journal=postgres_dsn) as b,
    ):
        a.put(ns, "prefs", {"drink": "tea"})
        assert b.get(ns, "prefs") is not None  # B has caught up with the item
        real = b._memory.catch_up
        updated: list[bool] = []

        def catch_up_then_another_host_updates() -> int:
            caught = real()
            if not updated:
                updated.append(True)
                a.put(ns, "prefs", {"drink": "coffee"})  # committed after B's catch up, before its read
            return caught

        b._memory.catch_up = catch_up_then_another_host_updates  # type: ignore[method-assign]
        if read == "get":
            item = b.get(ns, "prefs")
            found = [] if item is None else [item.value]
        else:
            found = [i.value for i in b.search(ns)]
        assert updated and found == [{"drink": "coffee"}]


@pytest.mark.parametrize("read", ["get", "search"])
def test_a_read_meeting_an_update_by_another_host_in_every_round_still_finds_the_item(
    tmp_path: Path, postgres_dsn: str, read: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy writer on another host: an update lands inside each of the read's looks at the
    retirements. A read that caught up and read again lost that race in every round (8), and a
    search answered without a live item about one time in ten while another process kept putting
    it. The read serves the newest version from its commit, so it never answers with neither."""
    from memory._retire import SharedRetirements

    ns = ("users", "u1")
    with (
        JournalStore(db=str(tmp_path / "a" / "history.db"), journal=postgres_dsn) as a,
        JournalStore(db=str(tmp_path / "b" / "history.db"), journal=postgres_dsn) as b,
    ):
        a.put(ns, "prefs", {"drink": 0})
        a.put(ns, "other", {"drink": "none"})
        assert b.get(ns, "prefs") is not None  # B has caught up with the items
        real = SharedRetirements.current
        puts: list[int] = []
        reading = threading.local()

        def current_after_an_update(self: SharedRetirements) -> Any:
            if getattr(reading, "b", False) and len(puts) < 12:
                puts.append(len(puts) + 1)
                reading.b = False  # (A's own looks, in its put, run no update)
                a.put(ns, "prefs", {"drink": len(puts)})  # another host's update, committed now
                reading.b = True
            return real(self)

        monkeypatch.setattr(SharedRetirements, "current", current_after_an_update)
        reading.b = True
        if read == "get":
            item = b.get(ns, "prefs")
            found = [] if item is None else [item.value]
        else:
            found = [i.value for i in b.search(ns) if i.key == "prefs"]
        reading.b = False
        assert len(puts) == 12, "the updates did not run inside the read"
        assert len(found) == 1 and found[0]["drink"] in range(1, 13), found


def _run_at_once(script: str, journal: str, dbs: list[Path]) -> None:
    """``script`` in one process per db (argv: the journal, the db, a name), all started, then let
    go at once (each prints ``ready`` and waits for a line); each must exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = []
    for n, db in enumerate(dbs):
        proc = subprocess.Popen(
            [sys.executable, "-c", script, journal, str(db), f"w{n}"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        procs.append(proc)
    codes = []
    try:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.close()
        for proc in procs:
            assert proc.stdout is not None
            proc.stdout.read()
            codes.append(proc.wait(120))
    finally:
        for proc in procs:  # every one reaped, even when one failed (never left to the collector)
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    assert codes == [0] * len(procs)


_PUTTER = """
import sys
from flows.langgraph import JournalStore
dsn, db, name = sys.argv[1], sys.argv[2], sys.argv[3]
with JournalStore(db=db, journal=dsn) as store:
    store.get(("u",), "k")
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(25):
        store.put(("u",), "k", {"v": f"{name}-{i}"})
"""


@pytest.mark.slow
def test_puts_of_one_key_racing_on_two_hosts_leave_one_item(tmp_path: Path, postgres_dsn: str) -> None:
    for round_ in range(2):
        dbs = {h: tmp_path / f"{h}{round_}" / "history.db" for h in "ab"}
        ns = ("u",)
        with JournalStore(db=str(dbs["a"]), journal=postgres_dsn) as a:
            a.put(ns, "k", {"v": "zero"})
        _run_at_once(_PUTTER, postgres_dsn, [db for db in dbs.values() for _ in range(2)])
        # a put that lost a race supersedes the version that won it: one item, the same on both
        seen = []
        for db in dbs.values():
            with JournalStore(db=str(db), journal=postgres_dsn) as store:
                items = store.search(ns)
                assert [i.key for i in items] == ["k"], [i.value for i in items]
                seen.append(items[0].value)
        assert seen[0] == seen[1] and seen[0]["v"].endswith("-24")


_CREATOR = """
import sys
from flows.langgraph import JournalStore
dsn, db, name = sys.argv[1], sys.argv[2], sys.argv[3]
with JournalStore(db=db, journal=dsn) as store:
    store.get(("new",), "warm")
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(20):
        store.put(("new",), f"k{i}", {"v": name})
"""


@pytest.mark.slow
@pytest.mark.parametrize("hosts", ["one file journal", "two hosts on PostgreSQL"])
def test_puts_that_each_create_the_same_new_item_leave_one_live_version(
    tmp_path: Path, postgres_dsn: str, hosts: str
) -> None:
    # Four processes create the same twenty new items at once: each put found no item and learned
    # one. Each looks again after its commit and keeps the newest: one live version of each item
    # in the memory once every put returned (before: two or more, until the key's next put).
    if hosts == "one file journal":
        journal = str(tmp_path / "flows-journal")
        dbs = [tmp_path / "history.db"] * 4
    else:
        journal = postgres_dsn
        dbs = [tmp_path / h / "history.db" for h in "abab"]
    _run_at_once(_CREATOR, journal, dbs)
    for db in sorted(set(dbs)):
        with JournalStore(db=str(db), journal=journal) as store:
            store.memory.catch_up()
            for i in range(20):
                live = store.memory.recall(scope="langgraph:new", meta={"key": f"k{i}"}, limit=None)
                shown = (db, i, [(r.key, r.metadata["value"]) for r in live])
                # one: a put only forgets what it saw a newer version of, and looks again when a
                # version it forgets was replaced meanwhile
                assert len(live) == 1, shown


def _waited(event: threading.Event) -> None:
    assert event.wait(60), "the other put never got there"


def test_a_version_replaced_while_a_creating_put_forgets_it_is_settled_too(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The race of puts that create one item on two hosts, step by step: A creates the item (v1)
    # while B's put, which found none, is about to learn its own (vB); C (a third host) reads v1
    # and replaces it (v2), committing only after B looked again and decided to forget v1 as older
    # than vB. B's forget of v1 is then answered by C's supersede: v2 is live and B never saw it.
    # Before, B stopped there and the key kept two live versions, vB and v2, until its next put.
    ns, key = ("new",), "k"
    c_looked, b_looked, c_committed = threading.Event(), threading.Event(), threading.Event()
    stores = [JournalStore(db=str(tmp_path / h / "history.db"), journal=postgres_dsn) for h in "abc"]
    a, b, c = stores
    b_learn, c_learn, b_forget = b.memory.learn, c.memory.learn, b.memory.forget
    forgot: list[str] = []
    racer = threading.Thread(target=c.put, args=(ns, key, {"v": "c"}), daemon=True)

    def b_learns(*args: Any, **kwargs: Any) -> Any:
        if not c_looked.is_set():
            a.put(ns, key, {"v": "a"})  # v1, after B found no item
            racer.start()
            _waited(c_looked)  # C read v1 before vB is committed
            next_millisecond()  # vB learned a later millisecond than v1: the newer of the two
        return b_learn(*args, **kwargs)

    def c_learns(*args: Any, **kwargs: Any) -> Any:
        c_looked.set()
        _waited(b_looked)
        try:
            return c_learn(*args, **kwargs)  # v2, superseding v1
        finally:
            c_committed.set()

    def b_forgets(stale: str, *args: Any, **kwargs: Any) -> Any:
        forgot.append(stale)
        if not b_looked.is_set():
            b_looked.set()
            _waited(c_committed)
        return b_forget(stale, *args, **kwargs)

    monkeypatch.setattr(b.memory, "learn", b_learns)
    monkeypatch.setattr(c.memory, "learn", c_learns)
    monkeypatch.setattr(b.memory, "forget", b_forgets)
    try:
        b.put(ns, key, {"v": "b"})
        racer.join(60)
        assert not racer.is_alive() and forgot, "C's put never returned, or B forgot nothing"
        for store in stores:
            store.memory.catch_up()
            live = store.memory.recall(scope="langgraph:new", meta={"key": key}, limit=None)
            assert [r.metadata["value"] for r in live] == [{"v": "c"}], forgot
    finally:
        for store in stores:
            store.close()


def test_an_item_erased_on_another_host_leaves_no_copy_after_the_stores_own_writes(
    tmp_path: Path, postgres_dsn: str
) -> None:
    # the store syncs after its writes (sync_every) without materializing: that sync removes its
    # host's copies of what another host erased (the history DB's rows and WAL, files, stages).
    # It runs on the store's sync thread; ``close`` waits for it.
    import journal
    import memory

    mark = "ZQXLGERASE"
    ns = ("users", "u1")
    db = str(tmp_path / "a" / "history.db")
    with JournalStore(db=db, journal=postgres_dsn, sync_every=1) as a:
        a.put(ns, "addr", {"street": mark})
        a.put(ns, "other", {"x": "y"})
        key = a.finding(ns, "addr").key

        def held() -> list[Path]:
            return [p for p in (tmp_path / "a").rglob("*") if p.is_file() and mark.encode() in p.read_bytes()]

        assert held()
        b = memory.MemoryStore(tmp_path / "b" / "history.db", journal=postgres_dsn)
        b.catch_up()
        with b.session(scope="privacy") as s, pytest.raises(journal.JournalLeaseHeld):
            s.erase(key, reason="asked")  # A's root run is open: its commit is rewritten once it ends
        b.close()
        assert a.get(ns, "addr") is None
        a.put(ns, "later", {"x": 1})  # a write, and the sync after it
    assert held() == []
    with JournalStore(db=db, journal=postgres_dsn, sync_every=0) as again:
        assert {i.key for i in again.search(ns)} == {"later", "other"}


def test_a_creating_put_that_looks_while_a_replacing_put_is_half_done_is_settled_on_one_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One file journal and one DB, three stores (three processes' worth). B's put found no item;
    # before it learns, A creates the item (v1); B learns vB; then C replaces v1 (v2, a later
    # millisecond): C's supersede retires v1 and stops before v2 is in place, holding the scope's
    # turn. B looks again in that moment. Its read meets v1's retired file, publishes v2 from C's
    # commit and finds vB and v2: it keeps the newer, v2, and forgets vB (waiting for C's turn). C
    # then goes on and looks again too. Before the look again, the look saw neither v1 nor v2, B
    # kept vB, C returned without looking, and the key kept two live versions (vB and v2). (B's
    # learn itself cannot fall in C's half-done replace: a plain learn holds a share of the
    # scope's turn, so it waits for C to finish.)
    import memory._learn

    ns, key = ("new",), "k"
    db, journal = str(tmp_path / "history.db"), str(tmp_path / "flows-journal")
    stores = [JournalStore(db=db, journal=journal) for _ in "abc"]
    a, b, c = stores
    in_between, b_put = threading.Event(), threading.Event()
    racer = threading.Thread(target=c.put, args=(ns, key, {"v": "c"}), daemon=True)
    real_failpoint = memory._learn.failpoint

    def failpoint(name: str) -> None:
        real_failpoint(name)
        if name == "memory.after_retire_replaced" and threading.current_thread() is racer:
            in_between.set()
            _waited(b_put)  # v1 retired, v2 committed and not yet in place, until B looked

    b_learn = b.memory.learn

    def b_learns(*args: Any, **kwargs: Any) -> Any:
        if not racer.is_alive() and not in_between.is_set():
            a.put(ns, key, {"v": "a"})  # v1, after B found no item
            learned = b_learn(*args, **kwargs)  # vB
            next_millisecond()  # v2 learned a later millisecond than vB: the newer of the two
            racer.start()
            _waited(in_between)
            return learned
        return b_learn(*args, **kwargs)

    b_forget = b.memory.forget
    b_forgot: list[bool] = []

    def b_forgets(*args: Any, **kwargs: Any) -> Any:
        # B's look found another version to forget (the read that met v1's retired file published
        # v2): a forget takes the scope's turn, which C holds until it goes on
        b_forgot.append(threading.current_thread() is not racer)
        b_put.set()
        return b_forget(*args, **kwargs)

    monkeypatch.setattr(memory._learn, "failpoint", failpoint)
    monkeypatch.setattr(b.memory, "learn", b_learns)
    monkeypatch.setattr(b.memory, "forget", b_forgets)
    try:
        b.put(ns, key, {"v": "b"})
        b_put.set()
        racer.join(60)
        assert not racer.is_alive() and in_between.is_set(), "C's put never got between, or never returned"
        assert b_forgot == [True], "B's look again did not meet C's half-done replace"
        for store in stores:
            live = store.memory.recall(scope="langgraph:new", meta={"key": key}, limit=None)
            assert [r.metadata["value"] for r in live] == [{"v": "c"}]
            item = store.get(ns, key)
            assert item is not None and item.value == {"v": "c"}
    finally:
        b_put.set()
        for store in stores:
            store.close()


def test_a_creating_put_that_looks_as_another_host_replaces_the_item_is_settled(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three hosts on one PostgreSQL journal. B's put found no item; before it learns, A creates
    # the item (v1) and C reads it, to replace it. B learns vB and looks again: it catches up, and
    # then, before it reads, C commits v2, which retires v1. B's read learns of v1's retirement
    # from the journal, but v2 is not published on B's host (B caught up before its commit): B
    # sees vB alone and keeps it. Before, C returned without looking again and the key kept two
    # live versions (vB and v2) on every host; now C looks again and keeps the newest, v2.
    ns, key = ("new",), "k"
    stores = [JournalStore(db=str(tmp_path / h / "history.db"), journal=postgres_dsn) for h in "abc"]
    a, b, c = stores
    b_learn, b_catch_up, c_learn = b.memory.learn, b.memory.catch_up, c.memory.learn
    c_looked, c_go, c_committed = threading.Event(), threading.Event(), threading.Event()
    racer = threading.Thread(target=c.put, args=(ns, key, {"v": "c"}), daemon=True)
    learned: list[str] = []

    def b_learns(*args: Any, **kwargs: Any) -> Any:
        if not learned:
            a.put(ns, key, {"v": "a"})  # v1, after B found no item
            racer.start()
            _waited(c_looked)  # C read v1 and is about to replace it
        got = b_learn(*args, **kwargs)
        learned.append(got.id)
        return got

    def b_catches_up() -> int:
        made = b_catch_up()
        if learned and not c_go.is_set():  # B's look again after its learn: caught up, not yet read
            next_millisecond()  # v2 learned a later millisecond than vB: the newer of the two
            c_go.set()
            _waited(c_committed)
        return made

    def c_learns(*args: Any, **kwargs: Any) -> Any:
        if c_go.is_set():
            return c_learn(*args, **kwargs)
        c_looked.set()
        _waited(c_go)
        try:
            return c_learn(*args, **kwargs)  # v2, superseding v1
        finally:
            c_committed.set()

    monkeypatch.setattr(b.memory, "learn", b_learns)
    monkeypatch.setattr(b.memory, "catch_up", b_catches_up)
    monkeypatch.setattr(c.memory, "learn", c_learns)
    try:
        b.put(ns, key, {"v": "b"})
        racer.join(60)
        assert not racer.is_alive() and c_committed.is_set(), "C's put never replaced v1, or never returned"
        for store in stores:
            store.memory.catch_up()
            live = store.memory.recall(scope="langgraph:new", meta={"key": key}, limit=None)
            assert [r.metadata["value"] for r in live] == [{"v": "c"}]
    finally:
        c_go.set()
        c_committed.set()
        for store in stores:
            store.close()
