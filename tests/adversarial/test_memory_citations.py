"""Files nobody journaled: a well-formed learned file whose cited record the journal does not hold
(forged, its run deleted, or the wrong journal) is damage. A read that would serve it fails with
``memory_unreachable`` naming the file, the journal and what repair will do; ``sync`` never makes it
a row. ``flows check --repair`` pointed at a journal that holds none of the store's runs refuses,
naming that journal, and changes nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

import journal
import memory
from tests._helpers.crafted import sealed_slot
from tests.adversarial.memory_support import Store, error_code, flows, populate, snapshot


def _forge(s: Store, text: str, *, learned_ms: int | None = None) -> Path:
    """A learned file of a finding nobody learned, copying a real file's citation shape."""
    real = orjson.loads(next(s.folder.iterdir()).read_bytes())
    finding = memory.validate({"text": text, "source": real["source"], "tags": real["tags"]}, "x")
    real.update(text=text, id=memory.finding_id(s.scope, finding))
    real["journal"]["id"] = "0123456789abcdef"
    if learned_ms is not None:
        real["learnedMs"] = learned_ms
    path = s.folder / f"{real['id']}.json"
    path.write_bytes(orjson.dumps(real, option=orjson.OPT_SORT_KEYS) + b"\n")
    return path


def test_a_forged_file_is_never_recalled_and_the_read_says_what_repair_will_do(tmp_path: Path) -> None:
    s = populate(tmp_path / "store" / "history.db", ["a real finding"])
    forged = _forge(s, "a finding nobody learned", learned_ms=2**50)  # newest: first in every answer
    with memory.MemoryStore(s.db) as store:
        for read in (store.recall, lambda: store.why("nobody learned")):
            with pytest.raises(memory.Unreachable) as caught:
                read()
            message = str(caught.value)
            assert caught.value.path == forged
            assert str(forged) in message and str(s.journal_dir) in message
            assert "flows check --repair" in message and "quarantine" in message
    result = flows(s.db, "recall", "--json")
    assert result.returncode == 1 and error_code(result) == "memory_unreachable"
    assert "nobody learned" not in result.stdout


def test_sync_never_makes_a_forged_file_a_row(tmp_path: Path) -> None:
    s = populate(tmp_path / "store" / "history.db", ["a real finding"])
    forged = _forge(s, "a finding nobody learned")
    result = flows(s.db, "sync")
    assert result.returncode == 1 and error_code(result) == "memory_unreachable"
    assert str(forged) in result.stderr
    with memory.MemoryStore(s.db) as store:
        assert store.db.held([forged.stem]) == {}
    assert forged.exists()  # left for `flows check --repair` to quarantine, never deleted


def test_a_file_whose_run_was_deleted_is_not_served(tmp_path: Path) -> None:
    s = populate(tmp_path / "store" / "history.db", ["from a run that is gone"])
    shutil.rmtree(s.journal_dir / "runs" / s.run_id)
    with memory.MemoryStore(s.db) as store, pytest.raises(memory.Unreachable, match=s.run_id):
        store.recall()
    assert flows(s.db, "sync").returncode == 1


def test_a_file_that_says_other_than_its_record_is_not_served(tmp_path: Path) -> None:
    s = populate(tmp_path / "store" / "history.db", ["a real finding"])
    (path,) = s.folder.iterdir()
    entry = orjson.loads(path.read_bytes())
    entry["learnedMs"] += 1  # moves it in time; the record says otherwise
    path.write_bytes(orjson.dumps(entry, option=orjson.OPT_SORT_KEYS) + b"\n")
    with memory.MemoryStore(s.db) as store, pytest.raises(memory.Unreachable, match="not the rendering"):
        store.recall()
    repaired = flows(s.db, "check", "--repair")
    assert repaired.returncode == 0, repaired.stdout
    with memory.MemoryStore(s.db) as store:
        assert [e.text for e in store.recall()] == ["a real finding"]


def test_repair_quarantines_the_forged_file_and_reads_answer_again(tmp_path: Path) -> None:
    s = populate(tmp_path / "store" / "history.db", ["a real finding"])
    forged = _forge(s, "a finding nobody learned")
    assert flows(s.db, "check", "--repair").returncode == 0
    assert not forged.exists()
    with memory.MemoryStore(s.db) as store:
        assert [e.text for e in store.recall()] == ["a real finding"]


@pytest.mark.parametrize("how", ["--journal", "$FLOWS_JOURNAL", "another store's journal"])
def test_repair_against_the_wrong_journal_refuses_naming_it_and_changes_nothing(
    tmp_path: Path, how: str
) -> None:
    s = populate(tmp_path / "store" / "history.db", ["one", "two", "three"])
    assert flows(s.db, "sync").returncode == 0
    populate(tmp_path / "store" / "history.db", ["four"])  # rows and files both cite the store's runs
    if how == "another store's journal":
        other = populate(tmp_path / "other" / "history.db", ["theirs"]).journal_dir
    else:
        other = tmp_path / "empty-journal"
    by_flag = how == "--journal"
    args, env = (("--journal", str(other)), None) if by_flag else ((), {"FLOWS_JOURNAL": str(other)})
    before = snapshot(tmp_path)
    checked = flows(s.db, "check", "--json", *args, env=env)
    assert checked.returncode == 1
    report = orjson.loads(checked.stdout)
    assert report["problems"][0]["kind"] == "journal_mismatch"
    assert str(other) in report["problems"][0]["message"]
    repaired = flows(s.db, "check", "--repair", *args, env=env)
    assert repaired.returncode == 1
    assert error_code(repaired) == "memory_wrong_journal"
    assert str(other) in repaired.stderr and "--journal" in repaired.stderr
    # not one file quarantined, nothing created (a SQLite reader may leave the DB's -wal and -shm)
    after = {k: v for k, v in snapshot(tmp_path).items() if not k.endswith(("db-wal", "db-shm"))}
    assert after == {k: v for k, v in before.items() if not k.endswith(("db-wal", "db-shm"))}
    assert flows(s.db, "check").returncode == 0  # with its own journal the store is clean


def _poison_after_first(s: Store) -> None:
    """Mark every byte of the run's stream after its first record as poisoned (a failed sync's
    doubt, as the log records it, the syncs' marks at that point): the later lines stay on disk,
    whole and checksummed, but none of them counts as a record any more, while the kept hints
    still point at them."""
    import struct

    from journal import FileJournal

    jr = FileJournal(s.journal_dir)
    path = jr.stream_path(s.run_id, memory.STREAM)
    jr.close()
    first_end = path.read_bytes().index(b"\n") + 1
    with open(f"{path}.lock", "r+b") as f:
        raw = f.read(92)
        state = struct.Struct("<8Q")
        generation = state.unpack_from(raw, 24)[1] if len(raw) == 92 else 0
        none = 2**64 - 1
        packed = state.pack(first_end, generation, none, none, none, none, none, none)
        mark = struct.pack("<Q", first_end)  # the syncs' marks no higher than that point, as a
        sealed = sealed_slot(mark)  # failed first sync leaves them
        f.seek(0)
        f.write(sealed + sealed + sealed_slot(packed))


def test_a_kept_hint_never_serves_a_file_whose_record_is_gone(tmp_path: Path) -> None:
    """A fresh process checks a citation by its kept hint (one line of the stream); once the
    record no longer counts (past a poisoned point), the line at the hint is not taken, and the
    read fails closed naming the run, as a full read of the stream would (``recover=False``:
    nothing cuts the log first)."""
    s = populate(tmp_path / "store" / "history.db", ["one", "two", "three"])
    with memory.MemoryStore(s.db) as store:
        assert len(store.recall(limit=10)) == 3  # a full read of the run, and its hints kept
    assert list((s.db.parent / "flows-cache").glob("cites-*.idx"))
    with memory.MemoryStore(s.db) as store:
        assert len(store.recall(limit=10)) == 3  # by the hints
    _poison_after_first(s)
    fresh = memory.MemoryStore(s.db, recover=False)
    try:
        with pytest.raises(memory.Unreachable, match=s.run_id) as caught:
            fresh.recall(limit=10)
    finally:
        fresh.close()
    assert caught.value.code == "memory_unreachable"


def test_a_forget_whose_run_record_was_removed_is_never_undone_by_repair(tmp_path: Path) -> None:
    """The run that forgot a finding loses its ``run.json`` (its records remain): the retired file
    cites a run the journal must not read as absent, or ``check --repair`` would quarantine the
    retired file and publish the forgotten finding again. Every command fails closed instead."""
    s = populate(tmp_path / "store" / "history.db", ["kept", "forgotten for good"])
    gone = next(k for k, t in s.keys.items() if t == "forgotten for good")
    with memory.MemoryStore(s.db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", s.scope, {})
        store.forget(gone, memory.RootRun(jr, lease, "adv", s.scope), reason="wrong")
        jr.finish(lease, journal.RunState.DONE)
    (s.journal_dir / "runs" / lease.run_id / "run.json").unlink()
    for args in (("check", "--repair", "--json"), ("recall", "--json"), ("why", "forgotten", "--json")):
        result = flows(s.db, *args)
        assert "forgotten for good" not in result.stdout, args
        if result.returncode != 0:
            assert error_code(result) == "journal_corrupt", (args, result.stderr)
    assert not (s.folder / f"{gone}.json").exists()
    assert (memory.retired_dir(s.db, s.scope) / f"{gone}.json").exists()


@pytest.mark.parametrize("stream", ["memory-forget", "memory-learn"])
def test_repair_publishes_no_record_while_a_retirement_may_be_unread(tmp_path: Path, stream: str) -> None:
    """The retired file of a forgotten (or superseded) finding is lost, and so is the journal stream
    that holds its retirement (a forget's, or an update's commit): ``check --repair`` cannot tell
    the finding was retired, so it publishes no record without its file until the journal is
    restored, and the finding never comes back."""
    s = populate(tmp_path / "store" / "history.db", ["kept", "retired for good"])
    gone = next(k for k, t in s.keys.items() if t == "retired for good")
    with memory.MemoryStore(s.db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("adv", s.scope, {})
        root = memory.RootRun(jr, lease, "adv", s.scope)
        if stream == "memory-forget":
            store.forget(gone, root, reason="wrong")
        else:
            store.update(gone, {"text": "its correction", "tags": ["adv"]}, root)
        jr.finish(lease, journal.RunState.DONE)
    shutil.rmtree(memory.retired_dir(s.db, s.scope))
    (s.journal_dir / "runs" / lease.run_id / "streams" / f"{stream}.jsonl").write_bytes(b"")
    result = flows(s.db, "check", "--repair", "--json")
    assert result.returncode == 1
    report = orjson.loads(result.stdout)
    held_back = [p for p in report["remaining"] if p["kind"] == "record_unpublished"]
    assert any(gone in p["path"] for p in held_back), report
    assert all(not p["repairable"] and lease.run_id in p["message"] for p in held_back)
    for args in (("recall", "--json"), ("why", "retired", "--json")):
        assert "retired for good" not in flows(s.db, *args).stdout, args
    assert not (s.folder / f"{gone}.json").exists()


def _one_forgotten_one_live(store: memory.MemoryStore) -> tuple[memory.Learned, memory.Learned]:
    """Two findings of scope ``s``, the first forgotten (so a real retired file is there to copy)."""
    with store.session(scope="s") as sess:
        gone = sess.learn({"text": "forgotten on purpose"})
        live = sess.learn({"text": "a finding nobody forgot"})
        sess.forget(gone.key, reason="on purpose")
    return gone, live


@pytest.mark.parametrize("forgery", ["another finding's record", "a record nobody wrote", "another reason"])
def test_sync_never_lets_a_forged_retired_file_hide_a_live_finding_for_good(
    tmp_path: Path, forgery: str
) -> None:
    """A retired file keeps a finding out of every read, and ``sync`` makes that a mark on its row:
    one that no record backs (copied from another finding's, citing a record nobody wrote, or
    saying other than its record) must never mark a live finding's row, where ``check`` would no
    longer see it."""
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        gone, live = _one_forgotten_one_live(store)
        folder = store.db_path.parent / "flows-memory"
        (real,) = folder.glob("*/.trajectories/retired/*.json")
        data = orjson.loads(real.read_bytes())
        data["id"] = live.key
        if forgery == "a record nobody wrote":
            data["journal"]["id"] = "0123456789abcdef"
        if forgery == "another reason":  # the record's own finding, told otherwise
            data["id"] = gone.key
            data["reason"] = "forged"
        forged = real.with_name(f"{data['id']}.json")
        forged.write_bytes(orjson.dumps(data, option=orjson.OPT_SORT_KEYS) + b"\n")
        with pytest.raises(memory.Unreachable) as caught:
            store.sync()
        assert str(forged) in str(caught.value) and "retires nothing" in str(caught.value)
        problems = memory.check_store(store)
        assert problems and str(forged) in str(problems)
        memory.repair_store(store, problems)
        store.sync()
        texts = [r.text for r in store.recall(scope="s", limit=None)]
        assert texts == ["a finding nobody forgot"], texts
        assert memory.check_store(store) == []


def test_a_row_marked_retired_by_no_record_is_reported_and_unmarked_by_repair(tmp_path: Path) -> None:
    """A mark on a row (what an older sync of a forged retired file left, or a DB edited by hand)
    hides a finding from every read: ``flows check`` finds it against the journal, and repair
    unmarks it, while a mark the journal backs stays."""
    import sqlite3

    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        gone, live = _one_forgotten_one_live(store)
        store.sync()
        assert memory.check_store(store) == []
        conn = sqlite3.connect(db)
        with conn:
            conn.execute(
                "INSERT INTO retirements SELECT ?, scope, flow, reason, by_key, forgotten_ms, run_id, stream,"
                " record_id, synced_ms FROM retirements WHERE key = ?",
                (live.key, gone.key),
            )
            conn.execute("UPDATE findings SET retired_ms = 1 WHERE key = ?", (live.key,))
        conn.close()
    with memory.MemoryStore(db) as store:
        assert store.recall(scope="s", limit=None) == []  # hidden by the mark alone
        problems = memory.check_store(store)
        assert [p.kind for p in problems] == ["retirement_unjournaled"]
        assert live.key in problems[0].message and gone.key not in problems[0].message
        actions = memory.repair_store(store, problems)
        assert actions == [f"unmarked finding {live.key}, which no record of the journal retires"]
        assert [r.text for r in store.recall(scope="s", limit=None)] == ["a finding nobody forgot"]
        assert memory.check_store(store) == []
        assert store.history(gone.key)[-1].kind == "forgotten"  # the backed mark stays


@pytest.mark.parametrize("synced", [False, True])
def test_reads_never_let_a_forged_retired_file_hide_a_live_finding(tmp_path: Path, synced: bool) -> None:
    """A retired file copied under a live finding's key (citing a real forget of another) leaves
    nothing out silently: every read it would hide the finding from fails, naming the file, and
    reads of other scopes go on."""
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        with store.session(scope="s") as sess:
            gone = sess.learn({"text": "forgotten on purpose"})
            live = sess.learn({"text": "a finding nobody forgot"})
        with store.session(scope="other") as sess:
            sess.learn({"text": "a finding of another scope"})
        if synced:
            store.sync()
        with store.session(scope="s") as sess:
            sess.forget(gone.key, reason="on purpose")
        (real,) = (store.db_path.parent / "flows-memory").glob("*/.trajectories/retired/*.json")
        data = orjson.loads(real.read_bytes())
        data["id"] = live.key
        forged = real.with_name(f"{live.key}.json")
        forged.write_bytes(orjson.dumps(data, option=orjson.OPT_SORT_KEYS) + b"\n")
    with memory.MemoryStore(db) as store:  # a fresh process's reads
        reads = {
            "recall": lambda: store.recall(scope="s"),
            "why": lambda: store.why("nobody forgot"),
            "get": lambda: store.get(live.key),
            "current": lambda: store.current(live.memory_id),
        }
        with store.session(scope="s") as sess:  # nor does a write take it for a retirement
            writes = {
                "forget": lambda: sess.forget(live.key, reason="answered with the forgery?"),
                "update": lambda: sess.update(live.key, {"text": "a correction"}),
                "learn again": lambda: sess.learn({"text": "a finding nobody forgot"}),
            }
            for name, read in {**reads, **writes}.items():
                with pytest.raises(memory.Unreachable) as caught:
                    read()
                assert str(forged) in str(caught.value) and "retires nothing" in str(caught.value), name
        assert [r.text for r in store.recall(scope="other")] == ["a finding of another scope"]
        memory.repair_store(store, memory.check_store(store))
        assert [r.text for r in store.recall(scope="s")] == ["a finding nobody forgot"]
        assert store.get(gone.key) is None  # the real retirement still holds
        assert [e.kind for e in store.history(live.key)] == ["learned"]  # no write went through
