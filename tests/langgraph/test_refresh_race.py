"""A read that refreshes an item's TTL racing another process's delete never brings the item back:
neither for the reader nor for any other store. The race is made certain: the refresh is handed the
version read before the delete, as a reader preempted between its read and its refresh would be;
and then the same read runs in a second process against a delete in the first, many times."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from flows.langgraph import JournalStore
from flows.langgraph._store import scope_of
from tests.conftest import ROOT

TTL = {"default_ttl": 60.0, "refresh_on_read": True}


def test_a_refresh_of_a_version_deleted_meanwhile_is_not_a_put(tmp_path: Path) -> None:
    db = str(tmp_path / "history.db")
    with JournalStore(db=db, ttl=TTL) as reader, JournalStore(db=db, ttl=TTL) as deleter:
        reader.put(("users", "u1"), "prefs", {"theme": "dark"})
        stale = reader.finding(("users", "u1"), "prefs")  # what the reader read
        assert stale is not None
        deleter.delete(("users", "u1"), "prefs")
        assert reader._refresh(scope_of(("users", "u1")), "prefs", stale) is None
        for store in (reader, deleter):
            assert store.get(("users", "u1"), "prefs", refresh_ttl=True) is None
            assert store.search(("users",), refresh_ttl=True) == []
        # a put after the delete is a new item, not a supersede of the deleted version
        reader.put(("users", "u1"), "prefs", {"theme": "light"})
        item = deleter.get(("users", "u1"), "prefs")
        assert item is not None and item.value == {"theme": "light"}


_READER = """
import sys
from flows.langgraph import JournalStore
ttl = {"default_ttl": 60.0, "refresh_on_read": True}
with JournalStore(db=sys.argv[1], ttl=ttl) as s:
    print("ready", flush=True)
    for _ in range(int(sys.argv[2])):
        s.get(("users", "u1"), "prefs", refresh_ttl=True)
        s.search(("users",), refresh_ttl=True)
"""


def test_refreshing_reads_in_another_process_never_revive_a_delete(tmp_path: Path) -> None:
    db = str(tmp_path / "history.db")
    for round_no in range(3):
        with JournalStore(db=db, ttl=TTL) as writer:
            writer.put(("users", "u1"), "prefs", {"theme": f"dark-{round_no}"})
            reader = subprocess.Popen(
                [sys.executable, "-c", textwrap.dedent(_READER), db, "40"],
                cwd=ROOT,
                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert reader.stdout is not None and reader.stdout.readline().strip() == "ready"
            writer.delete(("users", "u1"), "prefs")
            _, err = reader.communicate(timeout=120)
            assert reader.returncode == 0, err
            assert writer.get(("users", "u1"), "prefs") is None
        with JournalStore(db=db, ttl=TTL) as fresh:
            assert fresh.get(("users", "u1"), "prefs") is None
            assert fresh.search(("users",)) == []
