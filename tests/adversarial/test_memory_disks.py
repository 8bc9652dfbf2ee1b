"""Read-only and full disks, for real: a tmpfs remounted read-only, a store whose folders and files
this process may not write (modes binding even root, whose override is dropped), a tmpfs filled to
its last byte. Reads (recall, why, check) still answer on a read-only store and never tell the user
to move a healthy DB aside; sync on a full disk fails with ``memory_unwritable`` carrying SQLite's
own cause, and loses nothing."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import memory
from tests.adversarial.memory_support import (
    Store,
    can_mount,
    error_code,
    flows,
    populate,
    remount_read_only,
    tmpfs,
    without_dac_override,
)


def _half_synced(base: Path) -> Store:
    """A store with three synced findings (DB rows) and two unsynced ones (files)."""
    s = populate(base / "store" / "history.db", ["alpha synced", "beta synced", "gamma synced"])
    assert flows(s.db, "sync").returncode == 0
    more = populate(base / "store" / "history.db", ["delta on disk", "epsilon on disk"])
    s.keys.update(more.keys)
    assert not Path(f"{s.db}-wal").exists()  # every connection closed: the log was checkpointed away
    return s


def _make_read_only(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            os.chmod(Path(dirpath) / name, 0o444)
        for name in dirnames:
            os.chmod(Path(dirpath) / name, 0o555)
    os.chmod(root, 0o555)


def _make_writable(root: Path) -> None:
    os.chmod(root, 0o755)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames:
            os.chmod(Path(dirpath) / name, 0o755)
        for name in filenames:
            os.chmod(Path(dirpath) / name, 0o644)


@contextlib.contextmanager
def _read_only_store(tmp_path: Path, how: str) -> Iterator[tuple[Store, dict[str, object]]]:
    """A half-synced store made read-only ``how``; yields it and the ``flows`` keyword arguments
    that make a command meet the read-only store as an ordinary process would."""
    if how == "read-only mount":
        with tmpfs(tmp_path / "mnt", "16m") as where:
            s = _half_synced(where)
            remount_read_only(where)
            yield s, {}
        return
    s = _half_synced(tmp_path)
    _make_read_only(s.db.parent)
    try:
        yield s, {"preexec": without_dac_override}
    finally:
        _make_writable(s.db.parent)


MOUNTS = can_mount(Path("/tmp") / f"flows-adv-probe-{os.getpid()}")
# Mounting needs root (as in CI's container); where it is refused, CI fails rather than skip.
WAYS = ["read-only folders and files", *(["read-only mount"] if MOUNTS or os.environ.get("CI") else [])]


@pytest.mark.parametrize("how", WAYS)
def test_reads_answer_on_a_read_only_store(tmp_path: Path, how: str) -> None:
    with _read_only_store(tmp_path, how) as (s, kw):
        recalled = flows(s.db, "recall", "--json", **kw)  # type: ignore[arg-type]
        assert recalled.returncode == 0, recalled.stderr
        assert sorted(e["text"] for e in orjson.loads(recalled.stdout)) == sorted(s.keys.values())
        why = flows(s.db, "why", "synced disk", "--json", **kw)  # type: ignore[arg-type]
        assert why.returncode == 0, why.stderr
        assert len(orjson.loads(why.stdout)) == 5
        checked = flows(s.db, "check", "--json", **kw)  # type: ignore[arg-type]
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert orjson.loads(checked.stdout)["clean"] is True
        synced = flows(s.db, "sync", **kw)  # type: ignore[arg-type]
        assert synced.returncode == 1
        assert error_code(synced) == "memory_unwritable"
        for result in (recalled, why, checked, synced):
            assert "aside" not in result.stderr  # a healthy DB is never to be moved


def test_the_history_db_is_opened_read_only_when_only_reading(tmp_path: Path) -> None:
    s = _half_synced(tmp_path)
    with memory.MemoryStore(s.db) as store:
        store.recall()
        store.why("synced")
        conn = store.db._local.ro
        with pytest.raises(Exception, match="readonly"):
            conn.execute("DELETE FROM findings")
        assert getattr(store.db._local, "conn", None) is None  # no writable connection was opened


def _fill(where: Path) -> Path:
    """Fill the file system at ``where`` to its last byte; returns the filler."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        for size in (1 << 20, 65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


@pytest.mark.skipif(not MOUNTS and not os.environ.get("CI"), reason="mounting a small tmpfs needs root")
def test_sync_on_a_full_disk_is_unwritable_with_sqlites_cause_and_loses_nothing(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "mnt", "8m") as where:
        s = populate(where / "store" / "history.db", [f"early finding {i}" for i in range(5)])
        assert flows(s.db, "sync").returncode == 0
        late = populate(s.db, [f"late finding {i} " + "x" * 200 for i in range(150)])
        with memory.MemoryStore(s.db) as store:
            root = _root(store)  # begun while there is room
            filler = _fill(where)
            result = flows(s.db, "sync", "--no-materialize")
            assert result.returncode == 1, result.stdout
            assert error_code(result) == "memory_unwritable"
            # SQLite's own cause, by name: a full database, or a -shm it could not grow
            assert re.search(r"history DB .*: .+ \(SQLITE_(FULL|IOERR_\w+)\)$", result.stderr), result.stderr
            assert "aside" not in result.stderr
            assert len(store.recall(limit=None)) == 155  # every finding still readable
            with pytest.raises(memory.Unwritable) as caught:
                store.learn({"text": "on a full disk"}, root)
            assert caught.value.errno == errno.ENOSPC
        filler.unlink()
        assert flows(s.db, "sync").returncode == 0
        with memory.MemoryStore(s.db) as store:
            assert store.db.count() == 155
            assert {e.key for e in store.recall(limit=None)} == set(s.keys) | set(late.keys)


def _root(store: memory.MemoryStore) -> memory.RootRun:
    jr = store.open_journal()
    _, lease = jr.begin("adv", "adv", {})
    return memory.RootRun(jr, lease, "adv", "adv")


@pytest.mark.parametrize("how", WAYS)
def test_a_write_refused_by_a_read_only_store_names_no_run_that_was_never_begun(
    tmp_path: Path, how: str
) -> None:
    with _read_only_store(tmp_path, how) as (s, kw):
        for args in (("learn", "one more", "--scope", "s", "--json"), ("learn", "again", "--scope", "s")):
            result = flows(s.db, *args, **kw)  # type: ignore[arg-type]
            assert result.returncode == 1, result.stdout
            assert error_code(result) in {"journal_unwritable", "memory_unwritable"}, result.stderr
            assert "root run" not in result.stderr.replace("cannot begin a root run", ""), result.stderr
            assert '"runId":"' not in result.stderr, result.stderr
        runs = flows(s.db, "runs", "--json", **kw)  # type: ignore[arg-type]
        assert runs.returncode == 0, runs.stderr
        listed = {r["runId"] for r in orjson.loads(runs.stdout)}
        assert all(r in listed for r in re.findall(r"\d{8}T\d{6}-[0-9a-f]{10}", result.stderr))
