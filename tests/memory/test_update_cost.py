"""What an update of a memory (a new version of it) does besides a learn, and no more: it writes the
old version's retired file and sets the old learned file aside, without reading back the retired
file it has just published, without a random draw per file set aside, without a duplicated folder
descriptor per removal, and, while there is no history DB, looking for one once."""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memory
from memory._reaper import REAPER
from tests.memory.conftest import learned_files


@pytest.fixture
def audited() -> Iterator[list[tuple[str, tuple[Any, ...]]]]:
    """The ``open`` and ``os.rename`` audit events of this process while the list is being filled
    (an audit hook cannot be removed, so it stops filling after the test)."""
    events: list[tuple[str, tuple[Any, ...]]] = []
    on = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if on[0] and event in ("open", "os.rename"):
            events.append((event, args))

    sys.addaudithook(hook)
    yield events
    on[0] = False


def _versions(store: memory.MemoryStore, root: memory.RootRun, n: int) -> tuple[str, list[str]]:
    first = store.learn({"text": "the pool's fee is 30 bps", "tags": ["fee"]}, root)
    keys = [first.key]
    for i in range(n):
        new = {"text": f"the pool's fee is {i} bps", "tags": ["fee"]}
        keys.append(store.update(first.memory_id, new, root).key)
    return first.memory_id, keys


def test_an_update_reads_back_none_of_the_retired_files_it_publishes(
    store: memory.MemoryStore, root: memory.RootRun, audited: list[tuple[str, tuple[Any, ...]]]
) -> None:
    memory_id, keys = _versions(store, root, 6)
    retired = memory.retired_dir(store.db_path, "scope-a")
    opened = [str(args[0]) for event, args in audited if event == "open"]
    assert [p for p in opened if p.startswith(f"{retired}{os.sep}") and p.endswith(".json")] == []
    # the answers are those of every update: one live version, each older one superseded by the next
    assert store.current(memory_id).key == keys[-1]  # type: ignore[union-attr]
    for old, new in itertools.pairwise(keys):
        assert json.loads((retired / f"{old}.json").read_bytes())["by"] == new
    assert [e.key for e in store.recall(limit=None)] == [keys[-1]]
    assert [p.name for p in learned_files(store.db_path) if p.parent.name == "compacted"] == [
        f"{keys[-1]}.json"
    ]


def test_an_update_forgotten_while_it_settles_is_still_refused(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check a supersede makes after its retired file is published (was it retired by another
    first?) still answers from the retired file that stands, though its own is not read back."""
    first = store.learn({"text": "the desk closes at five", "tags": ["desk"]}, root)
    other = memory.MemoryStore(store.db_path)
    try:
        jr = other.open_journal()
        _, lease = jr.begin("other", "scope-a", {})
        other_root = memory.RootRun(jr, lease, "other", "scope-a")
        real_remove = store._publisher.remove_in
        answers: list[memory.Forgotten] = []
        forget = threading.Thread(
            target=lambda: answers.append(other.forget(first.key, other_root, reason="closed for good"))
        )

        def forget_first_then_remove(directory: Path, name: str, run_id: str | None, *held: Any) -> bool:
            # another process's forget, begun while the update settles: it waits for the update's
            # turn of the scope, then finds the version superseded already, which stands
            if not forget.is_alive() and not answers:
                forget.start()
            return real_remove(directory, name, run_id, *held)

        monkeypatch.setattr(store._publisher, "remove_in", forget_first_then_remove)
        updated = store.update(first.memory_id, {"text": "the desk closes at six", "tags": ["desk"]}, root)
        forget.join(60)
        assert [a.by for a in answers] == [updated.key]
    finally:
        other.close()
    assert store.current(first.memory_id).key == updated.key  # type: ignore[union-attr]
    retired = memory.retired_dir(store.db_path, "scope-a")
    assert json.loads((retired / f"{first.key}.json").read_bytes())["by"] == updated.key


def test_files_set_aside_take_a_prefix_and_a_count_and_step_over_a_folder_planted_at_the_next(
    store: memory.MemoryStore, root: memory.RootRun, audited: list[tuple[str, tuple[Any, ...]]]
) -> None:
    from memory._publisher import _ASIDE  # here: a tree without it fails this test alone

    memory_id, keys = _versions(store, root, 4)
    renamed = [str(args[1]) for event, args in audited if event == "os.rename"]
    aside = [name for name in renamed if name.endswith(".gone")]
    assert len(aside) == 4 and len(set(aside)) == 4
    assert {name[: len(".stage-") + 16] for name in aside} == {f".stage-{_ASIDE.prefix}"}
    # the names are predictable: a folder put under the next one is stepped over, not an error
    nxt = _ASIDE.next()
    count = int(nxt[len(".stage-") + 16 : -len(".gone")], 16)
    folder = memory.learned_dir(store.db_path, "scope-a")
    planted = folder / f".stage-{_ASIDE.prefix}{count + 1:x}.gone"
    (planted / "inside").mkdir(parents=True)
    prefix = _ASIDE.prefix
    last = store.update(memory_id, {"text": "the pool's fee is 5 bps", "tags": ["fee"]}, root)
    assert _ASIDE.prefix != prefix and (planted / "inside").is_dir()
    assert [e.key for e in store.recall(limit=None)] == [last.key]
    assert not (folder / f"{keys[-1]}.json").exists()


def test_a_removal_hands_its_held_folder_to_the_reaper_without_a_descriptor_per_file(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    duplicated: list[int] = []
    real_dup = os.dup

    def counting_dup(fd: int) -> int:
        duplicated.append(fd)
        return real_dup(fd)

    monkeypatch.setattr(os, "dup", counting_dup)
    _, keys = _versions(store, root, 5)
    assert duplicated == []
    # the folders are let go while their removals wait: the names are unlinked all the same
    store._publisher.close()
    assert REAPER.drain(10)
    folder = memory.learned_dir(store.db_path, "scope-a")
    assert sorted(os.listdir(folder)) == [f"{keys[-1]}.json"]


def test_an_update_looks_for_a_missing_history_db_once(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory_id, _ = _versions(store, root, 2)
    assert not store.db_path.exists()
    looks = [0]
    real_exists = store._db.exists

    def counting_exists() -> bool:
        looks[0] += 1
        return real_exists()

    monkeypatch.setattr(store._db, "exists", counting_exists)
    for i in range(5):
        store.update(memory_id, {"text": f"the pool's fee is {i + 10} bps", "tags": ["fee"]}, root)
    assert looks[0] == 5
    store.sync()  # a DB made since is looked at: the versions it holds are its rows
    assert store.db_path.exists()
    last = store.update(memory_id, {"text": "the pool's fee is 99 bps", "tags": ["fee"]}, root)
    assert [e.key for e in store.recall(limit=None)] == [last.key]
    assert store.current(memory_id).key == last.key  # type: ignore[union-attr]


def test_an_update_hashes_its_finding_once_and_takes_the_next_revision_past_a_retired_key(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The update's check for content the memory holds already computes the new version's key; the
    # learn takes it instead of hashing the finding again, and hashes another revision only when
    # that key is retired (an update back to the content of a version it replaced).
    import memory._learn
    import memory._store

    hashed: list[int] = []
    real = memory._store.finding_id

    def counted(scope: str, item: Any, revision: int = 0) -> str:
        hashed.append(revision)
        return real(scope, item, revision)

    monkeypatch.setattr(memory._store, "finding_id", counted)
    monkeypatch.setattr(memory._learn, "finding_id", counted)
    first = store.learn({"text": "the pool's fee is 30 bps", "tags": ["fee"]}, root)
    hashed.clear()
    second = store.update(first.memory_id, {"text": "the pool's fee is 5 bps", "tags": ["fee"]}, root)
    assert hashed == [0]
    hashed.clear()
    # back to the first content: its key at revision 0 is retired (superseded), so revision 1
    third = store.update(first.memory_id, {"text": "the pool's fee is 30 bps", "tags": ["fee"]}, root)
    assert hashed == [0, 1]
    assert third.key not in (first.key, second.key)
    assert store.current(first.memory_id).key == third.key  # type: ignore[union-attr]


def test_an_update_looks_at_the_dbs_mode_once_and_both_its_files_take_it(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the new version's file and the old version's retired file take the mode the DB has as the
    # update begins: one ``stat`` of the DB, not one per file
    db.parent.mkdir(parents=True)
    db.touch()
    os.chmod(db, 0o640)
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("probe", "scope-a", {})
        root = memory.RootRun(jr, lease, "probe", "scope-a")
        memory_id, _ = _versions(store, root, 1)
        looks: list[str] = []
        real_stat = os.stat

        def counting_stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
            if str(path) == str(db):
                looks.append(str(path))
            return real_stat(path, *args, **kwargs)

        monkeypatch.setattr(os, "stat", counting_stat)
        new = [{"text": f"the pool's fee is {i + 10} bps", "tags": ["fee"]} for i in range(4)]
        keys = [store.update(memory_id, finding, root).key for finding in new]
        monkeypatch.undo()
        assert len(looks) == 4
        retired = memory.retired_dir(db, "scope-a")
        learned = memory.learned_dir(db, "scope-a")
        files = [p for p in [*retired.iterdir(), *learned.iterdir()] if not p.name.startswith(".")]
        assert {p.stat().st_mode & 0o777 for p in files} == {0o640}
        assert {f"{k}.json" for k in keys} <= {p.name for p in files} and len(files) == 6
        assert [e.key for e in store.recall(limit=None)] == [keys[-1]]


def test_an_update_sets_the_old_file_aside_in_the_folder_its_stage_holds_without_looking_at_it_again(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    memory_id, _ = _versions(store, root, 1)
    folder = str(memory.learned_dir(store.db_path, "scope-a"))
    looks: list[str] = []
    real_lstat = os.lstat

    def counting_lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(path) == folder:
            looks.append(str(path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counting_lstat)
    new = [{"text": f"the pool's fee is {i + 10} bps", "tags": ["fee"]} for i in range(4)]
    keys = [store.update(memory_id, finding, root).key for finding in new]
    monkeypatch.undo()
    # the one look is the stage's, which holds the folder the new version is renamed into
    assert len(looks) == 4
    left = [p.name for p in learned_files(store.db_path) if p.parent.name == "compacted"]
    assert left == [f"{keys[-1]}.json"]
    assert store.current(memory_id).key == keys[-1]  # type: ignore[union-attr]


def test_the_next_update_takes_the_bytes_the_last_one_published_without_rendering_them_again(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memory._files

    memory_id, _ = _versions(store, root, 1)
    rendered: list[str] = []
    real_render = memory._files.render

    def counting_render(record: Any) -> bytes:
        rendered.append(record.payload["id"])
        return real_render(record)

    monkeypatch.setattr(memory._files, "render", counting_render)
    new = [{"text": f"the pool's fee is {i + 10} bps", "tags": ["fee"]} for i in range(4)]
    keys = [store.update(memory_id, finding, root).key for finding in new]
    monkeypatch.undo()
    # the look at each live version compared the file with the bytes published for its commit
    assert rendered == []
    assert store.current(memory_id).key == keys[-1]  # type: ignore[union-attr]
    assert [e.key for e in store.recall(limit=None)] == [keys[-1]]
