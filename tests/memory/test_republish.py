"""``MemoryStore.republish``: a learned file restored from its journal record alone."""

from __future__ import annotations

from pathlib import Path

import pytest

import journal
import memory
from tests.memory.conftest import learned_files

FINDING = {"text": "the cache is cold at dawn", "tags": ["cache"]}


def test_republish_restores_a_damaged_or_lost_file_byte_identical_from_its_record(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    learned = store.learn(FINDING, root)
    original = learned.path.read_bytes()
    record = root.journal.find(root.run_id, memory.STREAM, learned.id)
    assert record is not None

    learned.path.write_bytes(b"{damaged")
    assert store.republish(record) == learned.path
    assert learned.path.read_bytes() == original

    learned.path.unlink()
    assert store.republish(record) == learned.path
    assert learned.path.read_bytes() == original
    assert [e.key for e in store.recall()] == [learned.id]


def test_republish_refuses_a_record_of_another_stream_and_writes_nothing(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    learned = store.learn(FINDING, root)
    learned.path.unlink()
    committed = root.journal.find(root.run_id, memory.STREAM, learned.id)
    assert committed is not None
    # A learn's payload, but in another stream: it is no commit of a finding.
    elsewhere = root.journal.append(root.lease, "notes", committed.payload)
    assert isinstance(elsewhere, journal.Record)
    with pytest.raises(ValueError, match="not a memory-learn record"):
        store.republish(elsewhere)
    assert learned_files(db) == []
