"""Below the durability watermark nothing is ever cut.

A property over real on-disk streams: records appended and acknowledged (so covered by the
watermark), then lines written past it by an append that never returned, then one damage —
a line deleted, duplicated, zeroed in place or swapped with the next, or the file truncated —
anywhere, below or above the watermark. Every reader (a full read, the reverse reader, a locked
open that cuts a torn tail) either returns every acknowledged record intact, or fails closed
with ``journal_corrupt`` naming the file and a line. None ever answers with fewer acknowledged
records, and none cuts one off the file. A fixed-seed profile keeps the run short and the same
everywhere.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal import FileJournal, JournalCorrupt, Record, RecordCodec

STREAM = "memory-learn"
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,  # the fixed-seed profile
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
DAMAGES = ["delete", "duplicate", "zero", "swap", "truncate"]


def _stream(root: Path, acknowledged: int, unacknowledged: int) -> tuple[Path, str, list[Record]]:
    """A stream of ``acknowledged`` synced records, then ``unacknowledged`` whole lines written
    past the watermark (an append whose sync never returned)."""
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", {})
    records = [
        jr.append(lease, STREAM, {"n": i, "text": "x" * (i * 5)}, key=f"k{i}") for i in range(acknowledged)
    ]
    jr.release(lease)
    jr.close()
    path = jr.stream_path(info.run_id, STREAM)
    codec = RecordCodec(info.run_id, STREAM)
    late = [
        replace(records[-1], id=f"{i:016x}", seq=acknowledged + 1 + i, key=None, payload={"late": i})
        for i in range(unacknowledged)
    ]
    extra = b"".join(codec.encode(r) + b"\n" for r in late)
    with path.open("ab") as f:
        f.write(extra)
    return path, info.run_id, records


def _damaged(data: bytes, damage: str, line: int, fraction: float) -> bytes:
    lines = data.splitlines(keepends=True)
    i = min(line, len(lines) - 1)
    if damage == "truncate":
        return data[: int(len(data) * fraction)]
    if damage == "delete":
        del lines[i]
    elif damage == "duplicate":
        lines.insert(i, lines[i])
    elif damage == "zero":
        lines[i] = b"\0" * len(lines[i])
    elif damage == "swap" and i + 1 < len(lines):
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    return b"".join(lines)


def _log(path: Path, run_id: str) -> journal.LineLog[Record]:
    return journal.LineLog(path, RecordCodec(run_id, STREAM), sequence=lambda r: r.seq)


def _holds_every_acknowledged(got: list[Record], acknowledged: list[Record]) -> bool:
    return got[: len(acknowledged)] == acknowledged


@SETTINGS
@given(
    acknowledged=st.integers(1, 6),
    unacknowledged=st.integers(0, 3),
    damage=st.sampled_from(DAMAGES),
    line=st.integers(0, 9),
    fraction=st.floats(0.0, 1.0),
)
def test_acknowledged_records_are_read_whole_or_the_stream_fails_closed_whatever_the_damage(  # noqa: PLR0917
    tmp_path_factory: pytest.TempPathFactory,
    acknowledged: int,
    unacknowledged: int,
    damage: str,
    line: int,
    fraction: float,
) -> None:
    root = tmp_path_factory.mktemp("j")
    path, run_id, records = _stream(root, acknowledged, unacknowledged)
    path.write_bytes(_damaged(path.read_bytes(), damage, line, fraction))
    readers = {
        "read": lambda: list(FileJournal(root).read(run_id, STREAM)),
        "iter_reverse": lambda: list(reversed(list(_log(path, run_id).iter_reverse()))),
    }
    for name, reader in readers.items():
        try:
            got = reader()
        except JournalCorrupt as exc:
            assert exc.code == "journal_corrupt"
            assert exc.path == path and isinstance(exc.line, int) and exc.line >= 1, name
            continue
        assert _holds_every_acknowledged(got, records), (name, damage, line, [r.seq for r in got])
    before = path.read_bytes()
    log = _log(path, run_id)
    try:
        with log.locked():
            got = list(log.recover())
    except JournalCorrupt:
        assert path.read_bytes() == before  # a stream that fails closed is left as it was
        return
    assert _holds_every_acknowledged(got, records), (damage, line, [r.seq for r in got])
    assert _holds_every_acknowledged(list(FileJournal(root).read(run_id, STREAM)), records)


@pytest.mark.parametrize(("damage", "named"), [("delete", 2), ("truncate", 3)])
def test_damage_to_an_acknowledged_line_is_journal_corrupt_naming_run_stream_and_line(
    tmp_path: Path, damage: str, named: int
) -> None:
    # line 2 of 3 deleted (seq 3 follows seq 1), or the file cut after line 2 (line 3 missing)
    path, run_id, _ = _stream(tmp_path, 3, 0)
    data = path.read_bytes()
    before = _damaged(data, damage, 1, (data.index(b"\n", data.index(b"\n") + 1) + 1) / len(data))
    path.write_bytes(before)
    for operation in (
        lambda: FileJournal(tmp_path).read(run_id, STREAM),
        lambda: FileJournal(tmp_path).find(run_id, STREAM, "k2"),
    ):
        with pytest.raises(JournalCorrupt) as err:
            operation()
        got = (err.value.run_id, err.value.stream, err.value.path, err.value.line)
        assert got == (run_id, STREAM, path, named)
    assert path.read_bytes() == before


def test_the_last_acknowledged_line_zeroed_in_place_is_journal_corrupt_not_a_torn_tail(
    tmp_path: Path,
) -> None:
    # File size and watermark unchanged: those bytes had been made durable, so no crash zeroed them.
    path, run_id, _ = _stream(tmp_path, 3, 0)
    data = path.read_bytes()
    last = data.rstrip(b"\n").rfind(b"\n") + 1
    path.write_bytes(data[:last] + b"\0" * (len(data) - last))
    before = path.read_bytes()
    with pytest.raises(JournalCorrupt) as err:
        FileJournal(tmp_path).read(run_id, STREAM)
    assert (err.value.stream, err.value.line) == (STREAM, 3)
    log = _log(path, run_id)
    with pytest.raises(JournalCorrupt), log.locked():
        log.recover()
    assert path.read_bytes() == before


def test_a_stream_file_removed_under_its_watermark_is_journal_corrupt_not_empty(tmp_path: Path) -> None:
    path, run_id, _ = _stream(tmp_path, 2, 0)
    os.unlink(path)
    with pytest.raises(JournalCorrupt) as err:
        FileJournal(tmp_path).read(run_id, STREAM)
    assert (err.value.stream, err.value.line) == (STREAM, 1)


@pytest.mark.parametrize("how", ["emptied", "removed"])
def test_a_stream_file_emptied_or_removed_under_its_watermark_is_listed_and_fails_closed(
    tmp_path: Path, how: str
) -> None:
    """Its streams are what a check of the run reads, and what ``flows journal`` shows: a stream
    that lost its acknowledged lines stays among them, so reading it reports the damage."""
    path, run_id, _ = _stream(tmp_path, 2, 0)
    if how == "emptied":
        path.write_bytes(b"")
    else:
        os.unlink(path)
    jr = FileJournal(tmp_path)
    assert jr.streams(run_id) == [STREAM]
    assert jr.stream_listing(run_id) == ([STREAM], [])
    with pytest.raises(JournalCorrupt) as err:
        jr.read(run_id, STREAM)
    assert (err.value.run_id, err.value.stream, err.value.line) == (run_id, STREAM, 1)


def test_an_empty_stream_no_sync_acknowledged_is_not_listed(tmp_path: Path) -> None:
    """An empty stream file whose mark file is missing, torn or at 0 never held an acknowledged
    line: nothing to list, nothing damaged."""
    jr = FileJournal(tmp_path)
    info, lease = jr.begin("f", "s", {})
    jr.release(lease)
    folder = jr.stream_path(info.run_id, STREAM).parent
    folder.mkdir(parents=True, exist_ok=True)
    for name, mark in (("no-mark", None), ("torn-mark", b"\x01" * 30), ("zero-mark", "zero")):
        (folder / f"{name}.jsonl").write_bytes(b"")
        if mark == "zero":  # a log synced while empty writes its marks at 0
            log = journal.LineLog(folder / f"{name}.jsonl", RecordCodec(info.run_id, name))
            log.sync_now()
            assert log.watermark() == 0
        elif isinstance(mark, bytes):
            (folder / f"{name}.jsonl.lock").write_bytes(mark)
    assert jr.streams(info.run_id) == []
    for name in ("no-mark", "torn-mark", "zero-mark"):
        assert jr.read(info.run_id, name) == []
    jr.close()


def test_a_sync_records_only_whole_lines_in_the_watermark(tmp_path: Path) -> None:
    # A write seen in part by another appender's sync (a large line, or one in flight) must not
    # put the mark inside a line: a reader holds every line below the mark to be whole.
    path, run_id, records = _stream(tmp_path, 2, 0)
    end = path.stat().st_size
    with path.open("ab") as f:
        f.write(b'{"id":"in flight, no newline yet')
    log = _log(path, run_id)
    log.sync_now()
    assert log.watermark() == end
    assert list(log.read()) == records


@pytest.mark.parametrize(
    "crafted",
    ["delete from journal_records where seq = 2", "update journal_records set seq = 7 where seq = 3"],
)
def test_postgres_rows_with_a_gap_in_seq_are_journal_corrupt_naming_run_stream_and_place(
    postgres_dsn: str, crafted: str
) -> None:
    import psycopg

    from journal.postgres import PostgresJournal

    with PostgresJournal(postgres_dsn) as jr:
        _, lease = jr.begin("f", "s", {})
        for i in range(3):
            jr.append(lease, STREAM, {"n": i})
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(crafted)
    with PostgresJournal(postgres_dsn) as jr, pytest.raises(JournalCorrupt) as err:
        jr.read(lease.run_id, STREAM)
    assert (err.value.code, err.value.run_id, err.value.stream, err.value.line) == (
        "journal_corrupt",
        lease.run_id,
        STREAM,
        2 if crafted.startswith("delete") else 3,
    )
