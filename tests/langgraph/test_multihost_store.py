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
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for round_ in range(2):
        dbs = {h: tmp_path / f"{h}{round_}" / "history.db" for h in "ab"}
        ns = ("u",)
        with JournalStore(db=str(dbs["a"]), journal=postgres_dsn) as a:
            a.put(ns, "k", {"v": "zero"})
        procs = []
        for h, db in dbs.items():
            for w in range(2):
                proc = subprocess.Popen(
                    [sys.executable, "-c", _PUTTER, postgres_dsn, str(db), f"{h}{w}"],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
                procs.append(proc)
        for proc in procs:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("go\n")
            proc.stdin.close()
        for proc in procs:
            assert proc.stdout is not None
            proc.stdout.read()
            proc.stdout.close()
            assert proc.wait(120) == 0
        # a put that lost a race supersedes the version that won it: one item, the same on both
        seen = []
        for db in dbs.values():
            with JournalStore(db=str(db), journal=postgres_dsn) as store:
                items = store.search(ns)
                assert [i.key for i in items] == ["k"], [i.value for i in items]
                seen.append(items[0].value)
        assert seen[0] == seen[1] and seen[0]["v"].endswith("-24")
