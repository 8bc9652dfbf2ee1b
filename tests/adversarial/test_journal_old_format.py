"""A line of the old format (its checksum of the line alone) reads only where an older version could
have written it: before the stream's first line in the current format.

A version writes its own format from where it began appending and never goes back, so a genuine
stream is old-format lines, then current ones. An unkeyed old-format line carries nothing that ties
it to its run (no id made from the run, no checksum naming it): copied from another run or stream
after a current line, appended or put in place of one, it would read as this run's record. It is
``journal_corrupt`` naming the file, run, stream and line instead, below the watermark or past it
(never a torn tail, never cut), from every reader: a full read, a read that goes on from its cache,
a locked open (an append), a tail open, the reverse reader (even one that stops at the newest
record), a lookup by hint, ``hints``, ``find`` and ``flows check`` (``--repair`` leaves it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

import journal
import memory
from journal import FileJournal, JournalCorrupt, LineLog, LineMarks, Record, RecordCodec
from tests._helpers.crafted import unbind_stream, unbound
from tests.flows.helpers import flows

STREAM = "notes"


def _is_unbound(line: bytes) -> bool:
    return unbound(line) == line


def as_older_run(root: Path, run_id: str) -> None:
    """Make run ``run_id`` and its streams look begun by a version before streams were marked as
    begun in the current format: its ``run.json`` without ``currentFormat``, so its streams'
    leading lines may be of the old format."""
    path = root / "runs" / run_id / "run.json"
    obj = orjson.loads(path.read_bytes())
    obj.pop("currentFormat", None)
    path.write_bytes(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))


def _run(
    root: Path, payloads: list[dict[str, object]], keys: list[str | None]
) -> tuple[str, journal.Lease, Path]:
    """A run an older version began, whose stream holds ``payloads`` (its holder gone, its lease
    kept for appends)."""
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", {})
    for payload, key in zip(payloads, keys, strict=True):
        jr.append(lease, STREAM, payload, key=key)
    path = jr.stream_path(info.run_id, STREAM)
    jr.release(lease)
    jr.close()
    as_older_run(root, info.run_id)
    return info.run_id, lease, path


def _copied_old_line(root: Path, seq: int) -> bytes:
    """Line ``seq`` of another run's stream, unkeyed and written by an old version."""
    _, _, path = _run(root, [{"n": f"elsewhere {i}"} for i in range(1, seq + 1)], [None] * seq)
    unbind_stream(path)
    return path.read_bytes().splitlines()[seq - 1]


def _set_mark(path: Path, value: int) -> None:
    lock = Path(f"{path}.lock")
    lock.write_bytes(replace(LineMarks.parse(lock.read_bytes()), plain=value).pack())


def _log(path: Path, run_id: str) -> LineLog[Record]:
    return LineLog(path, RecordCodec(run_id, STREAM), sequence=lambda r: r.seq)


def _tail_open(path: Path, run_id: str) -> int:
    log = _log(path, run_id)
    with log.locked():
        return log.recover_tail()


def _readers(
    root: Path, run_id: str, lease: journal.Lease, path: Path, *, at: int, rid: str
) -> dict[str, Callable[[], object]]:
    """Every way a record of the stream is read (each in a fresh object: another process's look)."""
    return {
        "read": lambda: FileJournal(root).read(run_id, STREAM),
        "find": lambda: FileJournal(root).find(run_id, STREAM, "none"),
        "hints": lambda: FileJournal(root).hints(run_id, STREAM),
        "lookup by hint": lambda: FileJournal(root).lookup(run_id, STREAM, rid, hint=at),
        "append": lambda: FileJournal(root).append(lease, STREAM, {"n": "after"}),
        "tail open": lambda: _tail_open(path, run_id),
        "recover": lambda: _recover(path, run_id),
        "reverse": lambda: list(_log(path, run_id).iter_reverse()),
        "newest by reverse": lambda: next(iter(_log(path, run_id).iter_reverse())),
    }


def _recover(path: Path, run_id: str) -> object:
    log = _log(path, run_id)
    with log.locked():
        return list(log.recover())


def _assert_refused(
    readers: dict[str, Callable[[], object]], path: Path, run_id: str, line: int, *, numbered: bool = False
) -> None:
    """Every reader refuses line ``line``; with ``numbered``, the reverse reader may find it by its
    number first (a line inserted repeats the next one's)."""
    before = path.read_bytes()
    for name, read in readers.items():
        with pytest.raises(JournalCorrupt) as err:
            read()
        got = err.value
        assert (got.code, got.path, got.line) == ("journal_corrupt", path, line), name
        if name in ("read", "find", "hints", "lookup by hint", "append"):
            assert (got.run_id, got.stream) == (run_id, STREAM), name
        by_number = numbered and name == "reverse" and got.reason == f"sequence {line}, expected {line - 1}"
        assert by_number or "after a line in the current format" in got.reason, name
        assert by_number or f"run {run_id} stream {STREAM}" in str(got), name
        assert path.read_bytes() == before, name  # never cut as a torn tail, never appended to


@pytest.mark.parametrize("watermark", ["below", "past", "none"])
def test_an_unkeyed_old_format_line_from_another_run_appended_after_current_ones_is_refused(
    tmp_path: Path, watermark: str
) -> None:
    root = tmp_path / "j"
    run_id, lease, path = _run(root, [{"n": 1}, {"n": 2}], [None, None])
    size = path.stat().st_size
    line = _copied_old_line(root, 3)
    with path.open("ab") as f:
        f.write(line + b"\n")
    if watermark == "below":
        _set_mark(path, path.stat().st_size)
    elif watermark == "none":
        Path(f"{path}.lock").unlink()
    rid = orjson.loads(line)["id"]
    _assert_refused(_readers(root, run_id, lease, path, at=size, rid=rid), path, run_id, 3)


@pytest.mark.parametrize("how", ["in place of a line", "inserted"])
def test_an_unkeyed_old_format_line_from_another_run_in_the_middle_is_refused(
    tmp_path: Path, how: str
) -> None:
    root = tmp_path / "j"
    run_id, lease, path = _run(root, [{"n": 1}, {"n": 2}, {"n": 3}], [None, None, None])
    lines = path.read_bytes().splitlines(keepends=True)
    copied = _copied_old_line(root, 2) + b"\n"
    lines[1:2] = [copied] if how == "in place of a line" else [copied, lines[1]]
    path.write_bytes(b"".join(lines))
    _set_mark(path, path.stat().st_size)
    rid = orjson.loads(copied)["id"]
    readers = _readers(root, run_id, lease, path, at=len(lines[0]), rid=rid)
    # a tail open and a reverse reader that stops at the newest record read only the last line
    # (damage below the watermark is for a full read to find), and never take the copied one
    tail_readers = {name: readers.pop(name) for name in ("tail open", "newest by reverse")}
    newest = tail_readers["newest by reverse"]()
    assert isinstance(newest, Record) and newest.id != rid and newest.payload == {"n": 3}
    assert tail_readers["tail open"]() == path.stat().st_size
    _assert_refused(readers, path, run_id, 2, numbered=how == "inserted")


def test_a_reader_that_read_the_stream_before_refuses_the_line_appended_since(tmp_path: Path) -> None:
    """The read that goes on from its cache knows the format of the last line it read."""
    root = tmp_path / "j"
    run_id, _, path = _run(root, [{"n": 1}, {"n": 2}], [None, None])
    jr = FileJournal(root)
    assert [r.payload for r in jr.read(run_id, STREAM)] == [{"n": 1}, {"n": 2}]
    with path.open("ab") as f:
        f.write(_copied_old_line(root, 3) + b"\n")
    _set_mark(path, path.stat().st_size)
    with pytest.raises(JournalCorrupt) as err:
        jr.read(run_id, STREAM)
    assert (err.value.line, err.value.run_id, err.value.stream) == (3, run_id, STREAM)
    jr.close()


def _genuine_old_stream(root: Path) -> tuple[str, journal.Lease, Path, list[Record]]:
    """A stream an old version wrote: keyed and unkeyed records, every line in the old format."""
    payloads: list[dict[str, object]] = [{"n": n, "t": "a finding to erase"} for n in (1, 2, 3)]
    run_id, lease, path = _run(root, payloads, ["a", None, "b"])
    records = list(FileJournal(root).read(run_id, STREAM))
    unbind_stream(path)
    return run_id, lease, path, records


def _every_read(root: Path, run_id: str, path: Path, hints_from: dict[str, int]) -> dict[str, object]:
    log = _log(path, run_id)
    return {
        "read": list(FileJournal(root).read(run_id, STREAM)),
        "reverse": list(reversed(list(log.iter_reverse()))),
        "lookup by hint": [
            FileJournal(root).lookup(run_id, STREAM, rid, hint=at) for rid, at in hints_from.items()
        ],
        "recover": _recover(path, run_id),
    }


def test_a_genuine_old_format_stream_reads_by_every_reader_and_takes_appends_in_the_current_format(
    tmp_path: Path,
) -> None:
    root = tmp_path / "j"
    run_id, lease, path, records = _genuine_old_stream(root)
    assert all(_is_unbound(x) for x in path.read_bytes().splitlines())
    hints = FileJournal(root).hints(run_id, STREAM)
    for name, got in _every_read(root, run_id, path, hints).items():
        assert got == records, name
    assert _tail_open(path, run_id) == path.stat().st_size  # the last line, old, is the anchor
    # an append by this version: the current format after the old lines, and everything reads
    appended = FileJournal(root).append(lease, STREAM, {"n": 4}, key="c")
    lines = path.read_bytes().splitlines()
    assert [_is_unbound(x) for x in lines] == [True, True, True, False]
    hints = FileJournal(root).hints(run_id, STREAM)
    for name, got in _every_read(root, run_id, path, hints).items():
        assert got == [*records, appended], name
    assert _tail_open(path, run_id) == path.stat().st_size
    # and from then on an old-format line copied in after it is refused
    with path.open("ab") as f:
        f.write(_copied_old_line(root, 5) + b"\n")
    with pytest.raises(JournalCorrupt) as err:
        FileJournal(root).read(run_id, STREAM)
    assert err.value.line == 5 and "after a line in the current format" in err.value.reason


def test_an_erasure_keeps_each_line_in_its_own_format(tmp_path: Path) -> None:
    """An erased old-format line stays an old-format one: rewritten in the current format, it would
    stand before old lines, and the stream would no longer read."""
    root = tmp_path / "j"
    run_id, lease, path, _ = _genuine_old_stream(root)
    jr = FileJournal(root)
    jr.append(lease, STREAM, {"n": 4, "t": "a finding to erase"}, key="c")
    assert jr.rewrite_payloads(run_id, STREAM, {2: {"n": "x"}, 4: {"n": "y"}}, pad="pad", lease=lease) == 2
    jr.close()
    assert [_is_unbound(x) for x in path.read_bytes().splitlines()] == [True, True, True, False]
    got = FileJournal(root).read(run_id, STREAM)
    assert [r.payload["n"] for r in got] == [1, "x", 3, "y"]


def _store_with_a_copied_line(tmp_path: Path) -> tuple[Path, str, Path]:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        root = Path(store.journal_location)
    run_id, _, path = _run(root, [{"n": 1}, {"n": 2}], [None, None])
    with path.open("ab") as f:
        f.write(_copied_old_line(root, 3) + b"\n")
    _set_mark(path, path.stat().st_size)
    return db, run_id, path


def test_flows_check_reports_the_copied_line_and_repair_leaves_it(tmp_path: Path) -> None:
    db, run_id, path = _store_with_a_copied_line(tmp_path)
    before = path.read_bytes()
    for args in (("check", "--json"), ("check", "--repair", "--json")):
        done = flows(db, *args)
        assert done.returncode == 1, done.stderr
        out = orjson.loads(done.stdout)
        (found,) = [p for p in out["problems"] if p["kind"] == "stream_corrupt"]
        assert found["path"] == str(path) and found["repairable"] is False
        assert (found["runId"], found["stream"], found["line"]) == (run_id, STREAM, 3)
        assert "after a line in the current format" in found["message"]
        assert path.read_bytes() == before
