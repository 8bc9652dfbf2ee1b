"""``flows check`` and ``--repair`` on crafted on-disk state: what repair does to it, and that a
second check after it is clean."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import journal
import memory
from memory._erase import commits_of, rewrite
from memory._reaper import REAPER


def _two_scopes(store: memory.MemoryStore) -> tuple[memory.Learned, memory.Learned]:
    with store.session(scope="a") as s:
        first = s.learn({"text": "the first finding, to be erased"})
    with store.session(scope="b") as s:
        second = s.learn({"text": "the second finding"})
    return first, second


def _files_holding(folder: Path, text: bytes) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink() and text in p.read_bytes()]


def test_a_folder_named_as_a_stage_is_moved_aside_and_a_link_swept_never_followed(
    store: memory.MemoryStore, tmp_path: Path
) -> None:
    """A folder with a stage's name made repair raise IsADirectoryError and stay reported for good;
    a link with one is swept itself, what it points to outside the store untouched."""
    first, second = _two_scopes(store)
    folder = memory.learned_dir(store.db_path, "a")
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not the store's")
    (folder / ".stage-folder").mkdir()
    (folder / ".stage-folder" / "inner").write_bytes(b"x")
    os.symlink(outside, folder / ".stage-link")
    past = time.time() - 7200
    for path in (folder / ".stage-folder", folder / ".stage-link", outside):
        os.utime(path, (past, past), follow_symlinks=False)
    problems = memory.check_store(store)
    assert sorted((p.kind, Path(p.path).name, p.repairable) for p in problems) == [
        ("stage_stale", ".stage-folder", True),
        ("stage_stale", ".stage-link", True),
    ]
    actions = memory.repair_store(store, problems)
    assert any(a.startswith("quarantined") and ".stage-folder" in a for a in actions), actions
    assert not os.path.lexists(folder / ".stage-folder") and not os.path.lexists(folder / ".stage-link")
    assert outside.read_bytes() == b"not the store's"
    assert memory.check_store(store) == []
    assert sorted(e.key for e in store.recall(limit=None)) == sorted([first.key, second.key])


def test_repair_never_keeps_erased_content_in_the_quarantine(store: memory.MemoryStore) -> None:
    """An erased finding's learned file copied back (a backup) as another scope's retired file, and
    under another key's name: repair moved both into the quarantine, text and all, and a second
    check said nothing of it. It deletes them; the live finding stays."""
    first, second = _two_scopes(store)
    data = (memory.learned_dir(store.db_path, "a") / f"{first.key}.json").read_bytes()
    with store.session(scope="a") as s:
        s.erase(first.key, reason="asked")
    retired_b = memory.retired_dir(store.db_path, "b")
    retired_b.mkdir(parents=True, exist_ok=True)
    (retired_b / f"{first.key}.json").write_bytes(data)
    (memory.learned_dir(store.db_path, "b") / f"{'0' * 32}.json").write_bytes(data)
    problems = memory.check_store(store)
    assert {p.kind for p in problems} == {"retired_damaged", "learned_damaged"}, problems
    memory.repair_store(store, problems)
    assert _files_holding(store.db_path.parent, b"to be erased") == []
    assert memory.check_store(store) == []
    assert [e.key for e in store.recall(limit=None)] == [second.key]


def test_erased_content_left_in_the_quarantine_is_reported_and_removed(store: memory.MemoryStore) -> None:
    """A copy of an erased finding in the quarantine (moved there by an earlier repair, or by hand)
    is an unfinished erasure: check reports it and repair deletes it."""
    first, second = _two_scopes(store)
    data = (memory.learned_dir(store.db_path, "a") / f"{first.key}.json").read_bytes()
    with store.session(scope="a") as s:
        s.erase(first.key, reason="asked")
    assert memory.check_store(store) == []
    aside = store.db_path.parent / "flows-quarantine" / "earlier"
    aside.mkdir(parents=True)
    (aside / "copy.json").write_bytes(data)
    problems = memory.check_store(store)
    assert [p.kind for p in problems] == ["erase_incomplete"], problems
    memory.repair_store(store, problems)
    assert _files_holding(store.db_path.parent, b"to be erased") == []
    assert memory.check_store(store) == []
    assert [e.key for e in store.recall(limit=None)] == [second.key]


def _erase_record_of(live: memory.Learned) -> dict[str, object]:
    """A well-formed erase record naming ``live`` (its memory and its one key)."""
    return {
        "memory": live.memory_id,
        "keys": [live.key],
        "reason": "r",
        "flow": "crafted",
        "erasedMs": 1,
        "records": [],
    }


def _crafted_erase_record(store: memory.MemoryStore, payload: dict[str, object]) -> None:
    jr = store.open_journal()
    _, lease = jr.begin("crafted", "crafted", {})
    jr.append(lease, memory.ERASE_STREAM, payload, key="b" * 32)
    jr.finish(lease, journal.RunState.DONE)


@pytest.mark.parametrize(
    "shape",
    ["garbage", "an extra field", "records not a list", "erasedMs text"],
)
def test_an_erase_record_not_of_an_erase_records_shape_is_reported_and_never_acted_on(
    store: memory.MemoryStore, shape: str
) -> None:
    """Every read ignores a record of the erase stream that is not an erase record; ``flows check``
    kept any object there as one, so it neither reported a garbage one nor refused to act on one
    naming a live finding: two passes of ``--repair`` erased a finding nobody had forgotten."""
    live, _ = _two_scopes(store)
    good = _erase_record_of(live)
    payload: dict[str, object] = {
        "garbage": {"memory": 5, "keys": "notalist", "hello": 1},
        "an extra field": {**good, "extra": 1},
        "records not a list": {**good, "records": "junk"},
        "erasedMs text": {**good, "erasedMs": "1"},
    }[shape]
    _crafted_erase_record(store, payload)
    problems = memory.check_store(store)
    assert [p.kind for p in problems] == ["record_corrupt"]
    assert "memory-erase" in problems[0].message and "line 1" in problems[0].message
    for _ in range(2):
        memory.repair_store(store, memory.check_store(store))
    assert [r.key for r in store.recall(scope="a")] == [live.key]
    assert _files_holding(store.db_path.parent, b"the first finding, to be erased")


def test_one_repair_finishes_an_erasure_of_a_live_finding_and_publishes_none_of_it_again(
    store: memory.MemoryStore,
) -> None:
    """An erase record naming a finding whose commit and learned file are still there (a crash
    before the erase's forget, or a record put there by hand): check called the file missing
    (``record_unpublished``, "neither its learned file nor a history-DB row"), and one repair
    finished the erasure, then wrote the learned file back from the commit it had read before
    rewriting it: the erased text was on disk again and every read failed on it."""
    live, second = _two_scopes(store)
    path = memory.learned_dir(store.db_path, "a") / f"{live.key}.json"
    assert path.exists()
    _crafted_erase_record(store, _erase_record_of(live))
    problems = memory.check_store(store)
    assert [p.kind for p in problems] == ["erase_incomplete"], problems
    actions = memory.repair_store(store, problems)
    assert not [a for a in actions if a.startswith("republished")], actions
    REAPER.drain(10)
    assert _files_holding(store.db_path.parent, b"the first finding, to be erased") == []
    assert memory.check_store(store) == []
    assert [e.key for e in store.recall(limit=None)] == [second.key]


def test_a_tombstone_no_erase_record_names_is_reported_and_its_finding_never_removed_by_repair(
    store: memory.MemoryStore, db: Path
) -> None:
    """A live commit rewritten as a tombstone (valid CRC) with no erase record naming its key: check
    said only that the journal "does not hold" the record its learned file cites, repair moved the
    live finding's file into the quarantine, and every later check called the store clean with the
    finding silently gone. It is damage: reported as such, never repaired away, and reads fail
    closed saying what it is."""
    live, _ = _two_scopes(store)
    path = memory.learned_dir(store.db_path, "a") / f"{live.key}.json"
    data = path.read_bytes()
    backend = store.open_journal()
    assert rewrite(backend, commits_of(backend, {live.key})) == 1
    problems = memory.check_store(store)
    assert sorted((p.kind, p.repairable) for p in problems) == [
        ("learned_unverified", False),
        ("tombstone_unbacked", False),
    ], problems
    unbacked = next(p for p in problems if p.kind == "tombstone_unbacked")
    assert live.key in unbacked.message and "no memory-erase record" in unbacked.message
    assert unbacked.as_json()["key"] == live.key and unbacked.as_json()["stream"] == "memory-learn"
    assert next(p for p in problems if p.kind == "learned_unverified").path == str(path)
    memory.repair_store(store, problems)
    assert path.read_bytes() == data
    assert not (store.db_path.parent / "flows-quarantine").exists()
    assert sorted(p.kind for p in memory.check_store(store)) == ["learned_unverified", "tombstone_unbacked"]
    with memory.MemoryStore(db, recover=False) as fresh:
        with pytest.raises(memory.Unreachable, match="tombstone"):
            fresh.recall(limit=None)
        with pytest.raises(memory.Unreachable, match="no erase record names"):
            fresh.sync()
    assert path.read_bytes() == data


def test_a_stray_file_in_the_journals_runs_folder_is_called_a_regular_file(store: memory.MemoryStore) -> None:
    """A regular file where a run's folder belongs was "not a regular file, not a directory", and
    check advised restoring it from a backup. It says what it is, and to move it aside."""
    _two_scopes(store)
    stray = Path(store.journal_location) / "runs" / "notarun"
    stray.write_bytes(b"x")
    [problem] = [p for p in memory.check_store(store) if p.kind == "run_corrupt"]
    assert problem.path == str(stray)
    assert f"{stray} is a regular file, not a directory" in problem.message, problem
    assert "not a regular file" not in problem.message
    assert "move it aside" in problem.message and "restore the file" not in problem.repair, problem
