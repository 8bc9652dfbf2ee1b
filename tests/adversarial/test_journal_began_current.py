"""A stream this version began holds no line of the old format (its checksum of the line alone):
``run.json`` says which streams began in the current format (``currentFormat``: true for a run this
version began, else the names of the streams it began in an older version's run), and there an
old-format line is ``journal_corrupt`` naming the file, run, stream and line wherever it stands, the
first lines too, from every reader. Nothing in the lines themselves says which version began a
stream: an unkeyed old-format line copied in place of line 1, or a whole old-format stream copied
from another run, read as the run's own records before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

import journal
import memory
from journal import FileJournal, JournalCorrupt, LineLog, Record, RecordCodec
from tests._helpers.crafted import unbind_stream
from tests.adversarial.test_journal_old_format import _set_mark, as_older_run
from tests.conftest import ROOT
from tests.flows.helpers import flows

STREAM = "notes"
_BEGUN = "in a stream begun in the current format"


def _run_json(root: Path, run_id: str) -> dict[str, object]:
    data: dict[str, object] = orjson.loads((root / "runs" / run_id / "run.json").read_bytes())
    return data


def _new_run(root: Path, n: int = 3, *, older: bool = False) -> tuple[str, journal.Lease, Path]:
    """A run whose stream holds ``n`` unkeyed records (its holder gone, its lease kept). With
    ``older`` the run was begun by an older version, and this one began the stream in it."""
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", {})
    if older:
        as_older_run(root, info.run_id)
    for i in range(1, n + 1):
        jr.append(lease, STREAM, {"n": i})
    path = jr.stream_path(info.run_id, STREAM)
    jr.release(lease)
    jr.close()
    return info.run_id, lease, path


def _copied_line_1(root: Path) -> bytes:
    """Line 1 of another run's stream, unkeyed, written by an old version, as long as line 1 of a
    stream of ``_new_run`` (a reader that read the file before sees no byte moved). The other run
    is in another journal beside ``root``: nothing of it is read there."""
    _, _, path = _new_run(root.with_name(f"{root.name}-elsewhere"), 1)
    unbind_stream(path)
    return path.read_bytes().splitlines()[0]


def _first_line_replaced(root: Path, path: Path) -> bytes:
    """Line 1 of ``path`` replaced by line 1 of another run's old-format stream (unkeyed)."""
    copied = _copied_line_1(root)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[0] = copied + b"\n"
    path.write_bytes(b"".join(lines))
    _set_mark(path, path.stat().st_size)
    return copied


def _log(path: Path, run_id: str) -> LineLog[Record]:
    return LineLog(path, RecordCodec(run_id, STREAM, began_current=True), sequence=lambda r: r.seq)


def _tail_open(path: Path, run_id: str) -> int:
    log = _log(path, run_id)
    with log.locked():
        return log.recover_tail()


def _recover(path: Path, run_id: str) -> object:
    log = _log(path, run_id)
    with log.locked():
        return list(log.recover())


def _readers(
    root: Path, run_id: str, lease: journal.Lease, path: Path, rid: str
) -> dict[str, Callable[[], object]]:
    """Every way a record of the stream is read (each in a fresh object: another process's look);
    the line log's own readers with the codec the journal gives such a stream."""
    return {
        "read": lambda: FileJournal(root).read(run_id, STREAM),
        "find": lambda: FileJournal(root).find(run_id, STREAM, "none"),
        "hints": lambda: FileJournal(root).hints(run_id, STREAM),
        "lookup by hint": lambda: FileJournal(root).lookup(run_id, STREAM, rid, hint=0),
        "erase": lambda: FileJournal(root).rewrite_payloads(run_id, STREAM, {2: {"n": "x"}}, pad="p"),
        "append": lambda: FileJournal(root).append(FileJournal(root).acquire(run_id), STREAM, {"n": 9}),
        "recover": lambda: _recover(path, run_id),
        "reverse": lambda: list(_log(path, run_id).iter_reverse()),
    }


def _assert_refused(
    readers: dict[str, Callable[[], object]], path: Path, run_id: str, *, reverse_from: int = 1
) -> None:
    """Every reader refuses line 1 (the reverse reader the first line it reads, ``reverse_from``)."""
    before = path.read_bytes()
    for name, read in readers.items():
        with pytest.raises(JournalCorrupt) as err:
            read()
            pytest.fail(f"{name}: read")
        got = err.value
        line = reverse_from if name == "reverse" else 1
        assert (got.code, got.path, got.line) == ("journal_corrupt", path, line), name
        if name in ("read", "find", "hints", "lookup by hint", "append", "erase"):
            assert (got.run_id, got.stream) == (run_id, STREAM), name
        assert _BEGUN in got.reason and f"run {run_id} stream {STREAM}" in str(got), name
        assert path.read_bytes() == before, name  # never cut as a torn tail, never appended to


@pytest.mark.parametrize("run", ["begun by this version", "begun by an older version"])
def test_an_old_format_line_in_place_of_line_1_of_a_stream_this_version_began_is_refused(
    tmp_path: Path, run: str
) -> None:
    root = tmp_path / "j"
    run_id, lease, path = _new_run(root, older=run == "begun by an older version")
    assert _run_json(root, run_id)["currentFormat"] == (True if run == "begun by this version" else [STREAM])
    copied = _first_line_replaced(root, path)
    readers = _readers(root, run_id, lease, path, orjson.loads(copied)["id"])
    _assert_refused(readers, path, run_id)


def test_a_one_line_stream_whose_line_is_an_old_format_copy_is_refused_by_a_tail_open(
    tmp_path: Path,
) -> None:
    """A tail open reads from the last acknowledged line: in a stream this version began, that line
    of the old format is damage, not an anchor (with nothing before it to say it may stand there)."""
    root = tmp_path / "j"
    run_id, _, path = _new_run(root, 1)
    _first_line_replaced(root, path)
    readers = {
        "tail open": lambda: _tail_open(path, run_id),
        "newest by reverse": lambda: next(iter(_log(path, run_id).iter_reverse())),
    }
    _assert_refused(readers, path, run_id)


def test_a_whole_old_format_stream_copied_from_another_run_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "j"
    other_id, _, other = _new_run(root, 3)
    as_older_run(root, other_id)
    unbind_stream(other)  # another run's stream, every line written by an old version
    assert [r.payload for r in FileJournal(root).read(other_id, STREAM)] == [{"n": 1}, {"n": 2}, {"n": 3}]
    run_id, lease, path = _new_run(root, 0)  # a run this version began, no line in the stream yet
    path.write_bytes(other.read_bytes())
    os.utime(path)
    readers = _readers(root, run_id, lease, path, orjson.loads(other.read_bytes().splitlines()[0])["id"])
    for name in ("erase", "lookup by hint"):  # no record 2 of its own to erase; no hint to follow
        readers.pop(name)
    _assert_refused(readers, path, run_id, reverse_from=3)


def test_a_reader_that_looked_before_the_stream_began_refuses_an_old_line_in_place_of_its_first(
    tmp_path: Path,
) -> None:
    """A process that read a stream not yet begun in an older version's run (nothing then marked it)
    sees ``run.json`` replaced when another process begins the stream, and reads it under the rule."""
    root = tmp_path / "j"
    run_id, lease, path = _new_run(root, 0, older=True)
    reader = FileJournal(root)
    assert list(reader.read(run_id, STREAM)) == []
    writer = FileJournal(root)
    lease = writer.acquire(run_id)
    for i in (1, 2):
        writer.append(lease, STREAM, {"n": i})
    _first_line_replaced(root, path)
    with pytest.raises(JournalCorrupt) as err:
        reader.read(run_id, STREAM)
    assert err.value.line == 1 and _BEGUN in err.value.reason
    writer.close()
    reader.close()


@pytest.mark.parametrize("marker", ["yes", False, None, ["notes", "notes"], ["zz", "notes"], ["../x"], [1]])
def test_a_damaged_marker_fails_the_run_closed_and_flows_check_reports_it(
    tmp_path: Path, marker: object
) -> None:
    """``currentFormat`` of another value than true or a sorted list of stream names is a damaged
    ``run.json``: every read of the run and its streams is ``journal_corrupt`` naming it (the
    stream is not read as one whose first lines may be old), and ``flows check`` reports it."""
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        root = Path(store.journal_location)
    run_id, _, _ = _new_run(root, 2)
    run_json = root / "runs" / run_id / "run.json"
    obj = _run_json(root, run_id)
    obj["currentFormat"] = marker
    run_json.write_bytes(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))
    for read in (lambda: FileJournal(root).read(run_id, STREAM), lambda: FileJournal(root).run(run_id)):
        with pytest.raises(JournalCorrupt) as err:
            read()
        assert (str(err.value.path), err.value.run_id) == (str(run_json), run_id)
        assert "currentFormat" in err.value.reason
    done = flows(db, "check", "--json")
    assert done.returncode == 1, done.stderr
    problems = orjson.loads(done.stdout)["problems"]
    assert [p["kind"] for p in problems if p["path"] == str(run_json)] == ["run_corrupt"]


_CHILD = """
import sys
from journal import FileJournal
jr = FileJournal(sys.argv[1])
if sys.argv[2] == "new run":
    info, lease = jr.begin("f", "s", {})
else:
    lease = jr.acquire(sys.argv[2])
jr.append(lease, "fresh", {"n": 1})
"""

# Where a crash can stop the making of a stream: ``run.json`` staged and renamed into place (a run
# begun, or a stream marked in an older version's run, after the resume's own ``run.json``), then
# the stream's first line written, synced and its mark recorded.
_STAGING = ("staging.before_fsync", "staging.after_stage", "staging.before_rename", "staging.after_rename")
_LINELOG = ("linelog.before_append", "linelog.before_fsync", "linelog.before_mark", "linelog.after_append")


@pytest.mark.parametrize("point", _STAGING + _LINELOG)
@pytest.mark.parametrize("run", ["new run", "older version's run"])
def test_a_crash_at_each_point_of_making_a_stream_leaves_one_that_reads_and_is_marked_once_appended(
    tmp_path: Path, point: str, run: str
) -> None:
    root = tmp_path / "j"
    arg = run
    if run != "new run":
        arg, _, _ = _new_run(root, 1, older=True)
    nth = ":nth2" if run != "new run" and point.startswith("staging.") else ""  # the 1st: the resume's
    env = {**os.environ, "FLOWS_FAILPOINTS": f"{point}=kill{nth}", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), arg], env=env, capture_output=True, check=False, timeout=120
    )
    assert done.returncode == -9, done.stderr  # killed at the point
    jr = FileJournal(root)
    runs = jr.runs()
    for info in runs:  # whatever the crash left reads: no stream of it is damaged
        for stream in jr.streams(info.run_id):
            assert [r.payload for r in jr.read(info.run_id, stream)] in ([], [{"n": 1}], [{"n": 1}, {"n": 2}])
    if not runs:  # the run was never begun (no run.json): nothing to go on with
        assert run == "new run" and point.startswith("staging.")
        return
    run_id = runs[0].run_id if run == "new run" else arg
    marker = _run_json(root, run_id)["currentFormat"]
    if point.startswith("linelog."):  # the mark was in place before the stream's first line
        assert marker == (True if run == "new run" else sorted([STREAM, "fresh"]))
    lease = jr.acquire(run_id)
    jr.append(lease, "fresh", {"n": 2}, key="after")
    jr.release(lease)
    jr.close()
    marker = _run_json(root, run_id)["currentFormat"]
    assert marker == (True if run == "new run" else sorted([STREAM, "fresh"]))
    path = FileJournal(root).stream_path(run_id, "fresh")
    got = [r.payload for r in FileJournal(root).read(run_id, "fresh")]
    assert got in ([{"n": 2}], [{"n": 1}, {"n": 2}])
    lines = path.read_bytes().splitlines(keepends=True)
    lines[0] = _copied_line_1(root) + b"\n"
    path.write_bytes(b"".join(lines))
    with pytest.raises(JournalCorrupt) as err:
        FileJournal(root).read(run_id, "fresh")
    assert err.value.line == 1 and _BEGUN in err.value.reason


def test_flows_check_reports_an_old_format_line_in_place_of_line_1_and_repair_leaves_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        root = Path(store.journal_location)
    run_id, _, path = _new_run(root, 2)
    _first_line_replaced(root, path)
    before = path.read_bytes()
    for args in (("check", "--json"), ("check", "--repair", "--json")):
        done = flows(db, *args)
        assert done.returncode == 1, done.stderr
        (found,) = [p for p in orjson.loads(done.stdout)["problems"] if p["kind"] == "stream_corrupt"]
        assert (found["path"], found["repairable"]) == (str(path), False)
        assert (found["runId"], found["stream"], found["line"]) == (run_id, STREAM, 1)
        assert _BEGUN in found["message"]
        assert path.read_bytes() == before
