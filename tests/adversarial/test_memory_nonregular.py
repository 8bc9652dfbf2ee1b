"""Non-regular files where the store expects a file: a FIFO, a socket or a folder named like a
learned file, and a FIFO, folder or link in the history DB's place. Every open is non-blocking and
checks what it got: recall, why, sync and check answer within a bound, with ``memory_unreachable``
naming the path (never a hang, never ``flow_failed``); ``flows check`` reports the path and
``--repair`` moves it aside and republishes the finding from the journal."""

from __future__ import annotations

import os
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

import journal
import memory
from tests.adversarial.memory_support import error_code, flows, populate


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _folder(path: Path) -> None:
    path.mkdir()
    (path / "inside.json").write_bytes(b"{}")


def _socket(path: Path) -> None:
    short = Path(tempfile.mkdtemp(dir="/tmp", prefix="s"))  # AF_UNIX paths are short: bind, then move
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(short / "s"))
    sock.close()  # the socket file stays
    os.rename(short / "s", path)
    short.rmdir()


MAKERS: dict[str, Callable[[Path], None]] = {"FIFO": _fifo, "folder": _folder, "socket": _socket}


def _replace(path: Path, kind: str) -> None:
    path.unlink()
    MAKERS[kind](path)


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_a_learned_file_that_is_not_a_regular_file_fails_every_read_naming_it(
    tmp_path: Path, kind: str
) -> None:
    s = populate(tmp_path / "store" / "history.db", ["one", "two"])
    victim = s.folder / f"{sorted(s.keys)[0]}.json"
    _replace(victim, kind)
    for args in (("recall",), ("why", "one"), ("sync",), ("recall", "--scope", "adv")):
        result = flows(s.db, *args)
        assert result.returncode == 1, (args, result.stdout)
        assert error_code(result) == "memory_unreachable", args
        assert str(victim) in result.stderr, args
    with memory.MemoryStore(s.db) as store, pytest.raises(memory.Unreachable) as caught:
        store.recall()
    assert caught.value.path == victim


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_check_reports_a_non_regular_learned_file_and_repair_republishes_it(
    tmp_path: Path, kind: str
) -> None:
    s = populate(tmp_path / "store" / "history.db", ["one", "two"])
    key = sorted(s.keys)[0]
    victim = s.folder / f"{key}.json"
    original = victim.read_bytes()
    _replace(victim, kind)
    checked = flows(s.db, "check", "--json")
    assert checked.returncode == 1, checked.stderr
    (problem,) = orjson.loads(checked.stdout)["problems"]
    assert (problem["kind"], problem["path"]) == ("learned_damaged", str(victim))
    assert "republish" in problem["repair"]
    repaired = flows(s.db, "check", "--repair", "--json")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert victim.read_bytes() == original  # byte-identical, from the journal
    assert len(list((s.db.parent / memory.QUARANTINE_DIR).rglob(victim.name))) == 1


def test_a_non_regular_file_nobody_journaled_is_quarantined(tmp_path: Path) -> None:
    s = populate(tmp_path / "store" / "history.db", ["one"])
    stray = s.folder / ("e" * 32 + ".json")
    os.mkfifo(stray)
    checked = flows(s.db, "check", "--json")
    (problem,) = orjson.loads(checked.stdout)["problems"]
    assert problem["path"] == str(stray) and "republish" not in problem["repair"]
    assert flows(s.db, "check", "--repair").returncode == 0
    assert not os.path.lexists(stray)


@pytest.mark.parametrize("part", ["", "-wal", "-shm", "-journal"])  # -journal: a FIFO hung every read
@pytest.mark.parametrize("kind", ["FIFO", "folder", "link"])
def test_a_history_db_that_is_not_a_regular_file_is_refused_naming_it(
    tmp_path: Path, kind: str, part: str
) -> None:
    s = populate(tmp_path / "store" / "history.db", ["one"])
    assert flows(s.db, "sync").returncode == 0
    victim = Path(f"{s.db}{part}")
    if victim.exists():
        victim.unlink()
    if kind == "link":
        elsewhere = tmp_path / "elsewhere.db"
        elsewhere.write_bytes(b"")
        victim.symlink_to(elsewhere)
    else:
        MAKERS[kind](victim)
    for args in (("recall",), ("why", "one"), ("sync",)):
        result = flows(s.db, *args)
        assert result.returncode == 1, (args, result.stdout)
        assert error_code(result) == "memory_unreachable", (args, result.stderr)
        assert str(victim) in result.stderr
    checked = flows(s.db, "check", "--json")
    assert checked.returncode == 1 and checked.stderr == ""
    (problem,) = orjson.loads(checked.stdout)["problems"]
    assert problem["kind"] == "db_unreadable" and str(victim) in problem["message"]


def _forgotten(tmp_path: Path) -> tuple[Path, Path, str]:
    """A store with two findings, one forgotten; returns the DB, the retired file and the text kept."""
    s = populate(tmp_path / "store" / "history.db", ["one", "two"])
    key = sorted(s.keys)[0]
    with memory.MemoryStore(s.db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", "adv", {})
        store.forget(key, memory.RootRun(jr, lease, "adv", "adv"), reason="wrong")
        jr.finish(lease, journal.RunState.DONE)
    retired = memory.learned_root(s.db) / memory.scope_hash("adv") / ".trajectories" / "retired"
    (kept,) = (t for k, t in s.keys.items() if k != key)
    return s.db, retired / f"{key}.json", kept


@pytest.mark.parametrize("kind", sorted(MAKERS))
def test_a_retired_file_that_is_not_a_regular_file_fails_reads_and_repair_restores_it(
    tmp_path: Path, kind: str
) -> None:
    db, victim, kept = _forgotten(tmp_path)
    original = victim.read_bytes()
    _replace(victim, kind)
    for args in (("recall",), ("why", kept), ("sync",)):
        result = flows(db, *args)
        assert result.returncode == 1, (args, result.stdout)
        assert error_code(result) == "memory_unreachable" and str(victim) in result.stderr, args
    checked = flows(db, "check", "--json")
    assert [(p["kind"], p["path"]) for p in orjson.loads(checked.stdout)["problems"]] == [
        ("retired_damaged", str(victim))
    ]
    assert flows(db, "check", "--repair").returncode == 0
    assert victim.read_bytes() == original
    assert [e["text"] for e in orjson.loads(flows(db, "recall", "--json").stdout)] == [kept]


@pytest.mark.parametrize("kind", ["FIFO", "folder", "link"])
def test_a_write_refuses_a_history_db_that_is_not_a_regular_file_as_reads_do_making_nothing(
    tmp_path: Path, kind: str
) -> None:
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    if kind == "link":
        (tmp_path / "elsewhere.db").write_bytes(b"")
        db.symlink_to(tmp_path / "elsewhere.db")
    else:
        MAKERS[kind](db)
    flow = tmp_path / "flow.py"
    flow.write_text(
        'import flows\n\n\n@flows.flow()\nasync def body(f):\n    await f.memory.learn({"text": "x"})\n'
    )
    for args in (("learn", "x", "--scope", "s"), ("run", str(flow)), ("recall",)):
        result = flows(db, *args)
        assert result.returncode == 1, (args, result.stdout)
        assert error_code(result) == "memory_unreachable" and str(db) in result.stderr, args
    assert sorted(os.listdir(db.parent)) == ["history.db"]


def test_a_write_to_a_device_makes_nothing_beside_it(tmp_path: Path) -> None:
    db = tmp_path / "null"
    try:
        os.mknod(db, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's device, made here
    except PermissionError:
        pytest.skip("making a device needs root")
    result = flows(db, "learn", "x", "--scope", "s")
    assert result.returncode == 1 and error_code(result) == "memory_unreachable"
    assert "character device" in result.stderr and os.listdir(tmp_path) == ["null"]


@pytest.mark.parametrize("kind", ["folder", "fifo", "link"])
def test_a_learn_through_the_api_into_a_db_path_no_read_can_open_is_refused_before_anything_is_made(
    tmp_path: Path, kind: str
) -> None:
    """``MemoryStore(path)`` whose path is a folder, a FIFO or a link: every read refuses it, so a
    learn does too, before it makes a journal or a learned file beside it."""
    db = tmp_path / "history.db"
    if kind == "folder":
        db.mkdir()
    elif kind == "fifo":
        os.mkfifo(db)
    else:
        (tmp_path / "elsewhere.db").write_bytes(b"")
        db.symlink_to(tmp_path / "elsewhere.db")
    before = sorted(p.name for p in tmp_path.iterdir())
    with (
        memory.MemoryStore(db) as store,
        pytest.raises(memory.Unreachable) as err,
        store.session(scope="s") as session,
    ):
        session.learn({"text": "into a store no read can open"})
    assert err.value.path == db and "not the history DB's file" in err.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("kind", ["FIFO", "file", "below a file"])
def test_a_store_opened_from_python_on_a_journal_folder_that_is_no_folder_is_refused_naming_it(
    tmp_path: Path, kind: str
) -> None:
    """``MemoryStore(db, journal=…)`` whose journal folder is a FIFO, a file or below a file holds no
    journal: said at the open, naming what is there (``memory_unreachable``), as the CLI says it;
    never an empty recall with a warning about the recovery walk."""
    odd = tmp_path / "journal"
    if kind == "FIFO":
        os.mkfifo(odd)
        given, named = odd, odd
    elif kind == "file":
        odd.write_bytes(b"not a journal")
        given, named = odd, odd
    else:
        odd.write_bytes(b"not a folder")
        given, named = odd / "inner", odd
    with pytest.raises(memory.Unreachable) as err:
        memory.MemoryStore(tmp_path / "history.db", journal=given)
    assert err.value.code == "memory_unreachable"
    assert err.value.path == named and "no journal can be in it" in err.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["journal"]
