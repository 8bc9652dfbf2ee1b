"""An update killed (SIGKILL) after it retired the version it replaces and before it renamed the new
one into place. Its commit is durable, so the memory's live version is the new one; before, every
later read on this host found neither version (the old one retired, the new one with no file) until
a resume, a materializing ``sync`` or ``flows check --repair`` ran. Now the first read (or sync) that
meets the retired version publishes the new one from the commit its retired file cites. On a journal
hosts share a read writes nothing and ``catch_up`` publishes it, as it did before (checked too)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import memory
from tests._helpers.failpoints import run_armed
from tests.conftest import ROOT

OLD = {"text": "the bridge closes at ten", "tags": ["bridge"]}
NEW = {"text": "the bridge closes at eleven since the works ended", "tags": ["bridge"]}

_UPDATE = """
import sys
import memory
db, journal, memory_id = sys.argv[1], sys.argv[2], sys.argv[3]
with memory.MemoryStore(db, journal=journal) as store, store.session(scope="desk") as s:
    s.update(memory_id, {"text": "the bridge closes at eleven since the works ended", "tags": ["bridge"]})
print("returned", flush=True)
"""


def _killed_update(db: Path, journal: str, memory_id: str) -> None:
    """The update of ``memory_id`` in a child SIGKILLed between the retirement and the rename."""
    done = run_armed("memory.after_retire_replaced=kill", _UPDATE, str(db), journal, memory_id)
    assert done.returncode == -9, (done.returncode, done.stderr[-2000:])
    assert "returned" not in done.stdout


@pytest.mark.parametrize("first", ["recall", "get", "sync", "fresh process recall"])
@pytest.mark.parametrize("synced", [False, True], ids=["old unsynced", "old synced"])
def test_an_update_killed_before_its_rename_leaves_the_new_version_live(
    tmp_path: Path, journal_location: str, first: str, synced: bool
) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db, journal=journal_location) as store, store.session(scope="desk") as s:
        old = s.learn(OLD)
    if synced:
        with memory.MemoryStore(db, journal=journal_location) as store:
            store.sync()
    _killed_update(db, journal_location, old.memory_id)
    shared = journal_location.startswith("postgresql")
    with memory.MemoryStore(db, journal=journal_location) as store:
        if shared:  # a journal hosts share: catch_up publishes what this host lacks (a read never writes)
            assert store.catch_up() == 1
        if first == "sync":
            store.sync(materialize=False)  # moves the retirement into the DB: the new version too
        elif first == "get":
            assert store.get(old.key) is None  # retired: not shown, and the new version published
        elif first == "fresh process recall":
            out = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "import sys, memory\n"
                    "with memory.MemoryStore(sys.argv[1], journal=sys.argv[2]) as s:\n"
                    "    print([e.text for e in s.recall(scope='desk', limit=None)])",
                    str(db),
                    journal_location,
                ],
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            assert out.stdout.strip() == repr([NEW["text"]])
        live = store.recall(scope="desk", limit=None)
        # one live version, the new one, of the same memory; the old one stays retired
        assert [(e.text, e.memory) for e in live] == [(NEW["text"], old.memory_id)]
        assert store.get(old.key) is None
        # nothing journaled twice: one commit of each version, and the old one's retirement
        assert sorted(e.kind for e in store.history(old.key)) == ["learned", "learned", "superseded"]
        current = store.current(old.memory_id)
        assert current is not None and current.text == NEW["text"]
        store.sync()
        assert [e.text for e in store.recall(scope="desk", limit=None)] == [NEW["text"]]


def test_a_read_only_store_never_publishes_the_new_version(tmp_path: Path) -> None:
    # A reader that must write nothing (the dashboard) leaves the store as it found it: it answers
    # without the memory until a store that may write reads or syncs.
    db, journal = tmp_path / "history.db", str(tmp_path / "journal")
    with memory.MemoryStore(db, journal=journal) as store, store.session(scope="desk") as s:
        old = s.learn(OLD)
    _killed_update(db, journal, old.memory_id)
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if ".stage" not in p.name)
    with memory.MemoryStore(db, journal=journal, read_only=True) as reader:
        assert reader.recall(scope="desk", limit=None) == []
    after = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if ".stage" not in p.name)
    assert after == before
    with memory.MemoryStore(db, journal=journal) as store:
        assert [e.text for e in store.recall(scope="desk", limit=None)] == [NEW["text"]]
