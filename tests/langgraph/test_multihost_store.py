"""The LangGraph store on two hosts (separate ``db``s) sharing one PostgreSQL journal: an item put
on one host is read, updated and deleted as that one item on the other, with no sync between, and
puts of one key racing on both hosts leave one item."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("psycopg")

from flows.langgraph import JournalStore

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
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
    for proc in procs:
        assert proc.stdout is not None
        proc.stdout.read()
        proc.stdout.close()
        assert proc.wait(120) == 0


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
                # never none: a put only forgets what it saw a newer version of
                assert live, shown
                if hosts == "one file journal":
                    assert len(live) == 1, shown
                # on two hosts two may be left (about one run in ten, one item of twenty) until the
                # key's next put: see docs/LANGGRAPH.md
