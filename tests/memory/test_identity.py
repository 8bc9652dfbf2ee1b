"""One identity per memory: the first learn mints the memory id (its key), every supersede and
``update`` keeps it, listings show it beside the version key, ``history`` of any version lists them
all with their content; ids survive a sync and an old DB's migration; a crafted memory field in a
record, a learned file or a DB row is damage, never an identity."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import orjson
import pytest

import journal
import memory
from tests.flows.helpers import flows, json_of


@pytest.mark.parametrize("synced", [False, True], ids=["unsynced", "synced"])
def test_update_keeps_the_memory_id_and_history_lists_every_version(
    store: memory.MemoryStore, synced: bool
) -> None:
    with store.session(scope="alice", flow="prefs") as s:
        first = s.learn({"text": "alice likes tea", "tags": ["drink"]})
        if synced:
            store.sync()
        second = s.update(first.key, {"text": "alice likes green tea", "tags": ["drink"]})
        if synced:
            store.sync()
        third = s.update(second.key, {"text": "alice likes coffee"})  # any version's key names it
    assert first.memory_id == second.memory_id == third.memory_id == first.key
    assert len({first.key, second.key, third.key}) == 3
    (live,) = store.recall(scope="alice")
    assert (live.key, live.memory_id, live.as_json()["memoryId"]) == (third.key, first.key, first.key)
    assert store.current(second.key) == live and store.why("coffee")[0].memory_id == first.key
    events = store.history(second.key)
    assert [(e.kind, e.key) for e in events] == [
        ("learned", first.key),
        ("learned", second.key),
        ("superseded", first.key),
        ("learned", third.key),
        ("superseded", second.key),
    ]
    assert [e.content["text"] for e in events if e.content] == [
        "alice likes tea",
        "alice likes green tea",
        "alice likes coffee",
    ]
    assert {e.memory for e in events} == {first.key} and {e.flow for e in events} == {"prefs"}


def test_update_to_the_same_content_writes_nothing_and_an_update_of_nothing_is_refused(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="s") as s:
        first = s.learn({"text": "same"})
        again = s.update(first.key, {"text": "same"})
        assert again.key == first.key and again.citation == first.citation
        with pytest.raises(memory.FindingUnknown):
            s.update("0" * 32, {"text": "x"})
        with pytest.raises(memory.ArgumentInvalid):
            s.update("not-a-key", {"text": "x"})
        s.forget(first.key, reason="gone")
        with pytest.raises(memory.FindingUnknown, match="learn the finding again"):
            s.update(first.key, {"text": "back"})
        anew = s.learn({"text": "same"})  # a forget ends the memory: learning again starts a new one
    assert anew.memory_id == anew.key != first.key
    assert store.recall(scope="s")[0].memory_id == anew.key


def test_the_update_of_a_memory_this_store_just_learned_reads_one_file_not_every_folder(
    store: memory.MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an update finds the memory's live version first; for a version this store learned, that is
    # its one file (the folder walk costs a read of every unsynced file, per update), and a version
    # another process retired meanwhile is still seen (the walk then decides, and refuses)
    walks: list[str] = []
    real = memory._search.Search._current

    def counted(self: memory._search.Search, memory_id: str) -> memory.Recalled | None:
        walks.append(memory_id)
        return real(self, memory_id)

    with store.session(scope="s") as s:
        first = s.learn({"text": "the first version"})
        other = s.learn({"text": "another memory"})
        monkeypatch.setattr(memory._search.Search, "_current", counted)
        second = s.update(first.key, {"text": "the second version"})
        s.update(second.key, {"text": "the third version"})
        assert walks == []
        s.forget(other.key, reason="retired before its update")
        with pytest.raises(memory.FindingUnknown):
            s.update(other.key, {"text": "too late"})
        assert walks == [other.key]


def test_memory_ids_survive_a_migration_from_the_previous_schema(store: memory.MemoryStore) -> None:
    with store.session(scope="s") as s:
        first = s.learn({"text": "v1"})
        second = s.update(first.key, {"text": "v2"})
    store.sync()
    store.close()
    with sqlite3.connect(store.db_path) as conn:  # the DB as the previous schema left it
        conn.execute("DROP INDEX findings_by_memory")
        conn.execute("ALTER TABLE findings DROP COLUMN memory")
        conn.execute("PRAGMA user_version = 6")
    with memory.MemoryStore(store.db_path) as reopened:
        reopened.sync()
        assert reopened.db.schema_version() == memory.SCHEMA_VERSION
        (row,) = reopened.recall(scope="s")
        # the migration gives a row the old schema wrote its memory, from the supersedes recorded
        assert (row.key, row.memory_id) == (second.key, first.key)
        assert reopened.current(first.key) == row


def test_a_crafted_memory_field_is_damage_everywhere(store: memory.MemoryStore) -> None:
    with store.session(scope="s") as s:
        first = s.learn({"text": "v1"})
        second = s.update(first.key, {"text": "v2"})
    path = store.get(second.key).citation  # type: ignore[union-attr]
    assert path.stream == memory.STREAM
    record = store.open_journal().find(second.memory_id and path.run_id, memory.STREAM, second.key)
    assert record is not None and record.payload["memory"] == first.key
    for bad in (second.key, "A" * 32, 7, "x"):
        forged = journal.Record(
            record.run_id,
            record.stream,
            record.seq,
            record.id,
            record.key,
            record.ts_ms,
            {**record.payload, "memory": bad},
        )
        with pytest.raises(journal.JournalCorrupt, match="memory"):
            memory.checked_commit(forged, "j")
    learned = memory.learned_dir(store.db_path, "s") / f"{second.key}.json"
    original = learned.read_bytes()
    learned.write_bytes(orjson.dumps({**orjson.loads(original), "memory": second.key}))
    with pytest.raises(memory.Unreachable, match="memory id"):
        memory.read_learned(learned)
    learned.write_bytes(original)
    store.sync()
    with sqlite3.connect(store.db_path) as conn:
        conn.execute("UPDATE findings SET memory = key WHERE key = ?", (second.key,))
    with pytest.raises(memory.Unreachable, match="damaged"):
        memory.MemoryStore(store.db_path).recall(scope="s")


def test_flows_update_and_the_listings_show_the_memory_id(tmp_path: Path) -> None:
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    first = json_of(flows(db, "learn", "the fee is 5 EUR", "--scope", "billing", "--json"))
    assert first["memoryId"] == first["key"]
    updated = json_of(flows(db, "update", first["memoryId"], "the fee is 6 EUR", "--tag", "fees", "--json"))
    assert (updated["memoryId"], updated["supersedes"], updated["scope"]) == (
        first["key"],
        first["key"],
        "billing",
    )
    (row,) = json_of(flows(db, "recall", "--json"))
    assert (row["memoryId"], row["key"], row["text"]) == (first["key"], updated["key"], "the fee is 6 EUR")
    table = flows(db, "recall").stdout.splitlines()
    assert table[0].split()[:2] == ["MEMORY", "KEY"] and table[1].split()[:2] == [
        first["key"],
        updated["key"],
    ]
    human = flows(db, "update", first["key"], "the fee is 6 EUR", "--tag", "fees")
    assert "already holds that content" in human.stdout
    history = flows(db, "history", updated["key"])
    assert history.stdout.startswith(f"memory {first['key']}: 2 version(s)\n")
    assert flows(db, "sync").returncode == 0
    again = json_of(flows(db, "update", first["key"], "the fee is 7 EUR", "--json"))
    assert again["memoryId"] == first["key"]
    gone = flows(db, "update", "f" * 32, "x", "--json")
    assert gone.returncode == 1 and "memory_finding_unknown" in gone.stderr


def test_an_update_from_another_scope_finds_the_version_it_replaces(store: memory.MemoryStore) -> None:
    # the version an update replaces is looked for in the updating session's scope first, then in
    # every scope: one learned in another scope is found, and retired, all the same
    with store.session(scope="team-a") as a:
        first = a.learn({"text": "the deploy window is friday"})
    with store.session(scope="team-b") as b:
        second = b.update(first.key, {"text": "the deploy window is thursday"})
    assert second.memory_id == first.key
    assert store.recall(scope="team-a") == []
    assert [e.key for e in store.recall(scope="team-b")] == [second.key]
    assert [(e.kind, e.key) for e in store.history(first.key)][-1] == ("superseded", first.key)


_UPDATE = r"""
import sys
import memory
db, memory_id = sys.argv[1:3]
with memory.MemoryStore(db) as store, store.session(scope="desk", flow="updater") as s:
    s.update(memory_id, {"text": "the new version", "tags": ["t"]})
print("acknowledged", flush=True)
"""


@pytest.mark.parametrize("synced", [False, True], ids=["unsynced", "synced"])
def test_an_update_killed_after_its_one_commit_is_finished_by_repair_or_sync_with_one_live_version(
    tmp_path: Path, synced: bool
) -> None:
    """On a file journal the new version's commit is the old one's retirement: killed right after
    it, before any file, the update is all or nothing to every reader (the old version until
    ``flows check --repair`` or ``sync`` publishes both files, the new one after; never two live
    versions, never none), and check is clean after."""
    import signal

    from tests.conftest import run_python

    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        with store.session(scope="desk") as s:
            old = s.learn({"text": "the old version", "tags": ["t"]})
        if synced:
            store.sync()
    killed = run_python(_UPDATE, str(db), old.key, env={"FLOWS_FAILPOINTS": "memory.after_append=kill"})
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with memory.MemoryStore(db) as store:
        assert [e.text for e in store.recall(limit=None)] == ["the old version"]
        (commit,) = [
            r
            for run in store.open_journal().runs()
            for r in store.open_journal().read(run.run_id, memory.STREAM)
            if r.payload.get("supersedes") == old.key
        ]
        assert commit.payload["supersedesScope"] == "desk"
        assert all(
            not store.open_journal().read(run.run_id, memory.RETIRE_STREAM)
            for run in store.open_journal().runs()
        )
        problems = memory.check_store(store)
        kinds = {p.kind for p in problems}
        assert {"retirement_unpublished", "record_unpublished"} <= kinds, problems
        assert kinds <= {"retirement_unpublished", "record_unpublished", "learned_forgotten"}, problems
        memory.repair_store(store, problems)
        for _ in ("after repair", "after sync"):
            assert [(e.text, e.memory_id) for e in store.recall(limit=None)] == [("the new version", old.key)]
            assert store.get(old.key) is None
            assert [(e.kind, e.key == old.key) for e in store.history(old.key)] == [
                ("learned", True),
                ("learned", False),
                ("superseded", True),
            ]
            assert memory.check_store(store) == []
            store.sync()


def test_a_version_rewritten_after_this_process_learned_it_is_refused_by_its_own_reads(
    tmp_path: Path,
) -> None:
    """The commit a learn appended is known to the store's citation checks as it returns (no
    stream is read again), and a file of that version changed since still differs from it: the
    same store refuses it by name, in ``current``, ``update`` and ``recall``, and writes nothing."""
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="desk") as s:
        learned = s.learn({"text": "the original words", "tags": ["t"]})
        assert store.current(learned.memory_id) is not None  # read back once: checked and served
        learned.path.write_bytes(learned.path.read_bytes().replace(b"original", b"replaced"))
        for read in (
            lambda: store.current(learned.memory_id),
            lambda: s.update(learned.memory_id, {"text": "a next version", "tags": ["t"]}),
            lambda: store.recall(scope="desk", limit=None),
        ):
            with pytest.raises(memory.Unreachable) as raised:
                read()
            assert raised.value.code == "memory_unreachable" and learned.key in str(raised.value)
        assert [p.name for p in learned.path.parent.iterdir() if not p.name.startswith(".")] == [
            learned.path.name
        ]


def test_a_version_this_process_updated_to_is_read_as_its_commit_while_its_file_holds_those_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The next update of a memory whose live version this process's update wrote compares that
    file's bytes with the commit's rendering and parses none; the entry it reads is what a parse of
    the file gives (metadata, expiry, revision, memory), and a file changed since is refused."""
    from memory import _search

    db = tmp_path / "store" / "history.db"
    parsed: list[Path] = []
    real = memory.read_learned

    def counted(path: Path) -> memory.Recalled:
        parsed.append(path)
        return real(path)

    with memory.MemoryStore(db) as store, store.session(scope="desk") as s:
        first = s.learn({"text": "v1", "tags": ["t"]})
        second = s.update(first.key, {"text": "v2", "metadata": {"a": [1, {"b": 2.5}]}, "expiresMs": 2**41})
        want = memory.read_learned(second.path)
        monkeypatch.setattr(_search, "read_learned", counted)
        assert store.current(first.key) == want
        assert dict(want.metadata) == {"a": [1, {"b": 2.5}]} and want.memory == first.key
        third = s.update(second.key, {"text": "v3", "tags": ["t"]})
        assert parsed == []
        third.path.write_bytes(third.path.read_bytes().replace(b"v3", b"v9"))
        with pytest.raises(memory.Unreachable) as raised:
            s.update(first.key, {"text": "v4"})
        assert set(parsed) == {third.path} and third.key in str(raised.value)


def test_an_update_looks_for_another_retirement_of_the_version_it_replaces_once_in_its_turn(
    store: memory.MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The update reads the live version in its scope's turn and hands it to the learn, which looks
    no further; the only look for a retirement another made first is the one under the retired
    folder's lock, as the retired file is published (a race there refuses the update: the tests of
    an update racing a forget)."""
    from memory import _retire

    looks: list[str] = []
    for name in ("published_retirement", "_retired_by_another"):
        real = getattr(_retire.Retirer, name)

        def counted(self: _retire.Retirer, *args: object, _real: object = real, _name: str = name) -> object:
            looks.append(_name)
            return _real(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(_retire.Retirer, name, counted)
    with store.session(scope="s") as s:
        first = s.learn({"text": "v1"})
        looks.clear()
        second = s.update(first.key, {"text": "v2"})
    assert looks == ["_retired_by_another"]
    assert [e.key for e in store.recall(scope="s")] == [second.key]


def test_an_update_that_lost_its_race_is_lost_in_history_never_learned(tmp_path: Path) -> None:
    """An update whose commit names a version another retired first (a forget here; the race of
    ``tests/adversarial/test_update_races.py``, crafted) never lived: ``history`` (and ``flows
    history``) lists its commit as ``lost``, saying which retirement stood and citing that record,
    never as a ``learned`` version, and lists no supersede of the old version by it."""
    import time

    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        with store.session(scope="desk", flow="prep") as s:
            old = s.learn({"text": "the old version", "tags": ["t"]})
        with store.session(scope="desk", flow="forgetter") as s:
            forgot = s.forget(old.key, reason="the user asked")
        item = memory.validate({"text": "the new version", "tags": ["t"]}, "desk")
        new_key = memory.finding_id("desk", item)
        jr = store.open_journal()
        _, lease = jr.begin("updater", "desk", {})
        payload = {
            "id": new_key,
            "scope": "desk",
            "flow": "updater",
            "finding": item.as_json(),
            "learnedMs": int(time.time() * 1000) + 1,
            "memory": old.key,
            "supersedes": old.key,
            "supersedesScope": "desk",
        }
        commit = jr.append(lease, memory.STREAM, payload, key=new_key)  # killed before it looked
        assert store.update_lost(commit)
        for key in (old.key, new_key):
            events = store.history(key)
            assert [(e.kind, e.key) for e in events] == [
                ("learned", old.key),
                ("forgotten", old.key),
                ("lost", new_key),
            ]
            lost = events[-1]
            assert (lost.citation.run_id, lost.citation.id) == (lease.run_id, commit.id)
            assert lost.reason is not None and "never published" in lost.reason
            assert f"record {forgot.citation.id} of root run {forgot.citation.run_id}" in lost.reason
            assert lost.by is None and lost.memory == old.key
        assert store.recall(limit=None) == [] and memory.check_store(store) == []
    shown = json_of(flows(db, "history", new_key, "--json"))["events"]
    assert [(e["kind"], e["key"]) for e in shown][-1] == ("lost", new_key)
    table = flows(db, "history", old.key)
    assert table.returncode == 0, table.stderr
    (row,) = [line for line in table.stdout.splitlines() if new_key in line]
    assert row.startswith("lost ") and "never published" in row
