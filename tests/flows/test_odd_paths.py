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
