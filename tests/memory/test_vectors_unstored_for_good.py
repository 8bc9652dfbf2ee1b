"""A vector derived while its finding was erased is deleted again for good, as the erase's own is.

A search stores the vectors it derives, then looks at whether their findings are still held; one
erased meanwhile is deleted again. That delete's checkpoint was not looked at: with another reader
of the vectors file in a read (a backup, the sqlite3 shell, another process's scan), the checkpoint
answered busy and the erased finding's vector stayed in the file's write-ahead log after the erase
had returned. Now it goes as the erase's delete does: checked, else the file is removed whole.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

import memory
import memory._vectors as vectors
from tests._helpers.embedders import hashed_words
from tests._helpers.grep import files_holding
from tests.memory.conftest import Clock

SECRET = "the patient Ingrid Zorbalov is allergic to peanuts"


class _EraseWhileDeriving:
    """A deterministic embedder that, as it derives the secret's vector, erases the secret (another
    store, another thread, to its end) and then opens a read of the vectors file, held."""

    name = "erase-while-deriving@1"
    dims = 64

    def __init__(self, db: Path, key: str) -> None:
        self.db, self.key = db, key
        self.reader: sqlite3.Connection | None = None

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self.reader is None and any(SECRET in t for t in texts):
            worker = threading.Thread(target=self._erase)
            worker.start()
            worker.join(60)
            self.reader = sqlite3.connect(vectors.vectors_path(self.db), isolation_level=None)
            self.reader.execute("BEGIN")
            self.reader.execute("SELECT count(*) FROM vectors").fetchone()  # a read, held
        return hashed_words(texts, self.dims)

    def _erase(self) -> None:
        with memory.MemoryStore(self.db, clock=Clock()) as other, other.session(scope="clinic") as s:
            s.erase(self.key, reason="asked to")


def test_a_vector_derived_while_its_finding_was_erased_leaves_no_byte_with_a_reader_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(vectors, "BUSY_WAIT_S", 0.2)  # the checkpoint's wait for the reader
    db = tmp_path / "history.db"
    with memory.MemoryStore(db, clock=Clock()) as store, store.session(scope="clinic") as s:
        secret = s.learn({"text": SECRET})
        s.learn({"text": "the clinic opens at nine on weekdays"})
        store.sync()
    embedder = _EraseWhileDeriving(db, secret.key)
    with memory.MemoryStore(db, embedder=embedder, clock=Clock()) as store:
        answers = store.why("patient Ingrid allergic peanuts", mode="semantic")
        assert embedder.reader is not None
        assert SECRET not in [a.text for a in answers]
        # the vectors file and its log (keys and vectors alone) hold the erased key nowhere; an
        # erase keeps a key elsewhere (its audit record, the journal's key index)
        held = files_holding(vectors.vectors_path(db).parent, secret.key)
        assert [h for h in held if Path(h).name.startswith("vectors")] == []
        embedder.reader.close()
        # the search goes on: the vectors file is made anew and kept
        again = store.why("clinic opens nine", mode="semantic")
        assert [a.text for a in again] == ["the clinic opens at nine on weekdays"]


class _Hashed:
    name = "hashed@1"
    dims = 64

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return hashed_words(texts, self.dims)


def test_a_process_whose_vectors_file_was_removed_forgets_what_it_read_and_writes_no_snapshot_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An erase whose checkpoint a reader kept busy removes the vectors file whole. A process that
    had it open went on with the removed file: after a later erase, its next search (many findings
    to derive) wrote a snapshot from its memory and the removed file's keys, the erased finding's
    vector among them. It now sees the file at the path is another, forgets what it read, and
    opens the path afresh."""
    import numpy as np

    monkeypatch.setattr(vectors, "BUSY_WAIT_S", 0.2)
    db = tmp_path / "history.db"
    with memory.MemoryStore(db, clock=Clock()) as store, store.session(scope="clinic") as s:
        secret = s.learn({"text": SECRET})
        other = s.learn({"text": "the clinic wifi password is on the fridge"})
        store.sync()
    searcher = memory.MemoryStore(db, embedder=_Hashed(), clock=Clock())
    try:
        searcher.why("patient Ingrid allergic peanuts", mode="semantic")  # its file open, vectors read
        reader = sqlite3.connect(vectors.vectors_path(db), isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM vectors").fetchone()
        with memory.MemoryStore(db, clock=Clock()) as eraser, eraser.session(scope="clinic") as s:
            s.erase(other.key, reason="asked to")  # the checkpoint kept busy: the file goes whole
        reader.close()
        assert not vectors.vectors_path(db).exists()
        with memory.MemoryStore(db, clock=Clock()) as eraser, eraser.session(scope="clinic") as s:
            s.erase(secret.key, reason="asked to")
        with memory.MemoryStore(db, clock=Clock()) as store, store.session(scope="clinic") as s:
            for i in range(2_100):  # enough that the next search keeps a snapshot
                s.learn({"text": f"bulk finding {i} of the clinic archive"})
            store.sync()
        answers = searcher.why("patient Ingrid allergic peanuts", mode="semantic")
        assert SECRET not in [a.text for a in answers]
    finally:
        searcher.close()
    vec = np.asarray(hashed_words([SECRET], 64), dtype=np.float32)[0]
    needle = (vec / np.linalg.norm(vec)).astype("<f2").tobytes()
    cache = vectors.vectors_path(db).parent
    assert vectors.snapshots(cache)  # a snapshot was written, of the file at the path
    assert [p.name for p in cache.iterdir() if p.is_file() and needle in p.read_bytes()] == []
