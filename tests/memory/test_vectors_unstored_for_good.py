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
