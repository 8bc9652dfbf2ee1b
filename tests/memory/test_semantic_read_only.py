"""A read-only store asked by meaning writes nothing: no vectors file, no snapshot, no removal.

A read-only store (the dashboard's, a reader that must leave the store as it found it) never
writes, migrates or creates anything. Its searches by meaning made the vectors file again (with its
folder), stored the vectors they derived in it, and kept a snapshot beside it; and one whose derived
vector's finding was gone meanwhile could remove the vectors file whole. Its vectors now live in
its memory alone; a snapshot a writer left is read, never written.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import memory
import memory._vectors as vectors
from tests._helpers.embedders import hashed_words

MANY = 2_100  # enough findings that a first search reads (or writes) a snapshot


class _Hashed:
    name = "hashed@1"
    dims = 64

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return hashed_words(texts, self.dims)


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every file and folder below ``root``: its size, modification time and inode."""
    out = {}
    for where, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(where, name))
            out[os.path.relpath(os.path.join(where, name), root)] = (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def _store_of_many(db: Path) -> None:
    with memory.MemoryStore(db) as store, store.session(scope="zoo") as s:
        s.learn({"text": "the walrus enclosure floods every spring tide"})
        for i in range(MANY):
            s.learn({"text": f"feeding log {i}: the otters had sardines"})
        store.sync()


def test_a_read_only_search_by_meaning_makes_no_vectors_file_and_no_snapshot(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    _store_of_many(db)
    shutil.rmtree(vectors.vectors_path(db).parent, ignore_errors=True)  # derived state: a copy may lack it
    before = _tree(tmp_path)
    with memory.MemoryStore(db, read_only=True, embedder=_Hashed()) as reader:
        answers = reader.why("walrus enclosure floods", mode="semantic", limit=1)
        assert [a.finding.text for a in answers] == ["the walrus enclosure floods every spring tide"]
        assert reader.derive_vectors() == MANY + 1  # derived, in memory
    assert _tree(tmp_path) == before


def test_a_read_only_store_reads_a_writers_snapshot_and_leaves_the_vectors_file_as_it_was(
    tmp_path: Path,
) -> None:
    db = tmp_path / "history.db"
    _store_of_many(db)
    with memory.MemoryStore(db, embedder=_Hashed()) as writer:
        writer.why("walrus", mode="semantic")  # every vector derived, stored, and a snapshot kept
    cache = vectors.vectors_path(db).parent
    assert vectors.snapshots(cache)
    for suffix in ("-wal", "-shm"):  # as a writer that closed cleanly may leave it
        Path(f"{vectors.vectors_path(db)}{suffix}").unlink(missing_ok=True)
    with memory.MemoryStore(db) as store, store.session(scope="zoo") as s:
        s.learn({"text": "the penguins moved to the north pool"})  # a finding no stored vector has
        (gone,) = [e for e in store.recall(scope="zoo", limit=None) if "otters" in e.text][:1]
        s.forget(gone.key, reason="a duplicate")  # retired: a reader drops its vector from memory
    before = _tree(tmp_path)
    with memory.MemoryStore(db, read_only=True, embedder=_Hashed()) as reader:
        answers = reader.why("penguins north pool", mode="semantic", limit=1)
        assert [a.finding.text for a in answers] == ["the penguins moved to the north pool"]
        otters = reader.why("otters sardines", mode="semantic", limit=None)
        assert len(otters) == MANY - 1 and gone.key not in {a.finding.key for a in otters}
    assert _tree(tmp_path) == before
