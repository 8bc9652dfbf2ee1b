"""What a read reads again after a write: a retired file it has read, settled and unchanged since, is
not read again, and a file changed in any way is; a learned or retired file whose bytes are the ones
it held is not parsed again, and bytes that changed are judged afresh."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import memory
import memory._files as files
from memory._safe import Folder
from tests.memory.conftest import Clock


@pytest.fixture
def store(db: Path, clock: Clock) -> Iterator[memory.MemoryStore]:
    with memory.MemoryStore(db, clock=clock) as s:
        yield s


def _retire(store: memory.MemoryStore, n: int, start: int = 0) -> list[str]:
    """Learn and forget ``n`` findings in scope ``desk``; their keys."""
    with store.session(scope="desk") as s:
        keys = [s.learn({"text": f"finding {start + i} of the desk"}).key for i in range(n)]
        for key in keys:
            s.forget(key, reason="wrong")
    return keys


def _settle() -> None:
    """Wait out the window within which a file's times may not yet tell a later change apart."""
    time.sleep(files.RACY_S * 2)


def test_a_read_after_a_retirement_reads_only_the_new_retired_file(
    store: memory.MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _retire(store, 20)
    _settle()
    assert store.recall(scope="desk", limit=None) == []  # every retired file read once
    read = _counting_retired_reads(monkeypatch)
    (new,) = _retire(store, 1, start=20)
    read.clear()
    assert store.recall(scope="desk", limit=None) == []
    assert read == [f"{new}.json"]


def test_a_sync_after_a_retirement_reads_only_the_new_retired_file(
    store: memory.MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sync`` takes every retirement into the history DB, so it lists every retired folder; it
    reads only the files added or changed since this process last read them."""
    _retire(store, 20)
    _settle()
    store.sync()
    read = _counting_retired_reads(monkeypatch)
    (new,) = _retire(store, 1, start=20)
    store.sync()
    assert read == [f"{new}.json"]
    assert store.recall(scope="desk", limit=None) == []


@pytest.mark.parametrize("materialize", [False, True], ids=["own-files", "materializing"])
def test_a_sync_looks_only_at_the_retired_files_whose_retirement_the_db_lacks(
    store: memory.MemoryStore, monkeypatch: pytest.MonkeyPatch, materialize: bool
) -> None:
    """A retirement is kept for good and its file is named after its key: a sync lists each retired
    folder and looks (a stat, and a read when changed) only at the files of retirements the history
    DB does not hold yet, so what it costs does not grow with every retirement ever made."""
    _retire(store, 20)
    store.sync(materialize=materialize)
    looked: list[str] = []
    real = files._reread_retired

    def counting(folder: Folder, directory: Path, names: Any, known: Any, parse: Any) -> Any:
        names = list(names)
        looked.extend(names)
        return real(folder, directory, names, known, parse)

    monkeypatch.setattr(files, "_reread_retired", counting)
    (new,) = _retire(store, 1, start=20)
    looked.clear()
    store.sync(materialize=materialize)
    assert looked == [f"{new}.json"]
    assert store.recall(scope="desk", limit=None) == []
    assert new in store.db.retired_keys() and len(store.db.retired_keys()) == 21


def _counting_retired_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the retired files read from now on (a list that fills as they are)."""
    read: list[str] = []
    real = Folder.read

    def counting(self: Folder, name: str, shown: str | None = None) -> bytes | None:
        if self.path.name == "retired":
            read.append(name)
        return real(self, name, shown)

    monkeypatch.setattr(Folder, "read", counting)
    return read


@pytest.mark.parametrize("same_mtime", [False, True], ids=["rewritten", "rewritten-mtime-restored"])
def test_a_retired_file_damaged_in_place_after_a_read_fails_the_next_read(
    store: memory.MemoryStore, same_mtime: bool
) -> None:
    """Damage of the same size, even with its mtime set back, changes the file's ctime: the next
    read after the folder changes reads it again and fails closed rather than let its finding
    through."""
    (first,) = _retire(store, 1)
    _settle()
    assert store.recall(scope="desk", limit=None) == []
    path = memory.retired_dir(store.db_path, "desk") / f"{first}.json"
    before = path.stat()
    data = path.read_bytes()
    path.write_bytes(b"{" + data[1:-2] + b"!\n")  # same size, no longer JSON
    if same_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    _retire(store, 1, start=1)  # the folder changes
    with pytest.raises(memory.Unreachable, match="retired file"):
        store.recall(scope="desk", limit=None)


def test_a_parse_is_remembered_by_path_and_bytes(tmp_path: Path) -> None:
    calls: list[bytes] = []

    def parse(path: Path, data: bytes) -> tuple[str, bytes]:
        calls.append(data)
        if data == b"damaged":
            raise ValueError("damaged")
        return (path.name, data)

    memo = files.ParseMemo(parse)
    first = memo(tmp_path / "a.json", b"one")
    assert memo(tmp_path / "a.json", b"one") is first
    assert memo(tmp_path / "b.json", b"one") == ("b.json", b"one")  # another path: parsed
    with pytest.raises(ValueError, match="damaged"):
        memo(tmp_path / "a.json", b"damaged")  # other bytes: parsed, and they fail
    with pytest.raises(ValueError, match="damaged"):
        memo(tmp_path / "a.json", b"damaged")  # a failure is never remembered
    assert memo(tmp_path / "a.json", b"one") is first
    assert calls == [b"one", b"one", b"damaged", b"damaged"]


def test_a_learned_file_rewritten_within_the_racy_window_is_judged_by_its_new_bytes(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="desk") as s:
        learned = s.learn({"text": "the fee is low"})
    (found,) = store.recall(scope="desk", limit=None)
    assert found.key == learned.key
    data = learned.path.read_bytes()
    learned.path.write_bytes(data.replace(b"low", b"lew"))  # still a finding's shape, not its name
    with pytest.raises(memory.Unreachable, match="damaged"):
        store.recall(scope="desk", limit=None)


def _own_files(store: memory.MemoryStore) -> list[Path]:
    """Learn findings of every shape a learned file takes (metadata, tags, an expiry, a revision
    after a forget, an update's version of a memory) in scope ``desk``; their files."""
    with store.session(scope="desk") as s:
        s.learn({"text": "plain finding"})
        s.learn(
            {
                "text": "the fee is 3 bps",
                "tags": ["fees", "ünïcode"],
                "metadata": {"key": "k1", "value": {"a": [1, 2.5, None, True], "b": {"c": "d"}}, "n": -7},
                "expiresMs": 4_102_444_800_000,  # 2100
            }
        )
        again = s.learn({"text": "learned again after a forget"}).key
        s.forget(again, reason="wrong")
        s.learn({"text": "learned again after a forget"})
        first = s.learn({"text": "version one", "metadata": {"v": 1}})
        s.update(first.memory_id, {"text": "version two", "metadata": {"v": 2}})
    return sorted(memory.learned_dir(store.db_path, "desk").glob("*.json"))


def test_a_file_this_process_published_from_its_commit_reads_as_its_parse_without_one(
    store: memory.MemoryStore,
) -> None:
    paths = _own_files(store)
    assert len(paths) == 4
    for path in paths:
        data = path.read_bytes()
        assert files.own_commit(path, data) is not None  # the learn noted it
        assert files._parse_learned_or_own(path, data) == files.parse_learned(path, data)
        # other bytes at that path are parsed (and judged) as ever
        changed = data.replace(b'"text":"', b'"text":"X', 1)
        assert files.own_commit(path, changed) is None
        with pytest.raises(memory.Unreachable, match="does not match its name"):
            files._parse_learned_or_own(path, changed)


def test_a_sync_of_files_this_process_published_parses_and_checks_no_commit_again(
    store: memory.MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file of a commit this process made holds that commit's rendering: a sync finding exactly
    those bytes takes the commit's entry and citation as they are (each was made from a finding the
    learn validated), where it parsed the file and checked the commit's shape again."""
    import memory._citations as citations

    paths = _own_files(store)
    parsed: list[Path] = []
    checked: list[str] = []
    real_parse, real_check = files.parse_learned, citations.checked_commit
    monkeypatch.setattr(files, "parse_learned", lambda p, d: parsed.append(p) or real_parse(p, d))
    monkeypatch.setattr(
        citations, "checked_commit", lambda r, loc: checked.append(r.id) or real_check(r, loc)
    )
    report = store.sync(materialize=False)
    assert report.ingested == len(paths) == 4
    assert parsed == [] and checked == []
    assert sorted(r.text for r in store.recall(scope="desk", limit=None)) == [
        "learned again after a forget",
        "plain finding",
        "the fee is 3 bps",
        "version two",
    ]


def test_a_file_of_this_process_s_commit_changed_in_place_still_fails_the_sync(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="desk") as s:
        s.learn({"text": "the fee is low", "metadata": {"n": 1}})
    (path,) = memory.learned_dir(store.db_path, "desk").glob("*.json")
    path.write_bytes(path.read_bytes().replace(b'"n":1', b'"n":2'))  # the same citation, other bytes
    with pytest.raises(memory.Unreachable, match=path.name):
        store.sync(materialize=False)
    assert store.db.count() == 0
