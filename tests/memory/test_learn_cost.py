"""What one learn spends its instructions on, and no more, with every check it made kept: the names
it finds missing (its retired name before and after, its learned name) are asked about without the
``lstat`` that raises for a missing one; its journal record, the marks of its sync, its finding and
its result are made without their frozen dataclasses' ``__init__`` and equal what that makes; a
retired name that is a link, even a dangling one, still counts as there; the guards of the journal's
folders, run file and stream file and of the learned folder still look at their paths every learn."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import pytest

import journal
import memory
from memory._safe import named


def _learn(store: memory.MemoryStore, root: memory.RootRun, text: str) -> memory.Learned:
    return store.learn({"text": text, "tags": ["cost"]}, root)


def test_a_learn_asks_about_the_names_it_finds_missing_without_an_lstat(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    _learn(store, root, "warm-up")  # the folders made and held
    looked: list[str] = []
    lstat = os.lstat

    def counted(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        looked.append(os.fspath(path))
        return lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", counted)
    learned = _learn(store, root, "a finding whose names are all new")
    assert [p for p in looked if p.endswith(f"{learned.key}.json")] == []
    # what the learn still looks at by path every time: the learned folder it writes through, the
    # scope's turn folder it holds a share of, the run's folder, its streams folder, run.json and
    # the stream file (the journal's guards)
    ends = sorted(Path(p).name for p in looked)
    assert ends == sorted(
        ["compacted", ".trajectories", learned.citation.run_id, "streams", "run.json", "memory-learn.jsonl"]
    )


def test_a_plain_learn_of_new_content_looks_at_its_learned_name_once(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    # whether the learned name is there says both which memory the learn is a version of (none,
    # for a name missing) and whether this run may have committed it already: one look serves both
    _learn(store, root, "warm-up")
    looked: list[str] = []
    access = os.access

    def counted(path: Any, *args: Any, **kwargs: Any) -> bool:
        looked.append(os.fspath(path))
        return access(path, *args, **kwargs)

    monkeypatch.setattr(os, "access", counted)
    learned = _learn(store, root, "a finding whose learned name is new")
    assert looked.count(str(learned.path)) == 1, looked
    monkeypatch.undo()
    again = _learn(store, root, "a finding whose learned name is new")  # the same, in its run: answered
    assert (again.key, again.citation) == (learned.key, learned.citation)


def test_a_name_is_there_as_lexists_says_for_every_kind_of_entry(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    (tmp_path / "folder").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    os.mkfifo(tmp_path / "fifo")
    names = ["file", "folder", "dangling", "link", "fifo", "missing", "file/below"]
    for name in names:
        assert named(tmp_path / name) == os.path.lexists(tmp_path / name), name
        assert named(str(tmp_path / name)) == os.path.lexists(tmp_path / name), name
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert [named(n, dir_fd=fd) for n in names] == [True, True, True, True, True, False, False]
    finally:
        os.close(fd)


def test_a_dangling_link_at_the_retired_name_still_keeps_the_key_retired(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    first = _learn(store, root, "a finding forgotten by a planted link")
    retired = store._retirer.retired_path(root.scope, first.key)
    os.makedirs(os.path.dirname(retired), exist_ok=True)
    os.symlink("/nowhere/at/all", retired)
    # the name is there (as ``lexists`` says): the learn reads it as a retirement, and a link is
    # never read through, so it refuses rather than learn the key again as if nothing were there
    with pytest.raises(memory.FlowsMemoryError):
        _learn(store, root, "a finding forgotten by a planted link")


def _equal_to_init(value: Any, *, hashable: bool = True) -> None:
    """``value`` equals (and hashes as) what its dataclass's ``__init__`` makes of its fields, and
    stays frozen."""
    again = type(value)(**{f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    assert value == again
    assert not hashable or hash(value) == hash(again)
    assert vars(value) == vars(again)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.id = "changed"


def test_a_learns_record_marks_finding_and_result_are_made_without_their_dataclasses_init(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    _learn(store, root, "warm-up")
    made: list[str] = []
    kinds = (journal.Record, journal.LineMarks, memory.Finding, memory.Learned, memory.Citation)
    for cls in kinds:
        init = cls.__init__

        def counted(self: Any, *args: Any, _init: Any = init, _name: str = cls.__name__, **kw: Any) -> None:
            made.append(_name)
            _init(self, *args, **kw)

        monkeypatch.setattr(cls, "__init__", counted)
    learned = _learn(store, root, "a finding made of plain fields")
    assert made == []
    monkeypatch.undo()
    _equal_to_init(learned)
    _equal_to_init(learned.citation)
    (record,) = [r for r in root.journal.read(root.run_id, "memory-learn") if r.key == learned.key]
    _equal_to_init(record, hashable=False)
    assert record.payload["finding"] == {
        "text": "a finding made of plain fields",
        "source": root.flow,
        "tags": ["cost"],
    }
