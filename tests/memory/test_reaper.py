"""A removed learned file is renamed to a hidden stage name and unlinked in the background
(``memory._reaper``): the name is gone when the removal returns; the hidden copy is never read,
never outlives an erase, and a forked child unlinks its own."""

from __future__ import annotations

import os
import secrets
import signal
import time
from pathlib import Path

import pytest

import memory
from memory._reaper import REAPER
from tests.conftest import run_python

_FORGET = r"""
import sys
import memory
db, key = sys.argv[1:3]
with memory.MemoryStore(db) as store, store.session(scope="desk", flow="forgetter") as s:
    s.forget(key, reason="killed before the unlink")
print("acknowledged", flush=True)
"""


def _hidden(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.name.startswith(".stage-")]


def _everything(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in root.rglob("*") if p.is_file() and not p.is_symlink())


def test_a_removal_killed_before_its_unlink_leaves_a_stage_no_read_sees_that_an_erase_deletes(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store" / "history.db"
    marker = f"zq{secrets.token_hex(8)}"
    with memory.MemoryStore(db) as store, store.session(scope="desk") as s:
        key = s.learn({"text": f"the marker {marker} is here", "tags": ["t"]}).key
        kept = s.learn({"text": "another finding stays", "tags": ["t"]}).key
    killed = run_python(_FORGET, str(db), key, env={"FLOWS_FAILPOINTS": "memory.after_set_aside=kill"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert "acknowledged" not in killed.stdout
    folder = memory.learned_dir(db, "desk")
    hidden = _hidden(folder)
    assert not (folder / f"{key}.json").exists()
    assert len(hidden) == 1 and marker.encode() in hidden[0].read_bytes()
    with memory.MemoryStore(db) as store:
        assert store.get(key) is None and store.get(kept) is not None
        assert [e.key for e in store.recall(limit=None)] == [kept]
        assert [a.finding.key for a in store.why(f"marker {marker}", limit=10)] == []
        assert memory.check_store(store) == []  # a fresh stage is no problem; an old one is swept
        with store.session(scope="desk", flow="eraser") as s:
            s.erase(key, reason="asked to")
    assert marker.encode() not in _everything(tmp_path)
    assert _hidden(folder) == []


def test_a_forked_child_unlinks_the_files_it_removes(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="desk") as s:
        first = s.learn({"text": "forgotten by the parent", "tags": ["t"]}).key
        second = s.learn({"text": "forgotten by the child", "tags": ["t"]}).key
        s.forget(first, reason="the parent's")  # the parent's background thread runs from here
        assert REAPER.drain(10)
    folder = memory.learned_dir(db, "desk")
    pid = os.fork()
    if pid == 0:  # the child: its own removal must be unlinked by a thread of its own
        code = 1
        try:
            with memory.MemoryStore(db) as store, store.session(scope="desk") as s:
                s.forget(second, reason="the child's")
            code = 0 if REAPER.drain(10) and _hidden(folder) == [] else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert not (folder / f"{second}.json").exists() and _hidden(folder) == []


def test_removals_are_unlinked_in_batches_and_a_lone_one_after_its_linger(tmp_path: Path) -> None:
    """The thread wakes per batch (``BATCH`` removals) or ``LINGER_S`` after the oldest: a lone
    removal in a long-lived process is still unlinked, without a drain, a close or an exit."""
    from memory import _reaper

    db = tmp_path / "store" / "history.db"
    folder = memory.learned_dir(db, "desk")
    with memory.MemoryStore(db) as store, store.session(scope="desk") as s:
        keys = [s.learn({"text": f"finding {i}", "tags": ["t"]}).key for i in range(_reaper.BATCH + 1)]
        assert REAPER.drain(10)
        s.forget(keys[0], reason="a lone removal")
        assert len(_hidden(folder)) == 1  # queued, not unlinked on the caller's path
        deadline = time.monotonic() + _reaper.LINGER_S + 5
        while _hidden(folder) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _hidden(folder) == []  # unlinked once it lingered, with nobody draining
        s.forget_where(tags=["t"], reason="a batch")
        deadline = time.monotonic() + _reaper.LINGER_S / 2
        while _hidden(folder) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _hidden(folder) == []  # a full batch is unlinked at once, well before the linger


def test_a_syncs_dropped_files_are_unlinked_as_a_batch_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync drops a folder's synced files all at once: they are unlinked at once, not left as
    hidden names in a folder its store keeps writing and listing until ``BATCH`` gather or
    ``LINGER_S`` passes (made an hour here, so only the sync's own wake can unlink them)."""
    from memory import _reaper

    db = tmp_path / "store" / "history.db"
    folder = memory.learned_dir(db, "desk")
    with memory.MemoryStore(db) as store, store.session(scope="desk") as s:
        for i in range(20):
            s.learn({"text": f"finding {i}", "tags": ["t"]})
        assert REAPER.drain(10)
        monkeypatch.setattr(_reaper, "LINGER_S", 3600.0)
        store.sync()
        deadline = time.monotonic() + 30  # a bound for a loaded machine, not a measure
        while _hidden(folder) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _hidden(folder) == []
        assert not [p for p in folder.iterdir() if p.name.endswith(".json")]  # every file was synced
