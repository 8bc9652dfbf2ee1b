"""Links, FIFOs, sockets, directories and files where the journal expects something else.

At every path the journal or the line log opens (``run.json``, ``run.lock``, ``lease.lock``, a
stream and its ``.lock``, the run, ``streams`` and ``runs`` folders), anything of the wrong kind is
``journal_corrupt`` naming that path: never a hang (each operation runs under a time bound), never
``IsADirectoryError``, never a link followed, never a byte written outside the journal.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import journal
from journal import FileJournal, JournalCorrupt, LineLog, Record, RecordCodec

BOUND_S = 10.0


def bounded(operation: Callable[[], object], *, unblock: Path | None = None) -> object:
    """Run ``operation`` in a thread; return what it returned or raised. A hang fails the test
    (and a FIFO at ``unblock`` is opened so the stuck thread can finish)."""
    outcome: list[object] = []

    def run() -> None:
        try:
            outcome.append(operation())
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    if thread.is_alive():
        if unblock is not None:
            with contextlib.suppress(OSError):
                os.close(os.open(unblock, os.O_RDWR | os.O_NONBLOCK))
        thread.join(BOUND_S)
        pytest.fail(f"the operation hung for {BOUND_S}s")
    return outcome[0]


def _snapshot(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        out[str(p.relative_to(root))] = p.read_bytes() if p.is_file() and not p.is_symlink() else "other"
    return out


@contextlib.contextmanager
def planted(path: Path, kind: str, outside: Path) -> Iterator[None]:
    """Put a ``kind`` at ``path`` (moving what was there aside), then put the original back."""
    saved = outside.parent / "saved" / path.name  # aside, outside the journal (not a stray in it)
    saved.parent.mkdir(exist_ok=True)
    had = path.exists() or path.is_symlink()
    if had:
        path.rename(saved)
    sock = None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
        (path / "inside").write_bytes(b"x")
    elif kind == "file":
        path.write_bytes(b"not what belongs here\n")
    elif kind == "link to a file":
        path.symlink_to(outside / "target-file")
    elif kind == "link to a directory":
        path.symlink_to(outside / "target-dir", target_is_directory=True)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        short = Path(tempfile.mkdtemp(prefix="s")) / "s"  # a socket's path is short: bind, then move
        sock.bind(str(short))
        short.rename(path)
        short.parent.rmdir()
    try:
        yield
    finally:
        if sock is not None:
            sock.close()
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        if had:
            saved.rename(path)


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Any]:
    outside = tmp_path / "outside"
    (outside / "target-dir").mkdir(parents=True)
    (outside / "target-file").write_bytes(b'{"runId": "elsewhere"}\n')
    (outside / "target-dir" / "run.json").write_bytes(b"{}")
    root = tmp_path / "j"
    jr = FileJournal(root)
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"n": 1})
    jr.release(lease)  # the run reads interrupted: run() looks at lease.lock
    jr.close()
    run = root / "runs" / info.run_id
    return {"root": root, "run_id": info.run_id, "lease": lease, "outside": outside, "run": run}


FILE_KINDS = ["fifo", "directory", "link to a file", "socket"]
DIR_KINDS = ["link to a directory", "file", "fifo"]


def _ops(w: dict[str, Any]) -> dict[str, Callable[[], object]]:
    root, run_id, lease = w["root"], w["run_id"], w["lease"]
    return {
        "run": lambda: FileJournal(root).run(run_id),
        "runs": lambda: FileJournal(root).runs(),
        "append": lambda: FileJournal(root).append(lease, "s", {"n": 2}),
        "read": lambda: FileJournal(root).read(run_id, "s"),
        "streams": lambda: [FileJournal(root).read(run_id, s) for s in FileJournal(root).streams(run_id)],
        "begin": lambda: FileJournal(root).begin("f", "s", {}),
        "acquire": lambda: FileJournal(root).acquire(run_id),  # last: where it succeeds, the lease moves on
    }


# (target, which operations must meet it and fail closed)
TARGETS = {
    "run.json": ("{run}/run.json", ["run", "runs", "acquire", "append"]),
    "lease.lock": ("{run}/lease.lock", ["run", "runs", "acquire"]),
    "run.lock": ("{run}/run.lock", ["append"]),
    "stream": ("{run}/streams/s.jsonl", ["append", "read", "streams"]),
    "stream lock": ("{run}/streams/s.jsonl.lock", ["append", "read"]),
}
DIR_TARGETS = {
    "run folder": ("{run}", ["run", "runs", "acquire", "append", "read", "streams"]),
    "streams folder": ("{run}/streams", ["append", "read", "streams"]),
    "runs folder": ("{root}/runs", ["run", "runs", "acquire", "append", "read", "begin"]),
}


def _check(w: dict[str, Any], target: str, kinds: list[str], spec: tuple[str, list[str]]) -> None:
    path = Path(spec[0].format(run=w["run"], root=w["root"]))
    for kind in kinds:
        before = _snapshot(w["outside"])
        with planted(path, kind, w["outside"]):
            for name, operation in _ops(w).items():
                got = bounded(operation, unblock=path if kind == "fifo" else None)
                if name in spec[1]:
                    assert isinstance(got, JournalCorrupt), f"{target} as {kind}: {name} gave {got!r}"
                    assert got.code == "journal_corrupt"
                    assert got.path == path, f"{target} as {kind}: {name} named {got.path}"
                    assert str(path) in str(got)
                else:
                    assert not isinstance(got, Exception) or isinstance(got, journal.JournalError), (
                        name,
                        got,
                    )
        assert _snapshot(w["outside"]) == before, f"{target} as {kind}: a write outside the journal"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_non_regular_file_at_a_journal_path_is_journal_corrupt_never_a_hang(
    world: dict[str, Any], target: str
) -> None:
    _check(world, target, FILE_KINDS, TARGETS[target])


@pytest.mark.parametrize("target", sorted(DIR_TARGETS))
def test_a_link_file_or_fifo_at_a_journal_folder_is_journal_corrupt_and_never_followed(
    world: dict[str, Any], target: str
) -> None:
    _check(world, target, DIR_KINDS, DIR_TARGETS[target])


def test_the_journal_works_again_once_the_planted_file_is_gone(world: dict[str, Any]) -> None:
    stream = world["run"] / "streams" / "s.jsonl"
    with planted(stream, "fifo", world["outside"]):
        assert isinstance(
            bounded(lambda: FileJournal(world["root"]).read(world["run_id"], "s")), JournalCorrupt
        )
    jr = FileJournal(world["root"])
    assert [r.payload["n"] for r in jr.read(world["run_id"], "s")] == [1]


def test_something_in_the_runs_folder_that_is_not_a_run_fails_the_listing_naming_it(
    world: dict[str, Any],
) -> None:
    stray = world["root"] / "runs" / "not a run\n"
    stray.mkdir()
    with pytest.raises(JournalCorrupt) as err:
        FileJournal(world["root"]).runs()
    assert err.value.path == stray
    assert "\n" not in str(err.value)


# -- the line log as the agent ledger uses it ---------------------------------------------------


def _codec() -> RecordCodec:
    return RecordCodec("r", "s")


@pytest.mark.parametrize("kind", FILE_KINDS)
@pytest.mark.parametrize("which", ["log", "lock"])
def test_the_line_log_refuses_a_non_regular_log_or_lock_with_journal_corrupt(
    tmp_path: Path, kind: str, which: str
) -> None:
    outside = tmp_path / "outside"
    (outside / "target-dir").mkdir(parents=True)
    (outside / "target-file").write_bytes(b"")
    path = tmp_path / "ledger.jsonl"
    with LineLog(path, _codec()).locked() as log:
        log.append(Record("r", "s", 1, "id1", None, 1, {"n": 1}))
    target = path if which == "log" else Path(f"{path}.lock")
    before = _snapshot(outside)

    def locked_append() -> None:
        with LineLog(path, _codec()).locked() as log:
            log.append(Record("r", "s", 2, "id2", None, 2, {"n": 2}))

    operations: dict[str, Callable[[], object]] = {
        "locked append": locked_append,
        "read": lambda: LineLog(path, _codec()).read(),
        "iter_reverse": lambda: list(LineLog(path, _codec()).iter_reverse()),
    }
    with planted(target, kind, outside):
        for name, operation in operations.items():
            got = bounded(operation, unblock=target if kind == "fifo" else None)
            if which == "lock" and name == "iter_reverse" and not isinstance(got, Exception):
                continue  # a backward read looks at the lock only for its mark: it may not need it
            assert isinstance(got, JournalCorrupt), (name, got)
            assert got.path == target
    assert _snapshot(outside) == before


@pytest.mark.parametrize("kind", ["fifo", "link to a file", "file"])
def test_an_erasure_rewrite_never_writes_through_nor_blocks_on_what_lies_at_its_copy_name(
    tmp_path: Path, kind: str
) -> None:
    """The copy an erasure writes beside the stream has a name anyone can predict (the process and
    thread): a FIFO there would hang the erasure, a link be followed, a leftover be reused. Whatever
    lies there is removed unread, and the copy is made anew."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target-file").write_bytes(b"outside the journal\n")
    jr = FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"text": "a secret to erase"})
    jr.finish(lease, journal.RunState.DONE)
    stream = tmp_path / "j" / "runs" / info.run_id / "streams" / "s.jsonl"
    go, outcome = threading.Event(), []

    def erase() -> None:
        go.wait(BOUND_S)
        try:
            outcome.append(jr.rewrite_payloads(info.run_id, "s", {1: {"text": "erased"}}, pad="pad"))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=erase, daemon=True)
    thread.start()
    copy = stream.with_name(f".{stream.name}.rewrite-{os.getpid()}-{thread.ident}")
    with planted(copy, kind, outside):
        go.set()
        thread.join(BOUND_S)
        if thread.is_alive():
            os.close(os.open(copy, os.O_RDWR | os.O_NONBLOCK))
            thread.join(BOUND_S)
            pytest.fail(f"the erasure hung on a {kind} at its copy's name")
        assert outcome == [1], outcome
        assert not copy.exists() and not copy.is_symlink()
        copy.touch()  # for ``planted`` to remove on leaving
    assert (outside / "target-file").read_bytes() == b"outside the journal\n"
    assert [r.payload["text"] for r in FileJournal(tmp_path / "j").read(info.run_id, "s")] == ["erased"]
    assert b"a secret" not in stream.read_bytes()


def test_a_file_on_the_way_to_a_journal_file_is_said_as_what_the_path_lies_below(tmp_path: Path) -> None:
    """A line log whose folder is a file: ``journal_corrupt`` whose message says the path lies below
    something that is not a folder (not that it "is" one, nor "not a regular file")."""
    (tmp_path / "plain").write_bytes(b"a file, not a folder")
    path = tmp_path / "plain" / "ledger.jsonl"
    got = bounded(lambda: LineLog(path, _codec()).read())
    assert isinstance(got, JournalCorrupt)
    assert got.message.startswith(f"{path} lies below something that is not a folder;"), got.message
