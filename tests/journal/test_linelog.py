"""The durable line log: torn tails are cut, damage fails closed."""

from __future__ import annotations

import contextlib
import os
import zlib
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import journal
from journal import JournalCorrupt, LineDamaged, LineLog, Record, RecordCodec
from tests._helpers.failpoints import armed


def _log(path: Path) -> LineLog[Record]:
    return LineLog(path, RecordCodec("run", "s"), sequence=lambda r: r.seq)


def _rec(seq: int, text: str = "x") -> Record:
    return Record(
        run_id="run", stream="s", seq=seq, id=f"id{seq}", key=f"k{seq}", ts_ms=seq, payload={"t": text}
    )


def _write(log: LineLog[Record], n: int) -> None:
    with log.locked():
        log.recover()
        for i in range(1, n + 1):
            log.append(_rec(i))


def test_record_codec_round_trips_and_checks_its_crc() -> None:
    codec = RecordCodec("run", "s")
    line = codec.encode(_rec(3, "héllo\nworld"))
    assert b"\n" not in line
    assert codec.decode(line) == _rec(3, "héllo\nworld")
    flipped = line.replace(b"world", b"worle")
    with pytest.raises(LineDamaged) as err:
        codec.decode(flipped)
    assert err.value.torn is False


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_raise_only_line_damaged(data: bytes) -> None:
    codec = RecordCodec("run", "s")
    with contextlib.suppress(LineDamaged):
        codec.decode(data.replace(b"\n", b""))


def test_a_torn_tail_cut_at_every_offset_keeps_exactly_the_complete_prefix(tmp_path: Path) -> None:
    k = 4
    ref = tmp_path / "ref.jsonl"
    _write(_log(ref), k)
    full = ref.read_bytes()
    last_start = full.rstrip(b"\n").rfind(b"\n") + 1
    prefix = full[:last_start]
    for cut in range(last_start, len(full)):  # every byte offset of the last record, short of whole
        path = tmp_path / f"cut{cut}.jsonl"
        path.write_bytes(full[:cut])
        log = _log(path)
        assert [r.seq for r in log.read()] == [1, 2, 3]  # a lock-free read ignores the tail
        with log.locked():
            assert [r.seq for r in log.recover()] == [1, 2, 3]
            log.append(_rec(4, "again"))
        data = path.read_bytes()
        assert data.startswith(prefix)  # nothing before the cut changed
        assert data[len(prefix) :] == RecordCodec("run", "s").encode(_rec(4, "again")) + b"\n"
        assert [r.payload["t"] for r in _log(path).read()] == ["x", "x", "x", "again"]


@pytest.mark.parametrize(
    "tail", [b"\x00" * 57, b"\x00" * 10 + b"\n" + b"\x00" * 5, b"garbage{\n", b'{"seq":']
)
def test_zeros_and_garbage_after_the_last_record_are_a_torn_tail(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "log.jsonl"
    _write(_log(path), 2)
    good = path.read_bytes()
    path.write_bytes(good + tail)
    log = _log(path)
    with log.locked():
        assert [r.seq for r in log.recover()] == [1, 2]
    assert path.read_bytes() == good


def test_a_stale_valid_looking_line_at_the_end_is_cut_as_torn(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    _write(_log(path), 3)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines) + lines[0])  # an old record's bytes, out of sequence
    with _log(path).locked() as log:
        assert [r.seq for r in log.recover()] == [1, 2, 3]


@pytest.mark.parametrize("victim", [0, 1, 2])
def test_a_flipped_byte_in_an_earlier_line_fails_closed_naming_file_and_line(
    tmp_path: Path, victim: int
) -> None:
    path = tmp_path / "log.jsonl"
    _write(_log(path), 4)
    lines = path.read_bytes().splitlines(keepends=True)
    damaged = bytearray(lines[victim])
    damaged[damaged.index(b'"t":"x"') + 5] = ord("y")
    lines[victim] = bytes(damaged)
    path.write_bytes(b"".join(lines))
    before = path.read_bytes()
    for attempt in ("read", "recover", "reverse"):
        log = _log(path)
        with pytest.raises(JournalCorrupt) as err:
            if attempt == "read":
                log.read()
            elif attempt == "reverse":
                list(log.iter_reverse())
            else:
                with log.locked():
                    log.recover()
        assert err.value.code == "journal_corrupt"
        assert err.value.path == path
        assert err.value.line == victim + 1
        assert str(path) in str(err.value)
    assert path.read_bytes() == before  # failing closed never cuts


def test_a_flipped_byte_in_the_complete_last_line_is_damage_not_a_tear(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    _write(_log(path), 3)
    data = bytearray(path.read_bytes())
    data[data.rindex(b'"t":"x"') + 5] = ord("z")
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt) as err, _log(path).locked() as log:
        log.recover()
    assert err.value.line == 3


def test_appends_write_whole_lines_and_the_file_and_dir_are_created(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "log.jsonl"
    log = _log(path)
    _write(log, 3)
    raw = path.read_bytes()
    assert raw.count(b"\n") == 3 and raw.endswith(b"\n")
    for line in raw.splitlines():
        obj = orjson.loads(line)
        crc = obj.pop("crc")
        # the checksum covers the run and stream the line was written for, then the line
        bound = b"run\0s\0" + orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
        assert int(crc, 16) == zlib.crc32(bound)
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


def test_append_without_the_lock_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError):
        _log(tmp_path / "l.jsonl").append(_rec(1))


def test_iter_reverse_reads_newest_first_across_blocks(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    log = _log(path)
    with log.locked():
        log.recover()
        for i in range(1, 3001):
            log.append(_rec(i, "y" * (i % 50)))
    with open(path, "ab") as fh:
        fh.write(b'{"partial')
    seqs = [r.seq for r in _log(path).iter_reverse()]
    assert seqs == list(range(3000, 0, -1))


def test_a_failed_read_is_not_cached(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    _write(_log(path), 2)
    good = path.read_bytes()
    log = _log(path)
    path.write_bytes(b"junk\n" + good)
    with pytest.raises(JournalCorrupt):
        log.read()
    path.write_bytes(good)
    assert [r.seq for r in log.read()] == [1, 2]


def test_a_failed_append_leaves_no_part_of_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "log.jsonl"
    _write(_log(path), 1)
    good = path.read_bytes()
    log = _log(path)
    with (
        armed(monkeypatch, "linelog.before_fsync=EIO"),
        pytest.raises(journal.JournalUnwritable),
        log.locked(),
    ):
        log.recover()
        log.append(_rec(2))
    assert path.read_bytes() == good
    assert os.path.getsize(path) == len(good)


def _opens_of(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The opens of ``path`` from now on (a list that fills as they happen)."""
    opened: list[str] = []
    real = os.open

    def counting(file: str | os.PathLike[str], *args: object, **kwargs: object) -> int:
        if os.fspath(file) == str(path):
            opened.append(os.fspath(file))
        return real(file, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", counting)
    return opened


def test_a_reader_of_an_unchanged_log_does_not_open_it_and_sees_the_next_append(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.jsonl"
    _write(_log(path), 3)
    reader = _log(path)
    first = list(reader.read())
    opened = _opens_of(path, monkeypatch)
    assert list(reader.read()) == first == [_rec(1), _rec(2), _rec(3)]
    assert opened == []
    writer = _log(path)
    with writer.locked():
        writer.recover()
        writer.append(_rec(4))
    assert list(reader.read()) == [*first, _rec(4)]


def test_a_log_replaced_by_another_of_the_same_size_is_read_anew(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    _write(_log(path), 3)
    reader = _log(path)
    assert [r.payload for r in reader.read()] == [{"t": "x"}] * 3
    other = tmp_path / "other" / "log.jsonl"
    other_log = _log(other)
    with other_log.locked():
        other_log.recover()
        for i in range(1, 4):
            other_log.append(_rec(i, "y"))
    assert other.stat().st_size == path.stat().st_size
    os.replace(other, path)
    os.replace(f"{other}.lock", f"{path}.lock")
    assert [r.payload for r in reader.read()] == [{"t": "y"}] * 3


def test_a_torn_tail_replaced_by_a_whole_line_of_its_length_is_read(tmp_path: Path) -> None:
    """A torn tail is cut without a new generation, so a line of the same length written in its
    place leaves the size and the marks as they were (and here the mtime too): a reader that saw
    the tail reads the file again rather than trust its size."""
    path = tmp_path / "log.jsonl"
    _write(_log(path), 2)
    line = RecordCodec("run", "s").encode(_rec(3)) + b"\n"
    with path.open("ab") as f:
        f.write(line[:-1] + b"#")
    reader = _log(path)
    assert list(reader.read()) == [_rec(1), _rec(2)]
    before = path.stat()
    with path.open("r+b") as f:
        f.truncate(before.st_size - len(line))
        f.seek(0, os.SEEK_END)
        f.write(line)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_size == before.st_size
    assert list(reader.read()) == [_rec(1), _rec(2), _rec(3)]


_MARK_VALUES = st.one_of(st.none(), st.integers(0, 2**63 - 1))


@given(
    plain=_MARK_VALUES,
    filesystem=_MARK_VALUES,
    poison=_MARK_VALUES,
    generation=st.integers(0, 2**63 - 1),
    cuts=st.tuples(_MARK_VALUES, _MARK_VALUES, _MARK_VALUES, _MARK_VALUES),
    fs_poison=_MARK_VALUES,
    fs_poison_gen=_MARK_VALUES,
)
def test_marks_with_a_generation_read_back_exactly_as_written(**fields: object) -> None:
    # A log remembers the marks it wrote as what their bytes say, so its next read of unchanged
    # bytes skips the parse: that holds only if every such value survives the round trip.
    marks = journal.LineMarks(**fields)  # type: ignore[arg-type]
    assert journal.LineMarks.parse(marks.pack()) == marks


def test_a_log_reads_the_marks_another_writer_wrote_after_its_own(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    first, second = _log(path), _log(path)
    with first.locked():
        first.recover()
        first.append(_rec(1))
    mark = first.watermark()
    with second.locked():
        second.recover()
        second.append(_rec(2))
    assert first.watermark() == second.watermark() > (mark or 0)
    assert [r.seq for r in first.read()] == [1, 2]
