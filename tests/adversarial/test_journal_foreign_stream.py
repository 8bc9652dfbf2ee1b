"""A stream file copied or hard-linked from another run's folder is not that run's own.

A stream line holds its record's id, key, payload, number and time, not the run or stream it was
written for: those come from the file's place. So a line's checksum covers the run id and stream
name too (as if they began the line). A file copied or hard-linked into another run's folder, or
under another stream's name, fails every line's check there: ``journal_corrupt`` naming the file,
its run and stream, and line 1, from every read and append, whether the lines lie below the
durability watermark (its mark file came along) or past it (no mark file); nothing is cut, and no
append lands in the other run's file through a hard link.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

import journal
from journal import FileJournal, JournalCorrupt
from tests._helpers.crafted import unbind_stream
from tests.adversarial.test_journal_old_format import as_older_run

STREAM = "steps"


def _source(root: Path, *, finish: bool = True) -> tuple[str, Path, list[journal.Record]]:
    """A run (finished, else left by its holder) whose stream holds keyed and unkeyed records."""
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", {})
    records = [
        jr.append(lease, STREAM, {"step": "a"}, key="a"),
        jr.append(lease, STREAM, {"note": "unkeyed"}),
        jr.append(lease, STREAM, {"step": "b"}, key="b"),
    ]
    path = jr.stream_path(info.run_id, STREAM)
    if finish:
        jr.finish(lease, journal.RunState.DONE)
    else:
        jr.release(lease)
    jr.close()
    return info.run_id, path, records


def _target(root: Path) -> tuple[str, journal.Lease, Path]:
    """A running run with no records of the stream yet (its holder gone, its lease kept)."""
    jr = FileJournal(root)
    info, lease = jr.begin("g", "s", {})
    path = jr.stream_path(info.run_id, STREAM)
    jr.release(lease)
    jr.close()
    return info.run_id, lease, path


def _place(src: Path, dst: Path, how: str, watermark: str) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    if how == "copied":
        shutil.copyfile(src, dst)
    else:
        os.link(src, dst)
    if watermark == "below":  # its marks come along: every line lies below the watermark
        shutil.copyfile(f"{src}.lock", f"{dst}.lock")
    else:  # no marks: every line lies past the watermark, where a torn tail would be cut
        assert not os.path.exists(f"{dst}.lock")


def _reads(root: Path, run_id: str, lease: journal.Lease, stream: str) -> dict[str, Callable[[], object]]:
    """Each in a fresh journal object (another process's first look)."""
    return {
        "read": lambda: FileJournal(root).read(run_id, stream),
        "find": lambda: FileJournal(root).find(run_id, stream, "a"),
        "hints": lambda: FileJournal(root).hints(run_id, stream),
        "append": lambda: FileJournal(root).append(lease, stream, {"step": "c"}, key="c"),
        "acquire and append": lambda: _acquire_and_append(root, run_id, stream),
    }


def _acquire_and_append(root: Path, run_id: str, stream: str) -> object:
    jr = FileJournal(root)
    try:
        lease = jr.acquire(run_id)
        return jr.append(lease, stream, {"step": "c"}, key="c")
    finally:
        jr.close()


def _assert_refused(root: Path, run_id: str, lease: journal.Lease, stream: str, path: Path) -> None:
    for name, operation in _reads(root, run_id, lease, stream).items():
        with pytest.raises(JournalCorrupt) as err:
            operation()
        got = err.value
        assert (got.code, got.path, got.run_id, got.stream) == ("journal_corrupt", path, run_id, stream), name
        assert got.line == 1, name
        assert "another run or stream" in str(got) and f"run {run_id} stream {stream}" in str(got), name
        assert str(path) in str(got), name


@pytest.mark.parametrize("how", ["copied", "hard-linked"])
@pytest.mark.parametrize("watermark", ["below", "above"])
def test_a_stream_file_from_another_runs_folder_is_journal_corrupt_and_never_read_as_its_own(
    tmp_path: Path, how: str, watermark: str
) -> None:
    root = tmp_path / "j"
    _, src, records = _source(root)
    before = src.read_bytes()
    run_id, lease, dst = _target(root)
    _place(src, dst, how, watermark)
    _assert_refused(root, run_id, lease, STREAM, dst)
    assert dst.read_bytes() == before  # nothing cut, nothing appended (through a link: the source's)
    assert FileJournal(root).read(records[0].run_id, STREAM) == records  # the source reads as ever


@pytest.mark.parametrize("watermark", ["below", "above"])
def test_a_stream_file_under_another_streams_name_of_the_same_run_is_journal_corrupt(
    tmp_path: Path, watermark: str
) -> None:
    root = tmp_path / "j"
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, STREAM, {"step": "a"}, key="a")
    jr.append(lease, STREAM, {"note": "unkeyed"})
    src = jr.stream_path(info.run_id, STREAM)
    jr.release(lease)
    jr.close()
    dst = src.with_name("other.jsonl")
    _place(src, dst, "copied", watermark)
    _assert_refused(root, info.run_id, lease, "other", dst)


def test_an_unkeyed_record_alone_is_refused_too(tmp_path: Path) -> None:
    """No id ties an unkeyed record to its run: only the checksum does."""
    root = tmp_path / "j"
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, STREAM, {"note": "unkeyed"})
    src = jr.stream_path(info.run_id, STREAM)
    jr.release(lease)
    jr.close()
    run_id, _, dst = _target(root)
    _place(src, dst, "copied", "below")
    with pytest.raises(JournalCorrupt, match="another run or stream"):
        FileJournal(root).read(run_id, STREAM)


def test_a_stream_written_before_checksums_named_their_run_reads_in_its_own_run(tmp_path: Path) -> None:
    root = tmp_path / "j"
    run_id, src, records = _source(root, finish=False)
    bound = src.read_bytes()
    unbind_stream(src)
    as_older_run(root, run_id)  # and its run, begun by that version
    assert src.read_bytes() != bound and len(src.read_bytes()) == len(bound)
    assert FileJournal(root).read(run_id, STREAM) == records
    jr = FileJournal(root)  # and a locked open takes it as it is, cutting nothing
    lease = jr.acquire(run_id)
    jr.append(lease, STREAM, {"step": "c"}, key="c")
    assert [r.key for r in jr.read(run_id, STREAM)] == ["a", None, "b", "c"]
    jr.close()


def test_a_keyed_record_of_such_a_stream_copied_into_another_run_is_refused_by_its_id(
    tmp_path: Path,
) -> None:
    """A keyed record's id is made from its run, stream and key: in another run it is not the id
    its key gives there."""
    root = tmp_path / "j"
    _, src, _ = _source(root)
    unbind_stream(src)
    run_id, _, dst = _target(root)
    _place(src, dst, "copied", "below")
    with pytest.raises(JournalCorrupt) as err:
        FileJournal(root).read(run_id, STREAM)
    assert err.value.line == 1 and "its id is not the one its key gives here" in str(err.value)
