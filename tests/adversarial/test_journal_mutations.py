"""A property: whatever happens to a journal folder, every operation answers truly or fails closed.

Hypothesis damages a populated journal at random — truncates a file, flips a byte, duplicates or
drops a line, deletes a file or folder, puts a FIFO, a folder, a file or a link (to something
outside) in its place — then runs every journal operation from a fresh object, each under a time
bound. Each either answers (and what it answers is true: a stream reads as a prefix of what was
written, never a record nobody wrote) or raises a journal error with a documented code. Never
another exception, never a hang, never a byte written outside the journal folder. A fixed-seed
profile keeps the run short and the same everywhere.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journal
from journal import FileJournal, Record, RunState
from tests.conftest import ROOT

BOUND_S = 10.0
DOCUMENTED = set(re.findall(r"`(journal_[a-z_]+)`", (ROOT / "docs" / "SURFACE.md").read_text()))
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,  # the fixed-seed profile: the same examples on every run and machine
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
MUTATIONS = ["truncate", "flip", "duplicate line", "drop line", "delete", "fifo", "folder", "file", "link"]
_counter = itertools.count()


def _populate(root: Path) -> tuple[dict[tuple[str, str], list[Record]], dict[str, journal.Lease]]:
    """Two runs (one finished, one interrupted), two streams each, keyed and unkeyed records."""
    written: dict[tuple[str, str], list[Record]] = {}
    leases: dict[str, journal.Lease] = {}
    jr = FileJournal(root)
    for n, finish in enumerate((True, False)):
        info, lease = jr.begin(f"flow{n}", "scope", {"source": f"/x/flow{n}.py"})
        leases[info.run_id] = lease
        for stream in ("memory-learn", "other"):
            written[(info.run_id, stream)] = [
                jr.append(lease, stream, {"n": i, "text": "x" * (i * 7)}, key=f"k{i}" if i % 2 else None)
                for i in range(4)
            ]
        if finish:
            jr.finish(lease, RunState.DONE)
        else:
            jr.release(lease)
    jr.close()
    return written, leases


def _targets(root: Path) -> list[Path]:
    """Everything in the journal folder, without following links out of it."""
    found = []
    for folder, dirs, files in os.walk(root):  # os.walk does not descend into links
        found += [Path(folder, name) for name in (*dirs, *files)]
    return sorted(found)


def _mutate(path: Path, kind: str, fraction: float, outside: Path) -> None:
    mode = path.lstat().st_mode
    is_dir = stat.S_ISDIR(mode)
    if kind in ("truncate", "flip", "duplicate line", "drop line") and stat.S_ISREG(mode):
        path.write_bytes(_rewritten(path.read_bytes(), kind, fraction))
        return
    if is_dir:
        shutil.rmtree(path)
    else:
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "file":
        path.write_bytes(b'{"runId": "planted"}\n')
    elif kind == "link":
        path.symlink_to(outside / ("dir" if fraction < 0.5 else "file.jsonl"))


def _rewritten(data: bytes, kind: str, fraction: float) -> bytes:
    if kind == "truncate":
        return data[: int(len(data) * fraction)]
    if kind == "flip":
        out = bytearray(data)
        if out:
            out[min(int(len(out) * fraction), len(out) - 1)] ^= 0x20
        return bytes(out)
    lines = data.splitlines(keepends=True)
    if lines:
        i = min(int(len(lines) * fraction), len(lines) - 1)
        lines[i : i + 1] = [lines[i], lines[i]] if kind == "duplicate line" else []
    return b"".join(lines)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _bounded(operation: Callable[[], object], root: Path) -> object:
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(operation())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    if thread.is_alive():  # release whatever FIFO it is stuck on, then fail
        for p in _targets(root):
            with contextlib.suppress(OSError):
                os.close(os.open(p, os.O_RDWR | os.O_NONBLOCK))
        thread.join(BOUND_S)
        raise AssertionError(f"{operation} hung for {BOUND_S}s")
    return outcome[0]


def _true_reading(got: Any, wrote: list[Record]) -> bool:
    """A stream read answers truly when it is a prefix of what was written (no made-up record)."""
    return list(got) == wrote[: len(got)]


def _operations(
    root: Path, written: dict[tuple[str, str], list[Record]], leases: dict[str, journal.Lease]
) -> list[tuple[str, Callable[[], object], Callable[[Any], bool]]]:
    """(name, operation, how to tell its answer is true)."""
    ops: list[tuple[str, Callable[[], object], Callable[[Any], bool]]] = [
        ("runs", lambda: FileJournal(root).runs(), lambda got: {r.run_id for r in got} <= set(leases)),
    ]
    for run_id, lease in leases.items():
        ops.append(("run", lambda r=run_id: FileJournal(root).run(r), lambda got, r=run_id: got.run_id == r))
        ops.append(
            (
                "streams",
                lambda r=run_id: FileJournal(root).streams(r),
                lambda got: set(got) <= {"memory-learn", "other"},
            )
        )
        for stream in ("memory-learn", "other"):
            wrote = written[(run_id, stream)]
            ops.append(
                (
                    "read",
                    lambda r=run_id, s=stream: FileJournal(root).read(r, s),
                    lambda got, w=wrote: _true_reading(got, w),
                )
            )
            ops.append(
                (
                    "find",
                    lambda r=run_id, s=stream: FileJournal(root).find(r, s, "k1"),
                    lambda got, w=wrote: got is None or got == w[1],
                )
            )
            ops.append(
                (
                    "append",
                    lambda ls=lease, s=stream: FileJournal(root).append(ls, s, {"n": "new"}, key="new"),
                    lambda got: got.payload == {"n": "new"},
                )
            )
        ops.append(
            ("acquire", lambda r=run_id: FileJournal(root).acquire(r), lambda got, r=run_id: got.run_id == r)
        )
    ops.append(
        ("begin", lambda: FileJournal(root).begin("f", "s", {}), lambda got: got[0].state == RunState.RUNNING)
    )
    return ops


@SETTINGS
@given(
    damage=st.lists(
        st.tuples(st.integers(0, 10_000), st.sampled_from(MUTATIONS), st.floats(0, 1)), min_size=1, max_size=3
    )
)
def test_any_damage_to_a_journal_folder_gives_true_answers_or_documented_errors_within_a_bound(
    tmp_path: Path, damage: list[tuple[int, str, float]]
) -> None:
    base = tmp_path / f"case{next(_counter)}"
    root, outside = base / "journal", base / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "file.jsonl").write_bytes(b'{"not": "a record"}\n')
    written, leases = _populate(root)
    for pick, kind, fraction in damage:
        targets = _targets(root)
        if targets:
            _mutate(targets[pick % len(targets)], kind, fraction, outside)
    before = _snapshot(outside)
    for name, operation, is_true in _operations(root, written, leases):
        got = _bounded(operation, root)
        if isinstance(got, BaseException):
            assert isinstance(got, journal.JournalError), f"{name} after {damage}: {got!r}"
            assert got.code in DOCUMENTED, f"{name}: undocumented code {got.code}"
            assert "Traceback" not in str(got)
        else:
            assert is_true(got), f"{name} after {damage} answered {got!r}"
    assert _snapshot(outside) == before, f"a write outside the journal after {damage}"
    assert sorted(p.name for p in base.iterdir()) == ["journal", "outside"]


def test_a_run_whose_run_record_was_removed_but_whose_records_remain_fails_closed(tmp_path: Path) -> None:
    """Records are appended only after ``run.json`` is in place: a run folder whose streams hold
    records without it was damaged, not left by an unfinished ``begin``, and is never read as
    absent (its records, a forget among them, would drop out of every answer)."""
    jr = FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "memory-forget", {"id": "k"})
    jr.finish(lease, RunState.DONE)
    jr.close()
    os.unlink(tmp_path / "j" / "runs" / info.run_id / "run.json")
    fresh = FileJournal(tmp_path / "j")
    for ask in (fresh.runs, fresh.run_ids, lambda: fresh.run(info.run_id)):
        try:
            ask()
        except journal.JournalCorrupt as exc:
            assert exc.reason == "run record missing" and exc.run_id == info.run_id
            assert "run.json" in str(exc) and "restore" in str(exc)
        else:
            raise AssertionError(f"{ask} read a run with records and no run.json as absent")


def test_a_begin_that_never_finished_is_still_no_run(tmp_path: Path) -> None:
    """What a ``begin`` killed before its ``run.json`` leaves (a run folder, an empty ``streams``
    folder, an empty stream file at most) is not listed and is no error."""
    jr = FileJournal(tmp_path / "j")
    info, _ = jr.begin("f", "s", {})
    jr.close()
    half = tmp_path / "j" / "runs" / "20260101T000000-0123456789"
    (half / "streams").mkdir(parents=True)
    (half / "streams" / "memory-learn.jsonl").touch()
    assert [r.run_id for r in FileJournal(tmp_path / "j").runs()] == [info.run_id]
    with pytest.raises(journal.JournalRunNotFound):
        FileJournal(tmp_path / "j").run(half.name)
