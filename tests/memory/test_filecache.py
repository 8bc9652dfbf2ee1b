"""The stat-keyed index of unsynced learned files: a fresh process's first read need not re-read
every file, yet the files always win, damage still fails the read, and a bad index is only ignored."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import memory
from memory._filecache import CACHE_DIR, FileCache, _entry_row, _row_entry
from memory._files import learned_names, read_learned
from tests.conftest import ROOT
from tests.memory.conftest import Clock

SCOPE = "scope-a"


def _learn(db: Path, n: int) -> None:
    # a clock that steps: learns in one millisecond would order by key, not by when they were made
    with (
        memory.MemoryStore(db, clock=Clock(start=time.time_ns() // 1_000_000 - 10_000_000)) as store,
        store.session(scope=SCOPE, flow="probe") as s,
    ):
        for i in range(n):
            s.learn({"text": f"finding {i} about fog", "tags": [f"t{i % 3}"]})


@pytest.fixture(autouse=True)
def settled_now(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count files and folders as settled once changed before the scan (no 2 s racy window): a
    test cannot age a ctime. The tests of the window itself put it back."""
    monkeypatch.setattr(memory._filecache, "_RACY_NS", 0)


def _age(db: Path) -> None:
    """Make every learned file look settled (older than the index's racy window)."""
    for path in (db.parent / "flows-memory").rglob("*.json"):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 10_000_000_000))


def _recall(db: Path, **kw: object) -> list[tuple[str, str]]:
    with memory.MemoryStore(db) as store:
        return [(e.key, e.text) for e in store.recall(limit=None, **kw)]  # type: ignore[arg-type]


def _index_files(db: Path) -> list[Path]:
    return sorted((db.parent / CACHE_DIR).glob("files-*.idx"))


class Counting:
    """``read_learned`` and the file's stat, counting the files it reads."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def __call__(self, path: Path) -> tuple[memory.Recalled, os.stat_result]:
        self.paths.append(path)
        st = os.lstat(path)
        return read_learned(path), st


@pytest.fixture
def learned(db: Path) -> Iterator[Path]:
    """Five unsynced learned files in ``scope-a``, settled, and the first read done (index written)."""
    _learn(db, 5)
    _age(db)
    _recall(db)
    yield memory.learned_dir(db, SCOPE)


def _read(db: Path, directory: Path) -> tuple[tuple[memory.Recalled, ...], Counting]:
    counting = Counting()
    cache = FileCache(db.parent / CACHE_DIR, db.parent / "flows-memory")
    return cache.read(directory, os.lstat(directory), learned_names(directory), counting), counting


def test_a_fresh_read_serves_unchanged_files_from_the_index_unread(db: Path, learned: Path) -> None:
    entries, counting = _read(db, learned)
    assert counting.paths == []
    assert sorted(e.key for e in entries) == sorted(p.stem for p in learned.iterdir())
    assert sorted((e.key, e.text) for e in entries) == sorted(_recall(db))
    assert len(_index_files(db)) == 1
    assert sorted(p.name for p in (db.parent / "flows-memory").rglob("*") if p.is_file()) == sorted(
        p.name for p in learned.iterdir()
    ), "the index is never kept among the learned files"


def test_the_first_read_writes_the_index_and_reads_every_file_once(db: Path) -> None:
    _learn(db, 4)
    _age(db)
    directory = memory.learned_dir(db, SCOPE)
    _, first = _read(db, directory)
    assert len(first.paths) == 4
    _, second = _read(db, directory)
    assert second.paths == []


def test_a_file_rewritten_in_place_is_read_again_and_damage_fails(db: Path, learned: Path) -> None:
    victim = sorted(learned.iterdir())[0]
    st = victim.stat()
    data = victim.read_bytes()
    victim.write_bytes(data[:-3] + b"}}}")  # same size, broken JSON
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))  # even with its mtime put back
    with pytest.raises(memory.Unreachable) as err:
        _recall(db)
    assert err.value.path == victim


def test_a_file_replaced_by_a_changed_copy_is_read_again(db: Path, learned: Path) -> None:
    victim = sorted(learned.iterdir())[0]
    copy = victim.with_name(".copy")
    shutil.copy2(victim, copy)
    os.replace(copy, victim)  # same bytes, another inode: read again, same answer
    entries, counting = _read(db, learned)
    assert counting.paths == [victim]
    assert len(entries) == 5


def test_a_new_file_and_a_removed_file_are_seen(db: Path, learned: Path) -> None:
    gone = sorted(learned.iterdir())[0]
    gone.unlink()
    with memory.MemoryStore(db) as store, store.session(scope=SCOPE, flow="probe") as s:
        new = s.learn({"text": "a later finding about rain"}).id
    keys = {k for k, _ in _recall(db)}
    assert keys == {p.stem for p in learned.iterdir()}
    assert new in keys and gone.stem not in keys and len(keys) == 5


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b[:-10],  # truncated
        lambda b: b[:40] + bytes([b[40] ^ 1]) + b[41:],  # one bit flipped in the body
        lambda b: bytes([b[0] ^ 1]) + b[1:],  # one bit flipped in the tag
        lambda b: b"",  # empty
        lambda b: os.urandom(len(b)),  # noise
    ],
)
def test_a_damaged_index_is_ignored_and_rebuilt_never_an_error_never_a_wrong_answer(
    db: Path, learned: Path, damage: object
) -> None:
    expected = _recall(db)
    (index,) = _index_files(db)
    index.write_bytes(damage(index.read_bytes()))  # type: ignore[operator]
    entries, counting = _read(db, learned)
    assert len(counting.paths) == 5  # nothing trusted from it
    assert sorted((e.key, e.text) for e in entries) == sorted(expected)
    _, again = _read(db, learned)
    assert again.paths == []  # rebuilt


def test_a_crafted_index_with_another_answer_is_ignored(db: Path, learned: Path) -> None:
    (index,) = _index_files(db)
    data = index.read_bytes()
    victim = sorted(learned.iterdir())[0]
    text = read_learned(victim).text.encode()
    forged = data.replace(text, b"X" * len(text))
    assert forged != data
    index.write_bytes(forged)  # the tag no longer matches: ignored
    entries, _ = _read(db, learned)
    assert read_learned(victim).text in {e.text for e in entries}
    assert all(not e.text.startswith("XXX") for e in entries)


def test_an_index_tagged_with_a_key_this_user_did_not_make_alone_is_ignored(db: Path, learned: Path) -> None:
    key = db.parent / CACHE_DIR / "key"
    os.chmod(key, 0o644)  # readable by others: no longer a secret, so no longer a key
    _, counting = _read(db, learned)
    assert len(counting.paths) == 5


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_an_index_that_is_not_a_regular_file_is_ignored(db: Path, learned: Path, kind: str) -> None:
    (index,) = _index_files(db)
    real = index.with_name("elsewhere")
    os.replace(index, real)
    if kind == "symlink":
        index.symlink_to(real)
    elif kind == "fifo":
        os.mkfifo(index)
    else:
        index.mkdir()
    entries, counting = _read(db, learned)
    assert len(counting.paths) == 5
    assert len(entries) == 5


def test_reads_work_when_the_index_cannot_be_written(db: Path) -> None:
    _learn(db, 3)
    _age(db)
    (db.parent / CACHE_DIR).write_bytes(b"not a folder")
    assert len(_recall(db)) == 3
    assert (db.parent / CACHE_DIR).read_bytes() == b"not a folder"


def test_a_read_only_store_reads_and_writes_no_index() -> None:
    """As another user (or with the store's folders not writable), a read only reads."""
    home = Path(tempfile.mkdtemp(prefix="flows-ro-"))
    try:
        os.chmod(home, 0o755)
        db = home / "history.db"
        _learn(db, 5)  # unsynced files only (no history DB: its WAL needs a writable folder)
        _age(db)
        for path in [home, *home.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        code = "import memory, sys; s = memory.MemoryStore(sys.argv[1]);print(len(s.recall(limit=None)))"
        cmd = [sys.executable, "-c", code, str(db)]
        if os.geteuid() == 0:  # root writes anywhere: mount the store read-only in a namespace of its own
            script = f'mount --bind "{home}" "{home}" && mount -o remount,bind,ro "{home}" && exec "$@"'
            cmd = ["unshare", "--mount", "sh", "-c", script, "sh", *cmd]
        else:
            for path in [home, *home.rglob("*")]:
                os.chmod(path, 0o555 if path.is_dir() else 0o444)
        result = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == "5"
        assert not (home / CACHE_DIR).exists()  # nothing written, and no error for it
    finally:
        for path in [home, *home.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        shutil.rmtree(home, ignore_errors=True)


def test_a_store_opened_without_the_files_index_neither_reads_nor_writes_it(db: Path) -> None:
    _learn(db, 3)
    _age(db)
    with memory.MemoryStore(db, file_index=False) as store:
        assert len(store.recall(limit=None)) == 3
    assert not (db.parent / CACHE_DIR).exists()
    assert len(_recall(db)) == 3
    assert len(_index_files(db)) == 1  # the default store writes it


def test_an_index_row_gives_back_every_field_of_the_entry_it_was_made_from(db: Path) -> None:
    with memory.MemoryStore(db) as store, store.session(scope=SCOPE, flow="probe") as s:
        s.learn(
            {
                "text": "with every field",
                "tags": ["a", "b"],
                "metadata": {"k": [1, {"x": None}]},
                "expiresMs": 2**40,
            }
        )
    (path,) = memory.learned_dir(db, SCOPE).iterdir()
    entry = read_learned(path)
    assert entry.metadata and entry.expires_ms
    assert _row_entry(orjson.loads(orjson.dumps(_entry_row(entry)))) == entry


# -- the index as a listing: a settled folder's reads check only the files they consider ----------


def _stamp(db: Path) -> object:
    """The folder stamp the scope's index was written under (None: not stamped, or no index)."""
    cache = FileCache(db.parent / CACHE_DIR, db.parent / "flows-memory")
    index = cache._open(memory.learned_dir(db, SCOPE))
    return None if index is None else index.header["stamp"]


def _newest_first(db: Path) -> list[Path]:
    directory = memory.learned_dir(db, SCOPE)
    with memory.MemoryStore(db) as store:
        return [directory / f"{e.key}.json" for e in store.recall(limit=None)]


def _damage_in_place(path: Path) -> None:
    """Rewrite ``path`` in place (same inode, same size, mtime put back): what the engine never does."""
    st = path.stat()
    data = path.read_bytes()
    path.write_bytes(data[:-3] + b"}}}")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_settled_folder_is_read_from_its_index_and_checks_only_the_files_a_read_considers(
    db: Path, learned: Path
) -> None:
    assert _stamp(db) is not None
    order = _newest_first(db)
    _damage_in_place(order[-1])  # the oldest: no read with a small limit reaches it
    with memory.MemoryStore(db) as store:
        assert [e.key for e in store.recall(limit=2)] == [p.stem for p in order[:2]]
    with memory.MemoryStore(db) as store, pytest.raises(memory.Unreachable) as err:
        store.recall(limit=None)  # this read would return it: it fails, naming it
    assert err.value.path == order[-1]


@pytest.mark.parametrize("which", [0, 1])
def test_a_file_damaged_in_place_fails_every_read_that_would_return_it(
    db: Path, learned: Path, which: int
) -> None:
    order = _newest_first(db)
    _damage_in_place(order[which])
    for read in (lambda s: s.recall(limit=2), lambda s: s.get(order[which].stem)):
        with memory.MemoryStore(db) as store, pytest.raises(memory.Unreachable) as err:
            read(store)
        assert err.value.path == order[which]


@pytest.mark.parametrize("mtime_put_back", [False, True])
def test_a_file_added_to_a_settled_folder_is_seen(db: Path, learned: Path, mtime_put_back: bool) -> None:
    assert _stamp(db) is not None
    st = learned.stat()
    with memory.MemoryStore(db) as store, store.session(scope=SCOPE, flow="probe") as s:
        new = s.learn({"text": "a later finding about rain", "tags": ["t0"]}).id
    if mtime_put_back:  # the folder's mtime set back: its ctime still moved
        os.utime(learned, ns=(st.st_atime_ns, st.st_mtime_ns))
    with memory.MemoryStore(db) as store:
        assert store.recall(limit=1)[0].key == new
        assert store.recall(tag="t0", limit=1)[0].key == new
        assert store.get(new) is not None


def test_a_file_removed_from_a_settled_folder_is_never_served(db: Path, learned: Path) -> None:
    order = _newest_first(db)
    order[0].unlink()
    with memory.MemoryStore(db) as store:
        assert [e.key for e in store.recall(limit=None)] == [p.stem for p in order[1:]]
        assert store.get(order[0].stem) is None


def test_a_file_replaced_by_a_newer_commit_of_its_finding_is_served_as_replaced(
    db: Path, learned: Path
) -> None:
    oldest = _newest_first(db)[-1]
    before = read_learned(oldest)
    with memory.MemoryStore(db) as store, store.session(scope=SCOPE, flow="again") as s:
        # the same finding in another run: its commit is newer, and its file replaces the first
        s.learn({"text": before.text, "source": before.source, "tags": list(before.tags)})
    after = read_learned(oldest)
    assert after.learned_ms > before.learned_ms and after.citation != before.citation
    with memory.MemoryStore(db) as store:
        (first,) = store.recall(limit=1)
        assert (first.key, first.learned_ms, first.citation) == (after.key, after.learned_ms, after.citation)


def test_a_retired_key_is_never_returned_from_the_index(db: Path, learned: Path) -> None:
    order = _newest_first(db)
    data = order[0].read_bytes()
    with memory.MemoryStore(db) as store, store.session(scope=SCOPE, flow="probe") as s:
        s.forget(order[0].stem, reason="wrong")
    order[0].write_bytes(data)  # its learned file back, as a crash before its removal leaves it
    _age(db)
    _recall(db)  # the index rewritten, listing it again
    assert _stamp(db) is not None
    with memory.MemoryStore(db) as store:
        assert order[0].stem not in {e.key for e in store.recall(limit=None)}
        assert store.recall(limit=1)[0].key == order[1].stem
        assert store.get(order[0].stem) is None


def test_a_section_of_the_index_unlike_its_digest_is_never_served(db: Path, learned: Path) -> None:
    (index,) = _index_files(db)
    data = index.read_bytes()
    newest = _newest_first(db)[0]
    text = read_learned(newest).text.encode()
    forged = data.replace(text, b"X" * len(text))
    assert forged != data
    index.write_bytes(forged)  # the header (and its keyed tag) unchanged, a page not
    with memory.MemoryStore(db) as store:
        found = store.recall(limit=None)
    assert read_learned(newest).text in {e.text for e in found}
    assert all(not e.text.startswith("XXX") for e in found)


@pytest.mark.parametrize("when", ["after the listing", "inside the snapshot"])
def test_a_read_racing_a_sync_from_the_index_returns_each_finding_once(
    db: Path, learned: Path, when: str
) -> None:
    keys = sorted(p.stem for p in learned.iterdir())
    with memory.MemoryStore(db) as reader, memory.MemoryStore(db) as syncer:
        search = reader._search
        synced: list[int] = []

        def sync_once() -> None:
            if not synced:
                synced.append(syncer.sync().ingested)

        if when == "after the listing":
            sources = search._sources

            def listing_then_sync(*a: object, **kw: object) -> object:
                found = sources(*a, **kw)  # type: ignore[arg-type]
                sync_once()
                return found

            search._sources = listing_then_sync  # type: ignore[method-assign]
        else:
            rows = search._db.recall

            def rows_then_sync(*a: object, **kw: object) -> object:
                found = rows(*a, **kw)  # type: ignore[arg-type]
                sync_once()
                return found

            search._db.recall = rows_then_sync  # type: ignore[method-assign]
        found = [e.key for e in reader.recall(limit=None)]
    assert synced == [5]
    assert sorted(found) == keys
    assert not any(learned.iterdir())


def test_scopes_and_get_are_answered_from_the_index(db: Path, learned: Path) -> None:
    order = _newest_first(db)
    with memory.MemoryStore(db) as store:
        assert store.scopes() == [SCOPE]
        assert store.get(order[2].stem) == read_learned(order[2])


def test_a_folder_changed_within_the_racy_window_is_not_stamped(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory._filecache, "_RACY_NS", 2_000_000_000)
    _learn(db, 3)
    _age(db)  # the files' mtimes look old; the folder (and the files' ctimes) are fresh
    _recall(db)
    assert _stamp(db) is None  # not listed from its index: every file is looked at
    monkeypatch.setattr(memory._filecache, "_RACY_NS", 0)
    _recall(db)
    assert _stamp(db) is not None


def test_a_folder_changed_within_the_racy_window_is_not_stamped_though_its_files_are_settled(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _learn(db, 3)
    time.sleep(0.4)
    directory = memory.learned_dir(db, SCOPE)
    (directory / ".stage-probe").write_bytes(b"")  # a hidden name: the folder changes, no file does
    monkeypatch.setattr(memory._filecache, "_RACY_NS", 200_000_000)
    _recall(db)
    assert _stamp(db) is None  # the folder may change again within its timestamps' tick
    time.sleep(0.3)
    _recall(db)
    assert _stamp(db) is not None


def test_a_read_from_the_index_decodes_only_the_rows_it_reaches(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's digest is checked whole, but only the rows a read reaches are decoded (the read
    takes its candidates 16 at a time), not the page's 64."""
    _learn(db, 70)
    _age(db)
    _recall(db)  # the index written: two pages
    decoded: list[bytes] = []
    real = orjson.loads

    def counting(data: bytes | str) -> object:
        if isinstance(data, bytes | bytearray | memoryview):
            decoded.append(bytes(data))
        return real(data)

    monkeypatch.setattr(orjson, "loads", counting)
    with memory.MemoryStore(db, recover=False) as store:
        (newest,) = store.recall(limit=1)
        (tagged,) = store.recall(tag="t1", limit=1)
    assert newest.text == "finding 69 about fog" and tagged.text == "finding 67 about fog"
    rows = [d for d in decoded if b"about fog" in d]
    assert all(d.count(b"about fog") == 1 for d in rows)  # a row at a time (or a file, or a record)
    assert len(rows) < 64


@pytest.mark.parametrize(
    "below",
    ["0123456789abcdef/.trajectories/compacted", "../elsewhere", "a/./b", "a/../b", "x"],
)
def test_a_folder_index_is_named_by_its_path_relative_to_the_learned_root(tmp_path: Path, below: str) -> None:
    root = tmp_path / "flows-memory"
    cache = FileCache(tmp_path / CACHE_DIR, root)
    path, name = cache._index_path(Path(f"{root}/{below}"))
    assert name == os.path.relpath(f"{root}/{below}", root)
    assert Path(path).parent == tmp_path / CACHE_DIR and Path(path).name.startswith("files-")


@pytest.mark.parametrize("section", ["page", "tags", "posting"])
def test_an_index_a_read_found_stale_is_written_again(
    db: Path, learned: Path, section: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A section unlike its digest sends the read to the files; the index is then written again
    (its rows were fine, its stamp the folder's), so the next process reads from it, not from every
    file."""
    (index,) = _index_files(db)
    data = index.read_bytes()
    newest = _newest_first(db)[0]
    if section == "posting":  # the first byte of t1's posting list: the one the read below asks for
        # (the first list is the newest row's tag, and learns within one millisecond order by key)
        opened = FileCache(db.parent / CACHE_DIR, db.parent / "flows-memory")._open(learned)
        assert opened is not None
        offset = int(opened.section(opened.header["tags"])["t1"].split()[0])
        at = opened._base + opened.header["postings"] + offset
    else:
        at = data.index(read_learned(newest).text.encode() if section == "page" else b'"t1":"')
    forged = data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :]
    index.write_bytes(forged)  # the header and its keyed tag unchanged
    with memory.MemoryStore(db) as store:
        assert len(store.recall(tag="t1", limit=None)) == 2
    assert index.read_bytes() not in (forged, b"")
    assert _stamp(db) is not None
    parsed: list[Path] = []
    parse = memory._files.parse_learned
    monkeypatch.setattr(memory._files, "parse_learned", lambda p, d: parsed.append(p) or parse(p, d))
    with memory.MemoryStore(db) as store:
        assert len(store.recall(tag="t1", limit=None)) == 2
        assert len(store.recall(limit=None)) == 5
    assert parsed == []  # every entry from the index written again
