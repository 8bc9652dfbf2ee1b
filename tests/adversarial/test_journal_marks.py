"""A stream's mark file (``<stream>.jsonl.lock``) is untrusted bytes, like the stream itself.

Its slots are checksummed, but a CRC is not a signature: a crafted file, or a stale one restored
beside a newer stream, parses. The marks decide what a locked open cuts (a poisoned end), so
marks this journal never writes are refused with ``journal_corrupt`` naming the mark file, and
nothing is cut; a cut that consistent marks order is made, but the bytes it takes are kept beside
the stream (``.<stream>.jsonl.cut-<generation>``), never destroyed, and an erasure reaches them too.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

import journal
from journal import FileJournal, JournalCorrupt, JournalUnwritable, LineMarks
from tests._helpers.failpoints import armed

STREAM = "memory-learn"


def _acknowledged(root: Path, count: int = 3) -> tuple[str, journal.Lease, Path, list[journal.Record]]:
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", {})
    records = [jr.append(lease, STREAM, {"n": i, "text": f"finding {i}"}, key=f"k{i}") for i in range(count)]
    path = jr.stream_path(info.run_id, STREAM)
    jr.close()
    return info.run_id, lease, path, records


def _lock(path: Path) -> Path:
    return Path(f"{path}.lock")


def _marks(path: Path) -> LineMarks:
    return LineMarks.parse(_lock(path).read_bytes())


def _read(root: Path, run_id: str) -> list[journal.Record]:
    jr = FileJournal(root)
    try:
        return jr.read(run_id, STREAM)
    finally:
        jr.close()


def _append(root: Path, lease: journal.Lease, n: int) -> journal.Record:
    jr = FileJournal(root)
    try:
        return jr.append(lease, STREAM, {"n": n}, key=f"late{n}")
    finally:
        jr.close()


def _impossible(marks: LineMarks, case: str) -> LineMarks:
    assert marks.plain is not None
    return {
        # a poison below the watermark: obeyed, the locked open cut every acknowledged line
        "poison below the mark": replace(marks, poison=0),
        "poison below the file-system mark": replace(marks, plain=0, filesystem=marks.plain, poison=1),
        # past the log's end: obeyed, the cut recorded a watermark the file never reached
        "poison past the end": replace(marks, poison=marks.plain + 1_000_000),
        # values no file or count reaches
        "a poison of 2**63": replace(marks, poison=2**63),
        "a generation of 2**64 - 2": replace(marks, generation=2**64 - 2),
        "a cut at 2**63": replace(marks, cuts=(2**63, None, None, None)),
    }[case]


@pytest.mark.parametrize(
    "case",
    [
        "poison below the mark",
        "poison below the file-system mark",
        "poison past the end",
        "a poison of 2**63",
        "a generation of 2**64 - 2",
        "a cut at 2**63",
    ],
)
def test_marks_this_journal_never_writes_are_journal_corrupt_naming_the_mark_file_and_nothing_is_cut(
    tmp_path: Path, case: str
) -> None:
    run_id, lease, path, records = _acknowledged(tmp_path)
    before = path.read_bytes()
    crafted = _impossible(_marks(path), case)
    _lock(path).write_bytes(crafted.pack())
    with pytest.raises(JournalCorrupt) as refused:
        _append(tmp_path, lease, 9)
    err = refused.value
    assert err.code == "journal_corrupt"
    assert err.path == _lock(path)
    assert (err.run_id, err.stream) == (run_id, STREAM)
    assert "impossible marks" in err.reason
    assert path.read_bytes() == before  # nothing cut, nothing appended
    assert _marks(path) == crafted  # nothing recorded over the evidence
    assert not list(path.parent.glob(".*.cut-*"))
    # a reader never answers with fewer acknowledged records: all of them, or the same refusal
    try:
        assert _read(tmp_path, run_id) == records
    except JournalCorrupt as exc:
        assert exc.path == _lock(path)


def test_a_cut_at_a_poisoned_point_keeps_the_bytes_it_takes_beside_the_stream(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Poison 0 over a mark of 0 is what a legitimately failed first sync leaves, so the cut is
    made: but when the mark file lies (here: over three acknowledged records), what it cut is
    kept, byte for byte, and the warning names where."""
    run_id, lease, path, _records = _acknowledged(tmp_path)
    before = path.read_bytes()
    _lock(path).write_bytes(replace(_marks(path), plain=0, poison=0).pack())
    with caplog.at_level(logging.WARNING, logger="journal"):
        late = _append(tmp_path, lease, 9)
    assert _read(tmp_path, run_id) == [late]
    kept = path.with_name(f".{path.name}.cut-1")
    assert kept.read_bytes() == before
    assert str(kept) in caplog.text
    assert FileJournal(tmp_path).streams(run_id) == [STREAM]  # the kept bytes are not a stream


def test_a_failed_sync_keeps_the_refused_line_aside_and_an_erasure_rewrites_its_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The legitimate path: a sync fails, its caller is refused, the next locked open cuts the
    poisoned end into a kept file. The retry (the same key, so the same record id) is erased
    later: the kept copy of its line is rewritten too, so the erased text is nowhere."""
    jr = FileJournal(tmp_path)
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, STREAM, {"text": "kept finding"}, key="a")
    with armed(monkeypatch, "linelog.before_fsync=EIO:once"), pytest.raises(JournalUnwritable):
        jr.append(lease, STREAM, {"text": "secret finding"}, key="b")
    retried = jr.append(lease, STREAM, {"text": "secret finding"}, key="b")
    path = jr.stream_path(info.run_id, STREAM)
    kept = sorted(path.parent.glob(f".{path.name}.cut-*"))
    assert len(kept) == 1
    assert b"secret finding" in kept[0].read_bytes()
    assert [r.payload["text"] for r in jr.read(info.run_id, STREAM)] == ["kept finding", "secret finding"]
    jr.finish(lease, journal.RunState.DONE)
    assert jr.rewrite_payloads(info.run_id, STREAM, {retried.seq: {"erased": True}}, pad="pad") == 1
    assert b"secret finding" not in path.read_bytes()
    assert b"secret finding" not in kept[0].read_bytes()
    assert b'"erased":true' in kept[0].read_bytes()  # the copy is the tombstone, as the record is
    jr.close()
