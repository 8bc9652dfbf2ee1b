"""Where a store's files and folders belong, something else may be: the history DB a FIFO, a
folder, a socket or a link; the store's folder a FIFO, a socket or a plain file; a scope's folder a
link or a FIFO. Every command that reads or writes the store answers with a coded error on one line
that names the odd path, exit 1: never a hang on a FIFO, never a traceback, never a message about
something else (a folder that "does not exist", a "corrupt" journal)."""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

import memory
from tests.flows.helpers import flows

KEY = "0123456789abcdef0123456789abcdef"
READS = [["recall"], ["why", "pressure"], ["history", KEY], ["check"], ["sync"]]
WRITES = [["learn", "pressure falls", "--scope", "s"]]


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _socket(path: Path) -> None:
    # a socket's path is at most 108 bytes: bound in a short folder, then moved into place
    with tempfile.TemporaryDirectory(dir="/tmp") as short:
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(f"{short}/s")
            os.rename(f"{short}/s", path)
        finally:
            sock.close()


def _file(path: Path) -> None:
    path.write_bytes(b"not a folder")


def _folder(path: Path) -> None:
    path.mkdir()


def _link(path: Path) -> None:
    path.symlink_to(path.parent / "elsewhere")


ODD: dict[str, Callable[[Path], None]] = {
    "fifo": _fifo,
    "socket": _socket,
    "file": _file,
    "folder": _folder,
    "link": _link,
}


def _refused(db: Path, args: list[str], named: Path, code: str) -> None:
    done = flows(db, *args, timeout=60)  # a read that opened a FIFO would block here
    assert done.returncode == 1, (args, done.stdout, done.stderr)
    assert done.stderr.startswith(f"flows: error[{code}]: "), (args, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, (args, done.stderr)
    assert str(named) in done.stderr, (args, done.stderr)


@pytest.mark.parametrize("kind", ["fifo", "socket", "folder", "link"])
def test_a_history_db_that_is_no_file_is_refused_by_every_command_naming_it(
    tmp_path: Path, kind: str
) -> None:
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    ODD[kind](db)
    for args in READS + WRITES:
        if args == ["check"]:
            done = flows(db, "check", timeout=60)  # a report, not an error: it names the DB
            assert done.returncode == 1 and str(db) in done.stdout and "Traceback" not in done.stderr
            continue
        _refused(db, args, db, "memory_unreachable")


@pytest.mark.parametrize("kind", ["fifo", "socket", "file", "link"])  # the link leads nowhere
def test_a_store_folder_that_is_no_folder_is_refused_by_every_command_naming_it(
    tmp_path: Path, kind: str
) -> None:
    folder = tmp_path / "store"
    ODD[kind](folder)
    for args in READS + WRITES:
        _refused(folder / "history.db", args, folder, "memory_unreachable")


@pytest.mark.parametrize("kind", ["fifo", "link", "file"])
def test_a_scope_folder_that_is_no_folder_is_refused_by_every_read_naming_it(
    tmp_path: Path, kind: str
) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s") as sess:
        sess.learn({"text": "pressure falls before rain"})
    (scope,) = (db.parent / "flows-memory").iterdir()
    scope.rename(db.parent / "elsewhere")
    ODD[kind](scope)
    for args in (["recall"], ["why", "pressure"]):
        _refused(db, args, scope, "memory_unreachable")
    for args in (["sync"], ["learn", "more", "--scope", "s"]):
        done = flows(db, *args, timeout=60)
        assert done.returncode == 1 and done.stderr.startswith("flows: error[memory_"), (args, done.stderr)
        assert "Traceback" not in done.stderr and str(scope) in done.stderr, (args, done.stderr)
    check = flows(db, "check", timeout=60)
    assert check.returncode == 1 and str(scope) in check.stdout and "Traceback" not in check.stderr


@pytest.mark.parametrize("kind", ["fifo", "socket", "file", "link"])  # the link leads nowhere
def test_a_store_object_on_a_folder_that_is_no_folder_is_refused_at_once_naming_it(
    tmp_path: Path, kind: str
) -> None:
    # through the API the reads said "empty" (a link to nothing) or named a file below the folder,
    # and the first write failed with "File exists"
    folder = tmp_path / "store"
    ODD[kind](folder)
    with pytest.raises(memory.Unreachable) as refused:
        memory.MemoryStore(folder / "history.db")
    assert refused.value.path == folder and str(folder) in str(refused.value)


def _loop(at: Path) -> None:
    """Two links at ``at`` and beside it that lead to each other: nothing is ever reached."""
    other = at.parent / (at.name + "-other")
    other.symlink_to(at.name)
    at.symlink_to(other.name)


FLOW = "import flows\n\n\n@flows.flow\nasync def body(f):\n    return 1\n"


def _loop_refused(db: Path, args: list[str], named: Path, said: str) -> None:
    done = flows(db, *args, timeout=60)
    assert done.returncode == 1, (args, done.stdout, done.stderr)
    # it said `journal_read_interrupted` (a read to retry) or named the DB as "a symbolic link"
    assert done.stderr.startswith("flows: error[memory_unreachable]: "), (args, done.stderr)
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, (args, done.stderr)
    assert str(named) in done.stderr and "loop of links" in done.stderr and said in done.stderr, (
        args,
        done.stderr,
    )


@pytest.mark.parametrize("where", ["folder", "above"])
def test_a_store_folder_in_a_loop_of_links_is_refused_by_every_command_naming_it(
    tmp_path: Path, where: str
) -> None:
    loop = tmp_path / "store"
    _loop(loop)
    folder = loop if where == "folder" else loop / "deeper"
    flow = tmp_path / "f.py"
    flow.write_text(FLOW)
    for args in [["recall"], ["check"], *WRITES, ["run", str(flow)], ["runs"], ["resume", "r1"]]:
        _loop_refused(folder / "history.db", args, loop, "give --db")


@pytest.mark.parametrize("given", [True, False])
def test_a_journal_in_a_loop_of_links_is_refused_by_every_command_naming_it(
    tmp_path: Path, given: bool
) -> None:
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    loop = tmp_path / "journal" if given else db.parent / "flows-journal"
    _loop(loop)
    flow = tmp_path / "f.py"
    flow.write_text(FLOW)
    journal = ["--journal", str(loop)] if given else []
    for args in [["recall"], ["check"], *WRITES, ["run", str(flow)], ["runs"]]:
        _loop_refused(db, [*args, *journal], loop, "cannot open the journal")
    with pytest.raises(memory.Unreachable) as refused:
        memory.MemoryStore(db, journal=str(loop) if given else None)
    assert refused.value.path == loop and "loop of links" in str(refused.value)


def test_a_journal_folder_that_is_a_link_to_nothing_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    # `flows runs` answered "no root runs yet" and `flows learn` failed with "File exists"
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    (db.parent / "flows-journal").symlink_to(tmp_path / "gone")
    for args in (["runs"], ["learn", "pressure falls", "--scope", "s"]):
        done = flows(db, *args, timeout=60)
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        said = "flows: error[memory_unreachable]: cannot open the journal"
        assert done.stderr.startswith(said), done.stderr
        assert str(tmp_path / "gone") in done.stderr and "does not exist" in done.stderr, done.stderr
    assert not (tmp_path / "gone").exists()
