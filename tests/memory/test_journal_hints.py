"""The kept journal hints (``flows-cache/cites-*.idx``): one entry is found and checked alone, and
an entry that is not this store's, for this record of this stream of this journal, is never taken."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memory._filecache import FileCache

LOCATION = "/somewhere/flows-journal"
RUN = "20261203T000000-0123456789"
STREAM = "memory-learn"


def _cache(tmp_path: Path) -> FileCache:
    return FileCache(tmp_path / "flows-cache", tmp_path / "flows-memory")


def _hints(n: int) -> dict[str, int]:
    return {f"{i:016x}": 100 * i + 7 for i in range(n)}


def _file(tmp_path: Path) -> Path:
    (found,) = (tmp_path / "flows-cache").glob("cites-*.idx")
    return found


def test_each_kept_hint_is_found_and_no_other(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    hints = _hints(1000)
    cache.save_journal_hints(LOCATION, RUN, STREAM, hints)
    fresh = _cache(tmp_path)  # as a fresh process: the key and the entries read from disk
    for rid, at in hints.items():
        assert fresh.journal_hint(LOCATION, RUN, STREAM, rid) == at
    for rid in ("ffffffffffffffff", "0", "", "not\udc80an id", "zzzzzzzzzzzzzzzz"):
        assert fresh.journal_hint(LOCATION, RUN, STREAM, rid) is None


@pytest.mark.parametrize("n", [1000, 4096])
def test_a_small_table_is_read_in_one_go_a_large_one_probed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, n: int
) -> None:
    """A lookup reads a small run's table (32 kB for 1,000 records) in one read, and the next
    lookups of that run read nothing more; a large one's it probes by bisection, a few ids and one
    entry, never the whole table (131 kB for 4,096)."""
    cache = _cache(tmp_path)
    hints = _hints(n)
    cache.save_journal_hints(LOCATION, RUN, STREAM, hints)
    read: list[int] = []
    real = os.pread

    def counting(fd: int, length: int, offset: int) -> bytes:
        read.append(length)
        return real(fd, length, offset)

    monkeypatch.setattr(os, "pread", counting)
    fresh = _cache(tmp_path)
    for i, rid in enumerate((f"{0:016x}", f"{n // 3:016x}", f"{n - 1:016x}")):
        read.clear()
        assert fresh.journal_hint(LOCATION, RUN, STREAM, rid) == hints[rid]
        if n == 1000:
            assert read == ([_file(tmp_path).stat().st_size] if i == 0 else [])
        else:
            assert len(read) <= 16 and sum(read) <= 256
    assert fresh.journal_hint(LOCATION, RUN, STREAM, "missing") is None


def test_a_table_kept_in_memory_gives_way_to_the_hints_this_store_saves(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.save_journal_hints(LOCATION, RUN, STREAM, {"a": 10})
    assert cache.journal_hint(LOCATION, RUN, STREAM, "a") == 10  # the table read and kept
    assert cache.journal_hint(LOCATION, RUN, STREAM, "b") is None
    cache.save_journal_hints(LOCATION, RUN, STREAM, {"a": 10, "b": 20})
    assert cache.journal_hint(LOCATION, RUN, STREAM, "b") == 20
    _file(tmp_path).write_bytes(b"")  # another process's change is not seen while the table is kept
    assert cache.journal_hint(LOCATION, RUN, STREAM, "b") == 20
    assert _cache(tmp_path).journal_hint(LOCATION, RUN, STREAM, "b") is None


def test_hints_of_another_journal_run_or_stream_are_not_taken(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.save_journal_hints(LOCATION, RUN, STREAM, _hints(10))
    rid = f"{3:016x}"
    assert cache.journal_hint(LOCATION, RUN, STREAM, rid) == 307
    assert cache.journal_hint("/elsewhere/flows-journal", RUN, STREAM, rid) is None
    # the run's file copied where another run's or stream's hints are kept
    data = _file(tmp_path).read_bytes()
    for run, stream in (("20261203T000000-9999999999", STREAM), (RUN, "memory-forget")):
        Path(cache._hints_path(run, stream)).write_bytes(data)
        assert cache.journal_hint(LOCATION, run, stream, rid) is None


def test_hints_tagged_with_another_key_are_not_taken(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.save_journal_hints(LOCATION, RUN, STREAM, _hints(10))
    key = tmp_path / "flows-cache" / "key"
    key.write_bytes(bytes(32))
    assert _cache(tmp_path).journal_hint(LOCATION, RUN, STREAM, f"{3:016x}") is None


def test_an_edited_entry_is_not_taken_and_the_others_still_are(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    hints = _hints(64)
    cache.save_journal_hints(LOCATION, RUN, STREAM, hints)
    path = _file(tmp_path)
    data = bytearray(path.read_bytes())
    fresh = _cache(tmp_path)
    # find the entry of one record by its offset, and move that offset
    rid = f"{5:016x}"
    at = hints[rid].to_bytes(8, "big")
    where = data.index(at)
    data[where + 7] ^= 0x10
    path.write_bytes(bytes(data))
    assert fresh.journal_hint(LOCATION, RUN, STREAM, rid) is None
    assert fresh.journal_hint(LOCATION, RUN, STREAM, f"{6:016x}") == hints[f"{6:016x}"]


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-1],  # not whole entries
        lambda b: b[:8],  # no entry
        lambda b: b"FLOWSJH1" + b[8:],  # another format
        lambda b: b"",
    ],
)
def test_a_hints_file_of_the_wrong_shape_gives_no_hint(tmp_path: Path, damage: object) -> None:
    cache = _cache(tmp_path)
    cache.save_journal_hints(LOCATION, RUN, STREAM, _hints(10))
    path = _file(tmp_path)
    path.write_bytes(damage(path.read_bytes()))  # type: ignore[operator]
    assert all(cache.journal_hint(LOCATION, RUN, STREAM, f"{i:016x}") is None for i in range(10))


def test_a_link_in_the_hints_file_place_is_not_followed(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.save_journal_hints(LOCATION, RUN, STREAM, _hints(10))
    path = _file(tmp_path)
    aside = tmp_path / "aside.idx"
    path.rename(aside)
    path.symlink_to(aside)
    assert cache.journal_hint(LOCATION, RUN, STREAM, f"{3:016x}") is None


def test_a_run_saved_again_as_it_grows_makes_each_entry_once_and_writes_what_a_fresh_store_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store saves a run's hints again, whole, each time a read finds a record they did not know:
    the keyed tag of an entry saved before is not made again, and the file is the one a store
    saving the grown run first would write (a moved offset gets a new entry)."""
    import memory._filecache as filecache

    cache = _cache(tmp_path)
    hints = _hints(100)
    cache.save_journal_hints(LOCATION, RUN, STREAM, dict(list(hints.items())[:60]))
    tagged: list[str] = []
    real = filecache._hint_tag

    def counting(key: bytes, of: tuple[str, str, str], record_id: str, at: int) -> bytes:
        tagged.append(record_id)
        return real(key, of, record_id, at)

    monkeypatch.setattr(filecache, "_hint_tag", counting)
    moved = {**hints, f"{7:016x}": 99_999}
    cache.save_journal_hints(LOCATION, RUN, STREAM, moved)
    assert sorted(tagged) == sorted([*list(hints)[60:], f"{7:016x}"])
    grown = _file(tmp_path).read_bytes()
    _cache(tmp_path).save_journal_hints(LOCATION, RUN, STREAM, moved)
    assert _file(tmp_path).read_bytes() == grown
    fresh = _cache(tmp_path)
    assert all(fresh.journal_hint(LOCATION, RUN, STREAM, rid) == at for rid, at in moved.items())
    cache.save_journal_hints("/elsewhere/flows-journal", RUN, STREAM, moved)  # another journal's tags
    assert _cache(tmp_path).journal_hint("/elsewhere/flows-journal", RUN, STREAM, f"{3:016x}") == 307
    assert _cache(tmp_path).journal_hint(LOCATION, RUN, STREAM, f"{3:016x}") is None
