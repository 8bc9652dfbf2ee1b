"""The one-record lookup with a hint: every hint is untrusted, and so is the stream it points into.

``FileJournal.lookup(run, stream, id, hint=offset)`` takes the line at ``offset`` only when it
begins a line, ends within the acknowledged prefix (the watermark), decodes with a valid checksum
and is the record asked for. Each case below crafts a hint or a stream that one of those checks
alone refuses: the answer must then be what a full read of the stream says (the record, None, or
``journal_corrupt``), never the line at the hint.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import pytest

from journal import FileJournal, JournalCorrupt, Record
from tests._helpers.crafted import line, sealed_slot

STREAM = "memory-learn"


def _line(rid: str, seq: int, payload: dict[str, Any], key: str | None = None, *, run_id: str = "") -> bytes:
    """A line as this version writes it for ``run_id``'s stream (its checksum names them); without
    ``run_id``, as a version before that did (the checksum of the line alone)."""
    record = {"id": rid, "key": key, "payload": payload, "seq": seq, "ts": 1_700_000_000_000}
    return line(record, run_id, STREAM)


def _set_mark(path: Path, value: int) -> None:
    """Write the log's plain watermark (what a sync covered) as the log itself does."""
    raw = struct.pack("<Q", value)
    with open(f"{path}.lock", "r+b") as f:
        f.write(sealed_slot(raw))


def _mark(path: Path) -> int:
    with open(f"{path}.lock", "rb") as f:
        value: int = struct.unpack("<Q", f.read(8))[0]
    return value


@pytest.fixture
def stream(tmp_path: Path) -> tuple[Path, str, list[Record], dict[str, int], Path]:
    jr = FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    records = [jr.append(lease, STREAM, {"n": i}) for i in range(3)]
    hints = jr.hints(info.run_id, STREAM)
    path = jr.stream_path(info.run_id, STREAM)
    jr.close()
    assert _mark(path) == path.stat().st_size  # every line acknowledged
    return tmp_path / "j", info.run_id, records, hints, path


def _lookup(root: Path, run_id: str, rid: str, hint: int | None) -> Record | None:
    fresh = FileJournal(root)  # nothing cached: as a fresh process
    try:
        return fresh.lookup(run_id, STREAM, rid, hint=hint)
    finally:
        fresh.close()


def test_hints_are_where_each_line_begins_and_a_good_hint_answers(stream: Any) -> None:
    root, run_id, records, hints, path = stream
    data = path.read_bytes()
    for r in records:
        at = hints[r.id]
        assert at == 0 or data[at - 1 : at] == b"\n"
        assert _lookup(root, run_id, r.id, at) == r


def test_a_hint_mid_line_is_not_a_line_start(stream: Any) -> None:
    """A crafted line ``junk{record}``: from the hint on it decodes, but it begins mid-line. The
    full read finds the damaged line below the watermark and fails closed."""
    root, run_id, _, _, path = stream
    forged = _line("forged-id", 4, {"n": 99}, run_id=run_id)
    start = path.stat().st_size
    with open(path, "ab") as f:
        f.write(b"junk" + forged + b"\n")
    _set_mark(path, path.stat().st_size)
    with pytest.raises(JournalCorrupt) as err:
        _lookup(root, run_id, "forged-id", start + len(b"junk"))
    assert err.value.code == "journal_corrupt"


def test_a_line_past_the_watermark_is_never_taken_from_a_hint(stream: Any) -> None:
    """A copy of the first line with another id, appended but never acknowledged (past the
    watermark, out of sequence): a full read sees a torn tail, so the record is not there."""
    root, run_id, _, _, path = stream
    start = path.stat().st_size
    with open(path, "ab") as f:
        f.write(_line("never-acknowledged", 1, {"n": 0}, run_id=run_id) + b"\n")
    assert _mark(path) == start
    assert _lookup(root, run_id, "never-acknowledged", start) is None


def test_a_watermark_longer_than_the_file_fails_the_lookup_closed(stream: Any) -> None:
    # The mark claims acknowledged bytes the file no longer has: lines were lost, not a stale mark
    # (a cut lowers the mark before it truncates). The hint is not taken, and the full read it
    # falls back to names the first missing line.
    root, run_id, records, hints, path = stream
    _set_mark(path, path.stat().st_size + 1000)
    with pytest.raises(JournalCorrupt) as err:
        _lookup(root, run_id, records[2].id, hints[records[2].id])
    assert (err.value.path, err.value.line) == (path, len(records) + 1)


def test_a_hint_at_another_record_answers_the_cited_one(stream: Any) -> None:
    root, run_id, records, hints, _ = stream
    assert _lookup(root, run_id, records[0].id, hints[records[1].id]) == records[0]
    assert _lookup(root, run_id, "not-there", hints[records[1].id]) is None


def test_a_line_with_flipped_bytes_fails_closed(stream: Any) -> None:
    root, run_id, records, hints, path = stream
    at = hints[records[1].id]
    data = bytearray(path.read_bytes())
    data[at + data[at:].index(b'"n":1') + 4] = ord("7")  # the payload, under the checksum
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt):
        _lookup(root, run_id, records[1].id, at)


def test_a_forged_line_with_its_checksum_recomputed_is_what_a_full_read_says(stream: Any) -> None:
    """The journal is the authority on what its records say: a line rewritten in place with a good
    checksum reads as rewritten, by the hint or by a full read alike (the memory then finds its
    files differ from it and serves none)."""
    root, run_id, records, hints, path = stream
    at = hints[records[1].id]
    data = path.read_bytes()
    end = data.index(b"\n", at)
    forged = _line(records[1].id, 2, {"n": 1000}, run_id=run_id)
    path.write_bytes(data[:at] + forged + data[end:])
    _set_mark(path, path.stat().st_size)
    by_hint = _lookup(root, run_id, records[1].id, at)
    by_read = _lookup(root, run_id, records[1].id, None)
    assert by_hint is not None and by_hint.payload == {"n": 1000}
    assert by_hint == by_read


def test_a_stream_cut_since_the_hint_was_given_answers_as_a_full_read(stream: Any) -> None:
    root, run_id, records, hints, path = stream
    at = hints[records[2].id]
    with open(path, "r+b") as f:
        f.truncate(at)
    _set_mark(path, at)
    assert _lookup(root, run_id, records[2].id, at) is None
    assert _lookup(root, run_id, records[1].id, hints[records[1].id]) == records[1]


def test_a_stream_replaced_since_the_hint_was_given_answers_as_a_full_read(stream: Any) -> None:
    """Another file in the stream's place (a new inode) holding another record where the hint
    points: the cited record is not in the journal any more."""
    root, run_id, records, hints, path = stream
    lines = [_line(f"other-{n}", n + 1, {"n": n}, run_id=run_id) for n in range(3)]
    replacement = path.with_name("replacement")
    replacement.write_bytes(b"".join(x + b"\n" for x in lines))
    before = path.stat().st_ino
    os.replace(replacement, path)
    assert path.stat().st_ino != before
    _set_mark(path, path.stat().st_size)
    for r in records:
        assert _lookup(root, run_id, r.id, hints[r.id]) is None
    assert _lookup(root, run_id, "other-1", hints[records[1].id]) is not None


@pytest.mark.parametrize("size", [4000, 4096, 5000, 70_000, 200_000])
def test_a_line_longer_than_the_first_read_is_read_on_to_its_end(tmp_path: Path, size: int) -> None:
    """A lookup's first read holds the byte before the line and 4 kB of it; a longer record is
    read on in blocks and answers like any other, and neighbours around it still do."""
    jr = FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    records = [jr.append(lease, STREAM, {"n": i, "pad": "x" * (size if i == 1 else 10)}) for i in range(3)]
    hints = jr.hints(info.run_id, STREAM)
    jr.close()
    for r in records:
        assert _lookup(tmp_path / "j", info.run_id, r.id, hints[r.id]) == r
    assert _lookup(tmp_path / "j", info.run_id, records[2].id, hints[records[1].id] + 1) == records[2]
