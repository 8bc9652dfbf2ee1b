"""A retirement whose process was killed between its durable record and its retired file.

A forget (one key or by filter) and an update's supersede commit their retirement in the scope's
turn and publish its retired file after. On a file journal a learn looks for retired files only, so a
holder killed in between left a durable retirement no file said: a learn of the same content was
acknowledged under the retired key, and the next ``sync`` published the retirement, so the
acknowledged finding was gone (``recall`` and ``get`` empty, ``flows check`` clean); an update of the
forgotten memory was acknowledged too, retiring its version a second time. Now the turn's holder is
named in its folder's ``turn-holder`` file while it holds it; whoever takes the turn or a learn's
share of it next finds a holder that died, and finishes that root run's retirements (and files)
from the journal first.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import memory
from memory._publisher import HOLDER_FILE
from tests._helpers.failpoints import run_armed

FINDING = {"text": "alice likes tea", "source": "me", "metadata": {"user": "alice"}}

_CHILD = """
import sys
import memory
with memory.MemoryStore(sys.argv[1]) as store, store.session(scope="a") as s:
    if sys.argv[2] == "where":
        s.forget_where(reason="kill test", meta={"user": "alice"})
    elif sys.argv[2] == "one":
        s.forget(sys.argv[3], reason="kill test")
    else:
        s.update(sys.argv[3], {"text": "alice likes coffee now", "source": "me"})
"""


def _killed(db: Path, how: str) -> str:
    """The key of FINDING, learned, then retired by a child killed right after its record."""
    with memory.MemoryStore(db) as store, store.session(scope="a") as s:
        key = s.learn(FINDING).key
    done = run_armed("memory.after_append=kill", _CHILD, str(db), how, key)
    assert done.returncode == -9, done.stderr
    return key


@pytest.mark.parametrize("how", ["one", "where"])
def test_a_learn_after_a_forget_killed_past_its_record_is_a_new_memory_that_stays(
    tmp_path: Path, how: str
) -> None:
    db = tmp_path / "store" / "history.db"
    forgotten = _killed(db, how)
    with memory.MemoryStore(db) as store:
        with store.session(scope="a", flow="relearner") as s:
            again = s.learn(FINDING)
        assert again.key != forgotten  # the next revision: the forgotten key stays forgotten
        store.sync()
        assert [r.key for r in store.recall(scope="a")] == [again.key]
        assert store.get(again.key) is not None and store.get(forgotten) is None
        assert memory.check_store(store) == []
        # retired is final: no update builds on it
        with pytest.raises(memory.FindingUnknown), store.session(scope="a") as s:
            s.update(forgotten, {"text": "alice likes coffee now", "source": "me"})


def test_an_update_after_a_forget_killed_past_its_record_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    forgotten = _killed(db, "one")
    with memory.MemoryStore(db) as store:
        with pytest.raises(memory.FindingUnknown), store.session(scope="a") as s:
            s.update(forgotten, {"text": "alice likes coffee now", "source": "me"})
        store.sync()
        assert store.recall(scope="a") == []
        assert [e.kind for e in store.history(forgotten)] == ["learned", "forgotten"]


def test_a_learn_after_an_update_killed_past_its_commit_leaves_one_live_version(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    old = _killed(db, "update")
    with memory.MemoryStore(db) as store:
        with store.session(scope="a", flow="relearner") as s:
            again = s.learn(FINDING)  # the content the update replaced: a new memory
        assert again.key != old
        store.sync()
        texts = sorted(r.text for r in store.recall(scope="a"))
        assert texts == ["alice likes coffee now", "alice likes tea"]
        assert store.get(old) is None
        assert memory.check_store(store) == []


def _updated(store: memory.MemoryStore) -> Path:
    """FINDING learned and updated in scope ``a`` (the update held the scope's turn); the turn
    folder's holder file."""
    with store.session(scope="a") as s:
        learned = s.learn(FINDING)
        s.update(learned.memory_id, {"text": "alice likes coffee now", "source": "me"})
    (holder,) = list(store.db_path.parent.rglob(HOLDER_FILE))
    return holder


def test_a_turn_let_go_leaves_its_holder_file_empty_and_a_crafted_one_is_never_followed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        holder = _updated(store)
        assert holder.read_bytes() == b""
        holder.write_bytes(b"../../etc/passwd\n")  # not a run id: read, never looked up
        with store.session(scope="a") as s:
            s.learn({"text": "another finding", "source": "me"})
        assert holder.read_bytes() == b""
        holder.write_bytes(b"20200101T000000-0000000000")  # a run id the journal does not hold
        with store.session(scope="a") as s:
            s.learn({"text": "a third finding", "source": "me"})
        assert holder.read_bytes() == b""
        assert sorted(r.text for r in store.recall(scope="a")) == [
            "a third finding",
            "alice likes coffee now",
            "another finding",
        ]


def test_a_holder_naming_a_run_with_a_damaged_record_does_not_keep_the_scopes_writes_out(
    tmp_path: Path,
) -> None:
    """What a dead holder's run left is finished best effort, as the store's open does: a record of
    the wrong shape there is for ``flows check`` to report, not a reason to fail every learn,
    update and forget of the scope for good."""
    import journal

    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        holder = _updated(store)
        jr = store.open_journal()
        info, lease = jr.begin("crafted", "a", {})
        jr.append(lease, memory.STREAM, {"id": 5, "scope": ["x"], "supersedes": {"a": 1}}, key="c" * 32)
        jr.finish(lease, journal.RunState.FAILED, {"code": "x", "message": "x"})
        holder.write_bytes(info.run_id.encode())
        with store.session(scope="a") as s:
            s.learn({"text": "another finding", "source": "me"})
        assert holder.read_bytes() == b""
        texts = sorted(r.text for r in store.recall(scope="a"))
        assert texts == ["alice likes coffee now", "another finding"]
        assert [p.kind for p in memory.check_store(store)] == ["record_corrupt"]


@pytest.mark.parametrize("planted", ["folder", "link", "fifo"])
def test_a_holder_file_that_is_not_a_file_is_reported_by_check_and_moved_aside_by_repair(
    tmp_path: Path, planted: str
) -> None:
    """Every update, forget and erase of the scope fails while a link, a folder or a FIFO stands
    where its turn-holder file belongs (the file is never opened through one): ``flows check``
    reports it (``holder_wrong``) and ``--repair`` moves it aside, after which they work again."""
    db = tmp_path / "store" / "history.db"
    outside = tmp_path / "outside"
    outside.write_bytes(b"untouched")
    with memory.MemoryStore(db) as store:
        holder = _updated(store)
        holder.unlink()
        if planted == "folder":
            holder.mkdir()
        elif planted == "link":
            holder.symlink_to(outside)
        else:
            os.mkfifo(holder)
        (current,) = store.recall(scope="a")
        with pytest.raises(memory.Unwritable), store.session(scope="a") as s:
            s.update(current.memory_id, {"text": "alice likes water", "source": "me"})
        problems = memory.check_store(store)
        assert [(p.kind, p.path, p.repairable) for p in problems] == [("holder_wrong", str(holder), True)]
        memory.repair_store(store, problems)
        assert memory.check_store(store) == []
        assert outside.read_bytes() == b"untouched"
        with store.session(scope="a") as s:
            s.update(current.memory_id, {"text": "alice likes water", "source": "me"})
        assert [r.text for r in store.recall(scope="a")] == ["alice likes water"]
