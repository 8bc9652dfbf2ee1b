"""Opening a long line log for append costs its tail, not its length.

A locked open for append decodes from the last line at or below the watermark to the end; damage
further back is left to full reads, which still fail closed on it. Bytes read are counted through a
wrapper around the reads the log makes, so no timing is involved.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from journal import JournalCorrupt, LineLog, Record, RecordCodec

LINES = 20_000


def _rec(seq: int) -> Record:
    return Record("r", "s", seq, f"id{seq}", None, seq, {"t": f"line {seq:06d}"})


def _log(path: Path, *, numbered: bool) -> LineLog[Record]:
    return LineLog(path, RecordCodec("r", "s"), sequence=(lambda r: r.seq) if numbered else None)


@pytest.fixture(params=[True, False], ids=["numbered", "bare"])
def big(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[Path, bool]:
    """A log of ``LINES`` acknowledged records (one write, one sync: the watermark covers them)."""
    numbered = bool(request.param)
    path = tmp_path / "big.jsonl"
    log = _log(path, numbered=numbered)
    with log.locked():
        end = log.write([_rec(i) for i in range(1, LINES + 1)])
    log.sync_to(end)
    assert log.watermark() == end == path.stat().st_size
    return path, numbered


@pytest.fixture
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Count the bytes the line log reads from any file."""
    counted: list[int] = []
    real_pread, real_read = os.pread, os.read

    def pread(fd: int, n: int, offset: int) -> bytes:
        data = real_pread(fd, n, offset)
        counted.append(len(data))
        return data

    def read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        counted.append(len(data))
        return data

    monkeypatch.setattr(os, "pread", pread)
    monkeypatch.setattr(os, "read", read)
    yield counted


def _damage_line(path: Path, line_no: int) -> None:
    data = bytearray(path.read_bytes())
    start = 0
    for _ in range(line_no - 1):
        start = data.index(b"\n", start) + 1
    data[start + 10] ^= 0x01  # inside the JSON: the checksum no longer matches
    path.write_bytes(bytes(data))


def test_a_locked_append_reads_the_tail_not_the_whole_log(
    big: tuple[Path, bool], bytes_read: list[int]
) -> None:
    path, numbered = big
    counted = bytes_read
    good = path.read_bytes()
    with path.open("ab") as fh:
        fh.write(b'{"id":"torn by a crash')
    log = _log(path, numbered=numbered)
    with log.locked():
        log.append(_rec(LINES + 1))  # the open cuts the torn tail first, reading only the tail
    assert path.read_bytes() == good + RecordCodec("r", "s").encode(_rec(LINES + 1)) + b"\n"
    assert sum(counted) < 200_000 < len(good) // 5, (sum(counted), len(good))
    assert log.watermark() == path.stat().st_size


def test_damage_early_in_a_long_log_is_not_touched_by_a_locked_append_but_a_read_fails_closed_on_it(
    big: tuple[Path, bool],
) -> None:
    path, numbered = big
    _damage_line(path, 10)
    with _log(path, numbered=numbered).locked() as log:
        log.append(_rec(LINES + 1))  # the open looks at the tail only
    with pytest.raises(JournalCorrupt) as err:
        _log(path, numbered=numbered).read()
    assert (err.value.path, err.value.line) == (path, 10)
    with pytest.raises(JournalCorrupt) as full, _log(path, numbered=numbered).locked() as log:
        log.recover()  # a full recovery still reads every line
    assert full.value.line == 10


def test_a_tail_open_still_cuts_a_torn_tail_and_fails_closed_on_the_last_acknowledged_line(
    big: tuple[Path, bool],
) -> None:
    path, numbered = big
    good = path.read_bytes()
    with path.open("ab") as fh:
        fh.write(b'{"id":"torn')  # an append that never returned
    with _log(path, numbered=numbered).locked() as log:
        assert log.recover_tail() == len(good)
    assert path.read_bytes() == good
    _damage_line(path, LINES)  # the last acknowledged line
    with pytest.raises(JournalCorrupt) as err, _log(path, numbered=numbered).locked() as log:
        log.append(_rec(LINES + 1))
    assert err.value.line == LINES


def test_a_backward_read_of_the_newest_records_reads_the_tail(
    big: tuple[Path, bool], bytes_read: list[int]
) -> None:
    path, numbered = big
    counted = bytes_read
    newest = _log(path, numbered=numbered).iter_reverse_at()
    first = [next(newest) for _ in range(5)]
    assert [r.seq for _, r in first] == [LINES, LINES - 1, LINES - 2, LINES - 3, LINES - 4]
    data = path.read_bytes()
    assert all(data[at:].startswith(RecordCodec("r", "s").encode(r)) for at, r in first)
    assert sum(counted) < 200_000 < len(data) // 5


def test_a_backward_read_fails_closed_on_a_damaged_acknowledged_last_line(big: tuple[Path, bool]) -> None:
    path, numbered = big
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[:last] + b"\x00" * (len(data) - last - 1) + b"\n")  # looks torn, but acked
    with pytest.raises(JournalCorrupt) as err:
        next(_log(path, numbered=numbered).iter_reverse())
    assert err.value.line == LINES
    with pytest.raises(JournalCorrupt):
        _log(path, numbered=numbered).read()


def test_a_backward_read_skips_an_unacknowledged_tail_as_a_forward_read_does(big: tuple[Path, bool]) -> None:
    path, numbered = big
    codec = RecordCodec("r", "s")
    unsynced = [codec.encode(_rec(i)) + b"\n" for i in (LINES + 1, LINES + 2)]
    with path.open("ab") as fh:  # past the watermark: a hole where one line was, then a whole one
        fh.write(b"\x00" * len(unsynced[0]) + unsynced[1])
    assert [r.seq for r in _log(path, numbered=numbered).read()][-1] == LINES
    assert next(_log(path, numbered=numbered).iter_reverse()).seq == LINES
