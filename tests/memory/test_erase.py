"""True erasure: after ``erase`` no byte of the memory's content (text, tags, metadata, source) is
anywhere the store writes, on either journal: its journal commits are tombstones that keep id,
number and time, the history DB's pages and log, learned files, stages, caches and vectors hold
none of it; what remains is the erase record. A kill at every failpoint of it leaves the memory
forgotten and either erased or reported by ``flows check``, and the same erase (or ``--repair``)
finishes it. Erasing is idempotent; a run that is still running refuses it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import journal
import memory
from tests._helpers.failpoints import run_armed
from tests._helpers.grep import files_holding as _files_holding
from tests.conftest import ROOT
from tests.memory.conftest import Clock

MARK = "ZQXERASEME"


def _learn_versions(store: memory.MemoryStore) -> tuple[str, str]:
    with store.session(scope="alice") as s:
        first = s.learn(
            {
                "text": f"alice's secret {MARK}1",
                "tags": [f"{MARK}t"],
                "metadata": {"k": f"{MARK}m"},
                "source": f"{MARK}s",
            }
        )
        s.learn({"text": "something else entirely", "tags": ["keep"]})
    store.sync()
    with store.session(scope="alice") as s:
        s.update(first.key, {"text": f"alice's secret {MARK}2"})
    return first.key, first.memory_id


def _pg_rows_holding(store: memory.MemoryStore, needle: str) -> int:
    dsn = store.journal_location
    if not dsn.startswith("postgres"):
        return 0
    import psycopg

    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "select count(*) from journal_records where payload like %s", (f"%{needle}%",)
        ).fetchone()
    return int(row[0]) if row else 0


def _store(tmp_path: Path, location: str) -> memory.MemoryStore:
    return memory.MemoryStore(tmp_path / "store" / "history.db", journal=location, clock=Clock())


def _erase_killed_at(store: memory.MemoryStore, location: str, key: str, point: str) -> None:
    """``erase(key)`` in a child process on ``store``'s files, SIGKILLed at failpoint ``point``."""
    code = f"""
        import memory
        store = memory.MemoryStore({str(store.db_path)!r}, journal={location!r})
        with store.session(scope="cli") as s:
            s.erase({key!r}, reason="killed")
        """
    done = run_armed(f"{point}=kill", textwrap.dedent(code), cwd=ROOT)
    assert done.returncode == -9, done.stderr


def test_after_erase_no_byte_of_the_content_is_left(tmp_path: Path, journal_location: str) -> None:
    store = _store(tmp_path, journal_location)
    first, memory_id = _learn_versions(store)
    assert store.why("secret")  # the memory vectors and caches would hold
    assert _files_holding(tmp_path, MARK)
    with store.session(scope="cli", flow="privacy") as s:
        erased = s.erase(first, reason="alice asked for erasure")
    assert erased.memory == memory_id and len(erased.keys) == 2 and erased.rewritten == 2
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    assert store.recall(scope="alice")[0].text == "something else entirely"
    events = store.history(first)
    assert [e.kind for e in events][-1] == "erased" and all(e.content is None for e in events)
    assert events[-1].reason == "alice asked for erasure" and events[-1].flow == "privacy"
    # the tombstones keep the commits' identity: numbers, ids and keys
    backend = store.open_journal()
    tombs = [
        r for run in backend.runs() for r in backend.read(run.run_id, memory.STREAM) if memory.is_erased(r)
    ]
    assert sorted(r.key for r in tombs) == sorted(erased.keys)
    assert memory.check_store(store) == []
    store.sync()
    store.materialize()
    assert _files_holding(tmp_path, MARK) == [] and store.recall(scope="alice", limit=None)[0].tags == (
        "keep",
    )
    with store.session(scope="cli") as s:  # again: nothing to do, no second record
        again = s.erase(first, reason="again")
    assert (again.citation, again.rewritten) == (None, 0)
    store.close()


@pytest.mark.parametrize(
    "point",
    [
        "memory.after_append",
        "memory.erase_after_record",
        "memory.erase_after_derived",
        "memory.erase_before_rewrite",
    ],
)
def test_an_erase_killed_at_any_point_is_finished_by_the_next(
    tmp_path: Path, point: str, journal_location: str
) -> None:
    location = journal_location
    store = _store(tmp_path, location)
    first, _ = _learn_versions(store)
    store.close()
    _erase_killed_at(store, location, first, point)
    with memory.MemoryStore(store.db_path, journal=location) as after:
        problems = memory.check_store(after)
        if point != "memory.after_append":  # the erase record was committed: the rest is reported
            assert all(MARK not in e.text for e in after.recall(limit=None))  # forgotten already
            assert "erase_incomplete" in {p.kind for p in problems}
            memory.repair_store(after, problems)
        else:  # killed inside its forget: reported as a forget is, repaired, then erased again
            assert "retirement_unpublished" in {p.kind for p in problems}
            memory.repair_store(after, problems)
            assert all(MARK not in e.text for e in after.recall(limit=None))
            with after.session(scope="cli") as s:
                s.erase(first, reason="again")
        assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(after, MARK) == 0
        assert [p.kind for p in memory.check_store(after)] == []


def test_a_running_run_refuses_the_erase_of_its_commits(tmp_path: Path) -> None:
    store = _store(tmp_path, str(tmp_path / "store" / "flows-journal"))
    with store.session(scope="alice") as writer:
        key = writer.learn({"text": f"still being written {MARK}"}).key
        with store.session(scope="cli") as s, pytest.raises(journal.JournalLeaseHeld):
            s.erase(key, reason="too early")
        assert store.get(key) is None  # forgotten at once; the content waits for the run to end
        # the erase record says it is gone: no history shows what it said, though its commit is
        # whole until the run ends (the history, a page of it, and the dashboard's page of it)
        events = store.history(key)
        assert [e.kind for e in events] == ["learned", "forgotten", "erased"]
        assert [e.content for e in events] == [None, None, None]
        assert all(e.content is None for e in store.history_page(key).events)
        _dashboard_shows_no_content(store, key)
    problems = memory.check_store(store)
    assert [p.kind for p in problems] == ["erase_incomplete"]
    memory.repair_store(store, problems)
    assert _files_holding(tmp_path, MARK) == [] and memory.check_store(store) == []


def _dashboard_shows_no_content(store: memory.MemoryStore, key: str) -> None:
    """The dashboard's page of the finding ``key`` shows nothing it said (when the web extra is here)."""
    try:
        from flows.web._findings import finding_detail
    except ImportError:  # pragma: no cover - the web extra is part of the test install
        return
    backend = store.open_journal()
    detail = finding_detail(store, backend, key, [r.run_id for r in backend.runs()])
    assert detail is not None and detail.live is None and detail.learned is None
    assert MARK not in repr(detail)


def test_the_cli_asks_for_yes_and_erases(tmp_path: Path) -> None:
    from tests.flows.helpers import flows, json_of

    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    learned = json_of(flows(db, "learn", f"bob's phone {MARK}", "--scope", "bob", "--json"))
    refused = flows(db, "erase", learned["key"])
    assert refused.returncode == 2 and "--yes" in refused.stderr
    done = json_of(flows(db, "erase", learned["key"], "--yes", "--reason", "bob asked", "--json"))
    assert done["memoryId"] == learned["key"] and done["rewritten"] == 1
    assert _files_holding(tmp_path, MARK) == []
    history = json_of(flows(db, "history", learned["key"], "--json"))["events"]
    assert [e["kind"] for e in history] == ["learned", "forgotten", "erased"]


def test_erase_by_filter_reaches_forgotten_and_superseded_memories_and_nothing_else(tmp_path: Path) -> None:
    from tests.flows.helpers import flows, json_of

    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    store = _store(tmp_path, str(db.parent / "flows-journal"))
    with store.session(scope="users") as s:
        a = s.learn({"text": f"carol's card {MARK}a", "metadata": {"user": "carol"}})
        s.update(a.key, {"text": f"carol's new card {MARK}b", "metadata": {"user": "carol"}})
        b = s.learn({"text": f"carol's old street {MARK}c", "metadata": {"user": "carol"}})
        s.forget(b.key, reason="moved")  # forgotten: its text is still in the journal
        s.learn({"text": "dave's card", "metadata": {"user": "dave"}})
    store.close()
    with pytest.raises(memory.ArgumentInvalid), memory.MemoryStore(db) as st, st.session(scope="x") as s:
        s.erase_where(reason="all", scope=None)
    dry = json_of(flows(db, "erase", "--meta", "user=carol", "--dry-run", "--json"))
    assert dry["count"] == 2 and _files_holding(tmp_path, MARK)
    listed = flows(db, "erase", "--meta", "user=carol", "--dry-run").stdout.splitlines()
    assert listed[1].split() == ["MEMORY", "STATE", "SCOPE", "TEXT"]  # what each is, before --yes
    assert sorted(line.split(None, 3) for line in listed[2:]) == sorted(
        [[a.memory_id, "live", "users", f"carol's new card {MARK}b"], [b.memory_id, "forgotten"]]
    )
    refused = flows(db, "erase", "--meta", "user=carol")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    done = json_of(flows(db, "erase", "--meta", "user=carol", "--yes", "--json"))
    assert sorted(done["memoryIds"]) == sorted(dry["memoryIds"]) == sorted([a.memory_id, b.memory_id])
    assert _files_holding(tmp_path, MARK) == []
    assert [r["text"] for r in json_of(flows(db, "recall", "--json"))] == ["dave's card"]


def _runs_read(store: memory.MemoryStore, monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The runs whose ``memory-learn`` stream the store's journal is asked to read from now on."""
    backend = store.open_journal()
    real = backend.read
    seen: set[str] = set()

    def read(run_id: str, stream: str) -> object:
        if stream == memory.STREAM:
            seen.add(run_id)
        return real(run_id, stream)

    monkeypatch.setattr(backend, "read", read)
    return seen


def test_an_erase_reads_the_runs_holding_the_memory_and_finds_every_commit_of_it(
    tmp_path: Path, journal_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the journal's key index narrows an erase to the runs that hold the memory; runs added after
    # the index was last brought up to date (another commit of the same finding in a later run, a
    # new version in another) are found all the same, and no other run is read
    store = _store(tmp_path, journal_location)
    others = []
    for i in range(6):
        with store.session(scope="bob", flow=f"other{i}") as s:
            others.append(s.learn({"text": f"unrelated finding {i}"}))
    with store.session(scope="alice", flow="first") as s:
        target = s.learn({"text": f"alice's secret {MARK}1", "tags": [f"{MARK}t"], "source": "chat"})
    with store.session(scope="cli") as s:
        s.erase(others[0].key, reason="builds the index")
    with store.session(scope="alice", flow="again") as s:  # a second commit of the same finding
        again = s.learn({"text": f"alice's secret {MARK}1", "tags": [f"{MARK}t"], "source": "chat"})
        assert again.key == target.key
    with store.session(scope="alice", flow="newer") as s:
        s.update(target.key, {"text": f"alice's secret {MARK}2"})
    runs = {r.flow: r.run_id for r in store.open_journal().runs()}
    seen = _runs_read(store, monkeypatch)
    with store.session(scope="cli") as s:
        erased = s.erase(target.key, reason="alice asked")
    assert erased.rewritten == 3
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    assert {runs["first"], runs["again"], runs["newer"]} <= seen
    assert not seen & {runs[f"other{i}"] for i in range(1, 6)}
    assert memory.check_store(store) == []
    store.close()


@pytest.mark.parametrize("damage", ["garbage", "link", "emptied", "forged-run"])
def test_a_damaged_journal_key_index_is_built_again_and_the_erase_is_complete(
    tmp_path: Path, damage: str
) -> None:
    store = _store(tmp_path, str(tmp_path / "journal"))
    with store.session(scope="alice") as s:
        target = s.learn({"text": f"alice's secret {MARK}1"})
        spare = s.learn({"text": "spare"})
    with store.session(scope="cli") as s:
        s.erase(spare.key, reason="builds the index")
    index = tmp_path / "store" / "flows-cache" / "journal-keys.sqlite3"
    assert index.is_file() and MARK.encode() not in index.read_bytes()  # keys and runs, no content
    store.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    if damage == "garbage":
        index.write_bytes(b"\x00garbage" * 4096)
    elif damage == "link":
        index.unlink()
        (tmp_path / "elsewhere").write_bytes(b"")
        index.symlink_to(tmp_path / "elsewhere")
    else:  # a valid index that lists every stream as read, with no keys, or naming a run that
        # is not in the journal (a path, an integer): stale or forged
        import sqlite3

        conn = sqlite3.connect(index)
        conn.execute("DELETE FROM keyed")
        if damage == "forged-run":
            for run in ("../../elsewhere", 7):
                row = (target.key, target.key, run, "memory-learn")
                conn.execute("INSERT INTO keyed VALUES (?, ?, ?, ?)", row)
        conn.commit()
        conn.close()
    store = _store(tmp_path, str(tmp_path / "journal"))
    with store.session(scope="cli") as s:
        # (emptied: the index names no run of the memory, while the history DB cites its commit's
        # run: the erase reads every run)
        s.erase(target.key, reason="alice asked")
    assert _files_holding(tmp_path, MARK) == []
    assert memory.check_store(store) == []
    store.close()
    if damage != "link":  # a link is never followed, nor replaced: every erase reads every run
        assert index.is_file() and not index.is_symlink()


def test_history_reads_the_runs_of_the_memory_and_a_reader_that_writes_nothing_keeps_no_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "store" / "history.db"
    store = _store(tmp_path, str(tmp_path / "journal"))
    with store.session(scope="alice", flow="first") as s:
        first = s.learn({"text": "alice likes tea"})
    for i in range(4):
        with store.session(scope="bob", flow=f"other{i}") as s:
            s.learn({"text": f"unrelated {i}"})
    with store.session(scope="alice", flow="second") as s:
        second = s.update(first.key, {"text": "alice likes green tea"})
    store.close()
    index = db.parent / "flows-cache" / "journal-keys.sqlite3"
    for how in ({"read_only": True}, {"file_index": False}):
        location = str(tmp_path / "journal")
        with memory.MemoryStore(db, journal=location, **how) as reader:  # type: ignore[arg-type]
            learned = [e.key for e in reader.history(second.key) if e.kind == "learned"]
            assert learned == [first.key, second.key]
        assert not index.exists()
    store = _store(tmp_path, str(tmp_path / "journal"))
    runs = {r.flow: r.run_id for r in store.open_journal().runs()}
    store.history(first.key)  # builds the index
    seen = _runs_read(store, monkeypatch)
    events = store.history(first.key)
    assert [(e.kind, e.key) for e in events] == [
        ("learned", first.key),
        ("learned", second.key),
        ("superseded", first.key),
    ]
    assert seen == {runs["first"], runs["second"]}
    store.close()


def test_processes_building_the_key_index_at_once_each_erase_completely(tmp_path: Path) -> None:
    # three processes erase three memories at the same moment on a store whose key index does not
    # exist yet: each builds or brings it up to date under SQLite's lock, each erasure is complete,
    # and the index they leave names exactly the runs of a memory learned afterwards
    location = str(tmp_path / "journal")
    store = _store(tmp_path, location)
    keys = []
    for i in range(3):
        for j in range(4):
            with store.session(scope=f"user{i}", flow=f"f{i}-{j}") as s:
                learned = s.learn({"text": f"{MARK}{i} note {j}", "source": "chat"})
                if j == 0:
                    keys.append(learned.key)
    store.close()
    code = """
        import sys
        import memory
        store = memory.MemoryStore(sys.argv[1], journal=sys.argv[2])
        with store.session(scope="cli") as s:
            s.erase(sys.argv[3], reason="at once")
        store.close()
        """
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(code), str(store.db_path), location, key],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stderr=subprocess.PIPE,
            text=True,
        )
        for key in keys
    ]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    for i in range(3):  # the erased notes are nowhere; the others stay
        assert _files_holding(tmp_path, f"{MARK}{i} note 0") == []
        assert _files_holding(tmp_path, f"{MARK}{i} note 1")
    store = _store(tmp_path, location)
    with store.session(scope="late", flow="late") as s:
        late = s.learn({"text": "learned after the erasures"})
    runs = {r.flow: r.run_id for r in store.open_journal().runs()}
    assert store._journal_keys.runs_of(store.open_journal(), late.key) == {runs["late"]}
    assert memory.check_store(store) == []
    store.close()


def test_indexing_the_journal_tells_its_progress_and_reads_only_what_changed(tmp_path: Path) -> None:
    store = _store(tmp_path, str(tmp_path / "journal"))
    for i in range(3):
        with store.session(scope="s", flow=f"f{i}") as s:
            s.learn({"text": f"note {i}"})
    told: list[tuple[int, int]] = []
    assert store.index_journal(lambda done, total: told.append((done, total)))
    # three runs, each with its memory-learn stream and an absent forget and erase stream
    assert told and told[-1][0] == told[-1][1] == 9
    told.clear()
    assert store.index_journal(lambda done, total: told.append((done, total))) and told == []
    with store.session(scope="s", flow="later") as s:
        s.learn({"text": "a later note"})
    assert store.index_journal(lambda done, total: told.append((done, total))) and told == [(3, 3)]
    store.close()
    with memory.MemoryStore(store.db_path, journal=str(tmp_path / "journal"), read_only=True) as reader:
        assert not reader.index_journal()


def test_a_commit_added_to_an_indexed_run_is_found_by_the_erase(
    tmp_path: Path, journal_location: str
) -> None:
    # the key index reads a run again once its stream changed (a file's stat, PostgreSQL's newest
    # record): a second commit of the finding, made in a run indexed before it, is erased too
    store = _store(tmp_path, journal_location)
    finding = {"text": f"gina's badge {MARK}", "source": "hr"}
    with store.session(scope="users", flow="first") as s:
        key = s.learn(finding).key
    with store.session(scope="users", flow="later") as s:
        s.learn({"text": "something else"})
        assert store.index_journal()
        assert s.learn(finding).key == key
    with store.session(scope="privacy") as s:
        assert s.erase(key, reason="gina asked").rewritten == 2
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    store.close()


def test_a_learned_file_of_an_erased_memory_that_comes_back_is_deleted_never_quarantined(
    tmp_path: Path,
) -> None:
    # a copy restored from a backup after the erase: check reports the erasure as unfinished, and
    # the repair deletes the file (moving it to flows-quarantine/ would keep the text)
    store = _store(tmp_path, str(tmp_path / "journal"))
    with store.session(scope="alice") as s:
        learned = s.learn({"text": f"alice's secret {MARK}1"})
    backup = learned.path.read_bytes()
    with store.session(scope="cli") as s:
        s.erase(learned.key, reason="alice asked")
    assert _files_holding(tmp_path, MARK) == []
    learned.path.write_bytes(backup)
    problems = memory.check_store(store)
    assert [p.kind for p in problems] == ["erase_incomplete"]
    memory.repair_store(store, problems)
    assert _files_holding(tmp_path, MARK) == [] and memory.check_store(store) == []
    store.close()


def test_an_erase_finds_its_content_in_a_leftover_larger_than_any_bound(tmp_path: Path) -> None:
    """A finding's text of control characters is six times longer as JSON: a file a crash left
    behind with it (here, a forget's old file set aside, not yet unlinked) runs to megabytes, and
    is read to its end, never skipped for its size."""
    store = _store(tmp_path, str(tmp_path / "journal"))
    with store.session(scope="alice") as s:
        big = s.learn({"text": f"{MARK} " + "\x01" * 800_000})
    store.close()
    code = f"""
        import memory
        store = memory.MemoryStore({str(store.db_path)!r}, journal={str(tmp_path / "journal")!r})
        with store.session(scope="alice") as s:
            s.forget({big.key!r}, reason="killed while its file was set aside")
        """
    done = run_armed("memory.after_set_aside=kill", textwrap.dedent(code), cwd=ROOT)
    assert done.returncode == -9, done.stderr
    left = [Path(p) for p in _files_holding(tmp_path / "store", MARK)]
    assert any(p.name.startswith(".") and p.stat().st_size > 4 << 20 for p in left), left
    with memory.MemoryStore(store.db_path, journal=str(tmp_path / "journal")) as after:
        with after.session(scope="cli") as s:
            s.erase(big.key, reason="erase what the crash left")
        assert _files_holding(tmp_path, MARK) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"before_ms": 2**63},
        {"before_ms": -(2**63) - 1},
        {"before_ms": 2**200},
        {"before_ms": True},
        {"before_ms": 1.5},
        {"before_ms": "soon"},
        {"scope": 7},
        {"source": b"raw"},
    ],
    ids=["past-2**63", "below-minus-2**63", "huge", "bool", "float", "text", "scope-int", "source-bytes"],
)
def test_erase_by_filter_checks_its_filter_as_forget_by_filter_does(
    tmp_path: Path, bad: dict[str, object]
) -> None:
    """``erase_where`` takes the one check a forget by filter (and every read) takes: a ``before_ms``
    outside a signed 64-bit integer, a bool, a float, or a part of the wrong type is
    ``memory_argument_invalid`` with the same message, and nothing is erased."""
    with memory.MemoryStore(tmp_path / "history.db") as store:
        with store.session(scope="alice") as s:
            kept = s.learn({"text": f"alice's secret {MARK}", "tags": ["pref"]})
        refused = {}
        for verb in ("forget_where", "erase_where"):
            with store.session(scope="alice") as s, pytest.raises(memory.ArgumentInvalid) as caught:
                getattr(s, verb)(reason="asked", tags=["pref"], **bad)
            assert caught.value.code == "memory_argument_invalid"
            refused[verb] = caught.value.message
        assert refused["erase_where"] == refused["forget_where"]
        assert [e.key for e in store.recall(limit=None)] == [kept.key]
        assert [e.kind for e in store.history(kept.key)] == ["learned"]


def test_a_learn_of_the_same_content_in_another_run_during_the_erase_is_erased_too(
    tmp_path: Path, journal_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # another process learns the very finding (the same key) in a run of its own after the erase
    # has read the memory's history and before its forget: that commit is erased with the rest,
    # never left in the journal behind an acknowledged erase
    store = _store(tmp_path, journal_location)
    finding = {"text": f"hana's address {MARK}", "tags": [f"{MARK}t"], "source": "crm"}
    with store.session(scope="users", flow="first") as s:
        key = s.learn(finding).key
    assert store.index_journal()
    other = memory.MemoryStore(store.db_path, journal=journal_location, clock=Clock(start=1_700_000_000_500))
    real = store._retirer.forget

    def forget_after_another_learn(key_: str, root: memory.RootRun, reason: str) -> memory.Forgotten:
        with other.session(scope="users", flow="racer") as s2:
            assert s2.learn(finding).key == key  # not retired yet: the same key, in another run
        return real(key_, root, reason)

    monkeypatch.setattr(store._retirer, "forget", forget_after_another_learn)
    with store.session(scope="privacy") as s:
        erased = s.erase(key, reason="hana asked")
    assert erased.rewritten == 2
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    assert memory.check_store(store) == []
    other.close()
    store.close()


def test_an_erase_leaves_no_content_in_a_forget_by_filter_that_retired_it(
    tmp_path: Path, journal_location: str
) -> None:
    # A forget by filter names its filter in its record; the filter's tags, metadata and source are
    # values the findings it retired held. Erasing those findings rewrites that record too: its ids,
    # flow, reason, time and scope stay; the tags, metadata and source go.
    store = _store(tmp_path, journal_location)
    with store.session(scope="users") as s:
        for i in range(3):
            s.learn(
                {
                    "text": f"erin note {i}",
                    "tags": [f"{MARK}t"],
                    "metadata": {"user": f"{MARK}u"},
                    "source": f"{MARK}s",
                }
            )
        kept = s.learn({"text": "frank note", "tags": ["other"], "metadata": {"user": "frank"}})
    store.sync()
    with store.session(scope="privacy", flow="privacy") as s:
        forgot = s.forget_where(
            reason="erin asked",
            scope="users",
            tags=[f"{MARK}t"],
            meta={"user": f"{MARK}u"},
            source=f"{MARK}s",
        )
        assert len(forgot.keys) == 3 and f"{MARK}u" in str(forgot.filter)
    assert _files_holding(tmp_path, MARK) or _pg_rows_holding(store, MARK)  # in the forget's record
    with store.session(scope="privacy", flow="privacy") as s:
        erased = s.erase_where(reason="erin asked for erasure", meta={"user": f"{MARK}u"})
    assert len(erased) == 3
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    # the forget's record is still one a reader takes: what it retired, why, by whom, its scope
    backend = store.open_journal()
    [batch] = [
        r
        for run in backend.runs()
        for r in backend.read(run.run_id, memory.RETIRE_STREAM)
        if isinstance(r.payload, dict) and "ids" in r.payload
    ]
    assert sorted(k for k, _ in batch.payload["ids"]) == sorted(forgot.keys)
    assert batch.payload["filter"] == {"scope": "users"} and batch.payload["reason"] == "erin asked"
    assert memory.check_store(store) == []
    assert [e.kind for e in store.history(forgot.keys[0])] == ["learned", "forgotten", "erased"]
    assert [f.key for f in store.recall(scope="users", limit=None)] == [kept.key]
    store.close()


def test_an_erase_killed_before_it_rewrites_a_forget_by_filter_is_reported_and_finished(
    tmp_path: Path,
) -> None:
    journal_dir = str(tmp_path / "store" / "flows-journal")
    store = _store(tmp_path, journal_dir)
    with store.session(scope="users") as s:
        key = s.learn({"text": "gina note", "metadata": {"user": f"{MARK}g"}}).key
    with store.session(scope="privacy") as s:
        assert s.forget_where(reason="gina asked", scope="users", meta={"user": f"{MARK}g"}).keys == (key,)
    store.close()
    _erase_killed_at(store, journal_dir, key, "memory.erase_before_rewrite")
    with memory.MemoryStore(store.db_path, journal=journal_dir) as after:
        problems = memory.check_store(after)
        assert [p.kind for p in problems] == ["erase_incomplete"]
        assert _files_holding(tmp_path, MARK)  # the commit and the forget's filter
        memory.repair_store(after, problems)
        assert _files_holding(tmp_path, MARK) == [] and memory.check_store(after) == []


def test_erase_where_answers_with_memory_ids_when_only_retired_versions_match(
    store: memory.MemoryStore,
) -> None:
    """A version forgotten (or superseded) keeps no learned file or DB row to say which memory it
    is of; its commit does. ``erase_where`` once answered with such a version's key as if it were
    a memory id, and listed one memory twice when two of its versions matched."""
    with store.session(scope="team") as s:
        first = s.learn({"text": "hal moves to lisbon", "metadata": {"user": "hal"}})
        second = s.update(first.memory_id, {"text": "hal moves to porto", "metadata": {"user": "hal"}})
        third = s.update(first.memory_id, {"text": "hal stays put", "metadata": {"user": "ivy"}})
        s.forget(third.key, reason="wrong")
    assert second.memory_id == third.memory_id == first.key
    with store.session(scope="privacy") as s:
        assert s.erase_where(reason="ivy asked", meta={"user": "ivy"}, dry_run=True) == [first.key]
        assert s.erase_where(reason="hal asked", meta={"user": "hal"}, dry_run=True) == [first.key]
        assert s.erase_where(reason="ivy asked", meta={"user": "ivy"}) == [first.key]
    assert [e.kind for e in store.history(first.key)][-1] == "erased"
    assert store.recall(scope="team", limit=None) == []
