"""A stream never holds one record id twice: an append never writes it (a keyed retry returns the
first), so a second line with an earlier record's id (a crafted or copied line, with a right
checksum and the next sequence number) is damage. Before, a full read returned both, ``find`` and
an unhinted ``lookup`` answered with the first, and ``hints`` pointed at the second, so a hinted
lookup answered with another record than the full read: now every read of the stream fails closed
with ``journal_corrupt`` naming the second line, and so does the next append.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from journal import FileJournal, JournalCorrupt, LineMarks, RecordCodec

STREAM = "s"


def test_a_second_line_with_an_earlier_records_id_is_journal_corrupt_naming_it(tmp_path: Path) -> None:
    jr = FileJournal(tmp_path)
    info, lease = jr.begin("f", "s", {})
    first = [jr.append(lease, STREAM, {"n": i}, key=f"k{i}") for i in range(2)]
    path = jr.stream_path(info.run_id, STREAM)
    jr.release(lease)
    jr.close()
    forged = replace(first[1], seq=3, payload={"n": "forged"})
    with path.open("ab") as f:
        f.write(RecordCodec(info.run_id, STREAM).encode(forged) + b"\n")
    lock = Path(f"{path}.lock")  # acknowledged: the watermark covers it
    lock.write_bytes(replace(LineMarks.parse(lock.read_bytes()), plain=path.stat().st_size).pack())

    jr = FileJournal(tmp_path)
    calls = {
        "read": lambda: jr.read(info.run_id, STREAM),
        "find": lambda: jr.find(info.run_id, STREAM, "k1"),
        "hints": lambda: jr.hints(info.run_id, STREAM),
        "lookup": lambda: jr.lookup(info.run_id, STREAM, first[1].id),
        "append": lambda: jr.append(jr.acquire(info.run_id), STREAM, {"n": 9}, key="k9"),
    }
    for name, call in calls.items():
        with pytest.raises(JournalCorrupt) as refused:
            call()
        err = refused.value
        assert (err.path, err.line, err.run_id, err.stream) == (path, 3, info.run_id, STREAM), name
        assert first[1].id in err.reason, name
    jr.close()
