"""Crafted journal state: every byte read back is untrusted, a valid checksum included.

A ``run.json`` that is valid JSON of the wrong shape, and a stream line whose checksum is right but
whose fields are not a record's, are ``journal_corrupt`` naming the file (and the run, and the line),
for every operation that reads them: never a ``KeyError``, ``TypeError`` or ``ValueError``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

import journal
from journal import FileJournal, JournalCorrupt
from tests._helpers.crafted import left_running, line, refused_by_every_reader

GOOD_RUN = {
    "runId": "RUN",
    "flow": "f",
    "scope": "s",
    "state": "running",
    "epoch": 1,
    "createdMs": 1_700_000_000_000,
    "updatedMs": 1_700_000_000_000,
    "meta": {},
    "error": None,
}


def _without(key: str) -> dict[str, Any]:
    return {k: v for k, v in GOOD_RUN.items() if k != key}


def _with(**fields: Any) -> dict[str, Any]:
    return {**GOOD_RUN, **fields}


CRAFTED_RUNS: dict[str, Any] = {
    "a list": [GOOD_RUN],
    "a string": "running",
    "a number": 1,
    "null": None,
    "empty": {},
    **{
        f"no {k}": _without(k) for k in ("runId", "flow", "scope", "state", "epoch", "createdMs", "updatedMs")
    },
    "another run's id": _with(runId="20000101T000000-0000000000"),
    "an extra field": _with(extra=1),
    "state derived, never stored": _with(state="interrupted"),
    "state a number": _with(state=1),
    "state nested": _with(state={"value": "running"}),
    "state a list": _with(state=["running"]),
    "epoch a string": _with(epoch="1"),
    "epoch a float": _with(epoch=1.5),
    "epoch a boolean": _with(epoch=True),
    "epoch zero": _with(epoch=0),
    "epoch negative": _with(epoch=-3),
    "epoch past 64 bits": _with(epoch=2**64 - 1),
    "epoch huge": _with(epoch=1e300),
    "createdMs past year 9999": _with(createdMs=2**62),
    "createdMs negative": _with(createdMs=-1),
    "updatedMs a string": _with(updatedMs="now"),
    "flow a number": _with(flow=7),
    "scope nested": _with(scope={"s": 1}),
    "runId nested": _with(runId={"id": "RUN"}),
    "meta a list": _with(meta=["x"]),
    "meta a string": _with(meta="source"),
    "error a string": _with(error="boom"),
    "error a list": _with(error=[1]),
}


@pytest.fixture
def run_dir(tmp_path: Path) -> tuple[Path, str, journal.Lease]:
    return left_running(tmp_path / "j", {})


@pytest.mark.parametrize("shape", sorted(CRAFTED_RUNS))
def test_a_run_json_of_the_wrong_shape_is_journal_corrupt_naming_the_run_and_the_file(
    run_dir: tuple[Path, str, journal.Lease], shape: str
) -> None:
    root, run_id, lease = run_dir
    crafted = CRAFTED_RUNS[shape]
    if isinstance(crafted, dict) and crafted.get("runId") == "RUN":
        crafted = {**crafted, "runId": run_id}
    path = root / "runs" / run_id / "run.json"
    path.write_bytes(orjson.dumps(crafted))
    refused_by_every_reader(root, run_id, lease, path)
    assert path.read_bytes() == orjson.dumps(crafted)  # nothing rewrote it


def test_a_huge_run_json_is_refused_without_reading_it_all(run_dir: tuple[Path, str, journal.Lease]) -> None:
    root, run_id, _ = run_dir
    path = root / "runs" / run_id / "run.json"
    path.write_bytes(b'{"meta": "' + b"x" * (17 * 1024 * 1024) + b'"}')
    with pytest.raises(JournalCorrupt, match="larger than"):
        FileJournal(root).run(run_id)


GOOD_RECORD = {"id": "00112233aabbccdd", "key": None, "payload": {"n": 2}, "seq": 2, "ts": 1}

CRAFTED_LINES: dict[str, dict[str, Any]] = {
    "no ts": {k: v for k, v in GOOD_RECORD.items() if k != "ts"},
    "no payload": {k: v for k, v in GOOD_RECORD.items() if k != "payload"},
    "an extra field": {**GOOD_RECORD, "extra": 1},
    "seq a string": {**GOOD_RECORD, "seq": "2"},
    "seq a float": {**GOOD_RECORD, "seq": 2.0},
    "seq a boolean": {**GOOD_RECORD, "seq": True},
    "seq nested": {**GOOD_RECORD, "seq": [2]},
    "seq past 64 bits": {**GOOD_RECORD, "seq": 2**64 - 1},
    "id a number": {**GOOD_RECORD, "id": 5},
    "id a path": {**GOOD_RECORD, "id": "../../x"},
    "id empty": {**GOOD_RECORD, "id": ""},
    "key a number": {**GOOD_RECORD, "key": 5},
    "key nested": {**GOOD_RECORD, "key": {"k": 1}},
    "key with NUL": {**GOOD_RECORD, "key": "a\x00b"},
    "key with a newline": {**GOOD_RECORD, "key": "a\nb"},
    "ts a string": {**GOOD_RECORD, "ts": "1"},
    "ts negative": {**GOOD_RECORD, "ts": -1},
    "ts huge": {**GOOD_RECORD, "ts": 1e300},
    "payload a list": {**GOOD_RECORD, "payload": [1]},
    "payload a string": {**GOOD_RECORD, "payload": "x"},
    "payload null": {**GOOD_RECORD, "payload": None},
}


@pytest.fixture
def stream(tmp_path: Path) -> tuple[FileJournal, str, journal.Lease, Path]:
    jr = FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    for n in (1, 2, 3):
        jr.append(lease, "s", {"n": n})
    return jr, info.run_id, lease, jr.stream_path(info.run_id, "s")


@pytest.mark.parametrize("shape", sorted(CRAFTED_LINES))
@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_checksummed_line_that_is_not_a_record_is_journal_corrupt_naming_its_line(
    stream: tuple[FileJournal, str, journal.Lease, Path], shape: str, where: str
) -> None:
    jr, run_id, lease, path = stream
    lines = path.read_bytes().splitlines(keepends=True)
    index = 1 if where == "middle" else 2
    crafted = {**CRAFTED_LINES[shape]}
    if type(crafted.get("seq")) is int and crafted["seq"] == 2 and where == "last":
        crafted["seq"] = 3
    lines[index] = line(crafted) + b"\n"
    path.write_bytes(b"".join(lines))
    operations: dict[str, Callable[[], object]] = {
        "read": lambda: FileJournal(jr.root).read(run_id, "s"),
        "find": lambda: FileJournal(jr.root).find(run_id, "s", "k"),
        "append": lambda: FileJournal(jr.root).append(lease, "s", {"n": 4}),
        "iter_reverse": lambda: list(journal.LineLog(path, journal.RecordCodec(run_id, "s")).iter_reverse()),
    }
    for name, operation in operations.items():
        with pytest.raises(JournalCorrupt) as err:
            operation()
        assert (err.value.path, err.value.line) == (path, index + 1), name
        assert "checksummed" in err.value.reason
    assert path.read_bytes() == b"".join(lines)  # never cut, never rewritten


def test_a_line_decoded_back_is_exactly_the_record_written(
    stream: tuple[FileJournal, str, journal.Lease, Path],
) -> None:
    jr, run_id, lease, _ = stream
    rec = jr.append(lease, "s", {"nested": {"a": [1, "two", None]}}, key="k é")
    assert FileJournal(jr.root).read(run_id, "s")[-1] == rec
    with pytest.raises(ValueError, match="cannot encode"):
        journal.RecordCodec(run_id, "s").encode(journal.Record(run_id, "s", 0, "x", None, 1, {}))


def test_a_checksummed_line_over_the_cap_is_journal_corrupt_naming_its_line(
    stream: tuple[FileJournal, str, journal.Lease, Path],
) -> None:
    jr, run_id, lease, path = stream
    lines = path.read_bytes().splitlines(keepends=True)
    huge = "x" * (journal.MAX_PAYLOAD_BYTES + 65536)  # past any line an append writes
    lines[1] = line({**GOOD_RECORD, "payload": {"a": huge}}) + b"\n"
    path.write_bytes(b"".join(lines))
    operations: dict[str, Callable[[], object]] = {
        "read": lambda: FileJournal(jr.root).read(run_id, "s"),
        "find": lambda: FileJournal(jr.root).find(run_id, "s", "k"),
        "append": lambda: FileJournal(jr.root).append(lease, "s", {"n": 4}),
    }
    for name, operation in operations.items():
        with pytest.raises(JournalCorrupt) as err:
            operation()
        assert (err.value.code, err.value.path, err.value.line) == ("journal_corrupt", path, 2), name
        # judged by its first bytes past the cap, never read whole (its length is not measured)
        assert f"a line of more than {journal.RecordCodec.max_line:,} bytes" in err.value.reason, name
        assert "restore it from a backup or inspect it with `flows check`" in str(err.value), name
    assert path.read_bytes() == b"".join(lines)  # never cut, never rewritten


_SPARSE = 256 * 1024 * 1024  # a hole this long reads back as zeros, without taking the disk
_READ_IT = """
import resource, sys
from pathlib import Path
import journal
from journal import FileJournal, JournalCorrupt
root, run_id, op = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
path = FileJournal(root).stream_path(run_id, "s")
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ops = {
    "read": lambda: len(FileJournal(root).read(run_id, "s")),
    "find": lambda: FileJournal(root).find(run_id, "s", "k2") is not None,
    "iter_reverse": lambda: len(list(journal.LineLog(path, journal.RecordCodec(run_id, "s")).iter_reverse())),
}
try:
    got = str(ops[op]())
except JournalCorrupt as exc:
    got = f"{exc.code} line {exc.line}: {exc.reason}"
print(got)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) // 1024)
"""


@pytest.mark.parametrize("op", ["read", "find", "iter_reverse"])
@pytest.mark.parametrize(
    "where",
    [
        "acknowledged",
        "acknowledged, the mark crafted to cover it",
        "past the mark",
        "past the end, the mark crafted past the file's",
    ],
)
def test_a_line_of_hundreds_of_megabytes_is_judged_without_reading_it_whole(
    tmp_path: Path, where: str, op: str
) -> None:
    """A line longer than a record's may be (a sparse file: zeros that take no disk) is judged from
    its first bytes past the cap: damage when acknowledged, a torn tail past the watermark. It was
    read whole, and copied, before it was refused: a crafted stream made every read cost gigabytes."""
    import subprocess
    import sys

    jr = FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    for n in (1, 2, 3):
        jr.append(lease, "s", {"n": n}, key=f"k{n}")
    path = jr.stream_path(info.run_id, "s")
    lines = path.read_bytes().splitlines(keepends=True)
    with path.open("r+b") as f:
        if where.startswith("acknowledged"):  # a hole in place of the second line: below the mark
            f.truncate(len(lines[0]))
            f.truncate(len(lines[0]) + _SPARSE)
            f.seek(0, 2)
            f.write(b"\n" + b"".join(lines[1:]))
        else:  # a hole after the last line: never acknowledged
            f.truncate(sum(map(len, lines)) + _SPARSE)
    if where.startswith("past the end"):
        # a mark beyond the file: lines were lost, and every line the file has is acknowledged;
        # naming the first damaged one read the whole file (the hole) into memory at once
        marks_path = Path(f"{path}.lock")
        marks = journal.LineMarks.parse(marks_path.read_bytes())
        marks_path.write_bytes(dataclasses.replace(marks, plain=1 << 40).pack())
    if where == "acknowledged, the mark crafted to cover it":
        # the checksummed mark claims the whole file, so every line of it is below the watermark:
        # the backward reader (iter_reverse) meets the hole from its end, and held it growing, block
        # after block, re-copied each time (hours for this hole, and all of it in memory)
        marks_path = Path(f"{path}.lock")
        marks = journal.LineMarks.parse(marks_path.read_bytes())
        marks_path.write_bytes(dataclasses.replace(marks, plain=path.stat().st_size).pack())
    done = subprocess.run(
        [sys.executable, "-c", _READ_IT, str(jr.root), info.run_id, op],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    got, peak_mib = done.stdout.splitlines()
    assert int(peak_mib) < 128  # the hole is 256 MiB: it was read whole (and copied once more)
    if where.startswith("acknowledged"):
        assert got == (
            f"journal_corrupt line 2: a line of more than {journal.RecordCodec.max_line:,} bytes, "
            "over what a record's may hold"
        )
    elif where.startswith("past the end"):
        assert got.startswith("journal_corrupt line 4: ")  # the hole, after the three lines
    else:
        assert got == {"read": "3", "find": "True", "iter_reverse": "3"}[op]
