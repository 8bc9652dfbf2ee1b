"""A file journal's ``hints`` while another thread appends to the stream: ``read`` hands back the
log's own cache, which an append extends in place, so the hints are of the records counted when
they were asked for, never a failure (a ``MemoryStore`` sync saves a run's hints while the store's
writes go on, on another thread)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import journal


def test_hints_asked_while_an_append_extends_the_stream_are_those_of_the_records_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    written = [jr.append(lease, "memory-learn", {"n": i}) for i in range(3)]
    log: Any = jr._stream(info.run_id, "memory-learn").log  # the stream's log (its cache)
    real = log.starts
    appended: list[journal.Record] = []

    def append_first(count: int) -> list[int] | None:
        # another thread's append, landing between the read and the look at where lines begin
        if not appended:
            appended.append(jr.append(lease, "memory-learn", {"n": 3}))
        return real(count)  # type: ignore[no-any-return]

    monkeypatch.setattr(log, "starts", append_first)
    try:
        hints = jr.hints(info.run_id, "memory-learn")
        monkeypatch.undo()
        assert appended and set(hints) == {r.id for r in written}
        for record in written:
            assert jr.lookup(info.run_id, "memory-learn", record.id, hint=hints[record.id]) == record
        assert set(jr.hints(info.run_id, "memory-learn")) == {r.id for r in [*written, *appended]}
    finally:
        jr.close()
