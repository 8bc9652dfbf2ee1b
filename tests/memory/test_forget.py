"""Supersede, forget and history, journal-first, on every journal backend: a retired finding leaves
every read in every process, and no path (learn, resume, materialize, sync, check --repair) brings it
back."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import flows
import journal
import memory
from journal import RunState
from tests.memory.conftest import Clock, learned_files

OLD = {"text": "the swap fee is 0.3 percent", "tags": ["fees"]}
NEW = {"text": "the swap fee is 0.05 percent since the upgrade", "tags": ["fees"]}


@pytest.fixture
def store(db: Path, clock: Clock, journal_location: str) -> Iterator[memory.MemoryStore]:
    """A store over ``db`` whose journal is each backend in turn."""
    with memory.MemoryStore(db, journal=journal_location, clock=clock) as s:
        yield s


def _all_records(store: memory.MemoryStore) -> list[journal.Record]:
    jr = store.open_journal()
    return [
        r
        for run in jr.runs()
        for stream in (memory.STREAM, memory.RETIRE_STREAM)
        for r in jr.read(run.run_id, stream)
    ]


def _visible(store: memory.MemoryStore, key: str) -> dict[str, bool]:
    """Where ``key`` shows: recall, why, get, and a fresh store (another process's view)."""
    with memory.MemoryStore(store.db_path, journal=store.journal_location) as fresh:
        return {
            "recall": key in {e.key for e in store.recall(limit=None)},
            "why": key in {a.finding.key for a in store.why("swap fee percent upgrade", limit=50)},
            "get": store.get(key) is not None,
            "fresh": key in {e.key for e in fresh.recall(limit=None)} or fresh.get(key) is not None,
        }


HIDDEN = {"recall": False, "why": False, "get": False, "fresh": False}
SHOWN = {"recall": True, "why": True, "get": True, "fresh": True}


@pytest.mark.parametrize("synced", [False, True], ids=["unsynced", "synced"])
def test_a_forgotten_finding_leaves_every_read_and_its_record_stays(
    store: memory.MemoryStore, synced: bool
) -> None:
    with store.session(scope="desk", flow="notes") as s:
        old = s.learn(OLD)
        keep = s.learn(NEW)
    if synced:
        store.sync()
    assert _visible(store, old.key) == SHOWN
    with store.session(scope="desk", flow="cleanup") as s:
        forgotten = s.forget(old.key, reason="the fee changed")
        run_id = s.run_id
    assert (forgotten.key, forgotten.reason, forgotten.by) == (old.key, "the fee changed", None)
    assert forgotten.citation.run_id == run_id and forgotten.citation.stream == memory.RETIRE_STREAM

    assert _visible(store, old.key) == HIDDEN
    assert _visible(store, keep.key) == SHOWN
    assert not old.path.exists()
    retired = memory.retired_dir(store.db_path, "desk") / f"{old.key}.json"
    (record,) = store.open_journal().read(run_id, memory.RETIRE_STREAM)
    assert retired.read_bytes() == memory.render_retirement(record)
    assert record.payload == {
        "id": old.key,
        "scope": "desk",
        "flow": "cleanup",
        "reason": "the fee changed",
        "by": None,
        "forgottenMs": forgotten.forgotten_ms,
    }
    assert old.key in {r.key for r in _all_records(store) if r.stream == memory.STREAM}  # still journaled
    store.sync()
    assert _visible(store, old.key) == HIDDEN
    assert store.scopes() == ["desk"]
    assert memory.check_store(store) == []


def test_forgetting_twice_returns_the_first_and_writes_nothing(store: memory.MemoryStore) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
    with store.session(scope="desk") as s:
        first = s.forget(old.key, reason="wrong")
        again = s.forget(old.key, reason="still wrong")
    records = len(_all_records(store))
    runs = len(store.open_journal().runs())
    with store.session(scope="elsewhere") as later:
        third = later.forget(old.key, reason="a third time")
        assert later.state is memory.SessionState.NEW  # answered without a root run
    assert first == again == third
    assert (len(_all_records(store)), len(store.open_journal().runs())) == (records, runs)


def test_forgetting_an_unknown_key_is_a_coded_error_and_writes_nothing(store: memory.MemoryStore) -> None:
    with store.session(scope="desk") as s:
        s.learn(OLD)
    with store.session(scope="desk") as s, pytest.raises(memory.FindingUnknown) as caught:
        s.forget("f" * 32, reason="typo")
    assert caught.value.code == "memory_finding_unknown"
    assert caught.value.key == "f" * 32 and "f" * 32 in str(caught.value)
    assert len(store.open_journal().runs()) == 1
    assert not memory.retired_dir(store.db_path, "desk").exists()


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("nothex", "x"),
        ("A" * 32, "x"),
        (None, "x"),
        ("0" * 32, ""),
        ("0" * 32, "   "),
        ("0" * 32, "r" * 1025),
        ("0" * 32, None),
        ("0" * 32, "\ud800"),
    ],
)
def test_a_bad_key_or_reason_is_refused_before_anything_is_written(
    store: memory.MemoryStore, key: object, reason: object
) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
    with store.session(scope="desk") as s, pytest.raises(memory.ArgumentInvalid) as caught:
        s.forget(key if key != "0" * 32 else old.key, reason=reason)  # type: ignore[arg-type]
    assert caught.value.code == "memory_argument_invalid"
    assert len(store.open_journal().runs()) == 1
    assert _visible(store, old.key) == SHOWN


def test_a_finding_only_the_journal_holds_can_be_forgotten(store: memory.MemoryStore) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
    old.path.unlink()  # as on another host sharing the journal: no file, no row
    with store.session(scope="desk") as s:
        s.forget(old.key, reason="wrong")
    store.sync()
    assert _visible(store, old.key) == HIDDEN
    assert not old.path.exists()


# -- supersede ---------------------------------------------------------------------------------


@pytest.mark.parametrize("synced", [False, True], ids=["unsynced", "synced"])
def test_a_superseding_finding_replaces_the_old_one_in_recall_and_why_and_both_stay_journaled(
    store: memory.MemoryStore, synced: bool, backend_name: str
) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
    if synced:
        store.sync()
    with store.session(scope="desk") as s:
        new = s.learn(NEW, supersedes=old.key)
        run_id = s.run_id
    assert [e.key for e in store.recall(tag="fees")] == [new.key]
    assert [a.finding.key for a in store.why("swap fee")] == [new.key]
    assert store.get(old.key) is None and store.get(new.key) is not None
    streams = [(r.stream, r.key) for r in store.open_journal().read(run_id, memory.STREAM)]
    streams += [(r.stream, r.key) for r in store.open_journal().read(run_id, memory.RETIRE_STREAM)]
    commit = store.open_journal().read(run_id, memory.STREAM)[0]
    # on every journal (hosts shared or not) the new version's commit is the retirement: one record,
    # so no crash leaves the new version committed beside a live old one
    assert streams == [(memory.STREAM, new.key)]
    assert (commit.payload["supersedes"], commit.payload["supersedesScope"]) == (old.key, "desk")
    assert {r.key for r in _all_records(store) if r.stream == memory.STREAM} == {old.key, new.key}

    history = store.history(old.key)  # every version of the memory old.key began
    assert [(e.kind, e.key, e.by) for e in history] == [
        ("learned", old.key, None),
        ("learned", new.key, None),
        ("superseded", old.key, new.key),
    ]
    assert history[0].citation == old.citation
    assert history[2].citation == new.citation  # the retirement cites the commit that made it
    assert store.history(new.key) == history and {e.memory for e in history} == {old.key}
    with store.session(scope="desk") as s:
        answered = s.forget(old.key, reason="x")
    assert (answered.by, answered.reason) == (new.key, f"superseded by {new.key}")
    store.sync()
    assert [e.key for e in store.recall(tag="fees")] == [new.key]


def test_supersede_refuses_an_unknown_a_malformed_or_its_own_key_and_writes_nothing(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
    before = _all_records(store)
    own = memory.finding_id("desk", memory.validate(NEW, "session"))
    cases: list[tuple[str, type[Exception]]] = [
        ("e" * 32, memory.FindingUnknown),
        ("x" * 32, memory.ArgumentInvalid),
        (own, memory.ArgumentInvalid),
    ]
    for key, error in cases:
        with store.session(scope="desk") as s, pytest.raises(error) as caught:
            s.learn(NEW, supersedes=key)
        assert "supersedes" in str(caught.value)
    assert _all_records(store) == before
    assert len(store.open_journal().runs()) == 1
    assert [p.stem for p in learned_files(store.db_path)] == [old.key]


# -- learning a retired finding ------------------------------------------------------------------


def test_learning_a_forgotten_finding_again_is_a_new_memory_and_the_forgotten_key_stays_forgotten(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
    with store.session(scope="desk") as s:
        s.forget(old.key, reason="wrong")
    with store.session(scope="desk") as s:
        again = s.learn(OLD)
        twice = s.learn(OLD)
    assert twice == again
    assert again.key != old.key
    assert again.key == memory.finding_id("desk", memory.validate(OLD, "session"), 1)
    record = store.open_journal().find(again.citation.run_id, memory.STREAM, again.key)
    assert record is not None and record.payload["revision"] == 1
    assert again.path.read_bytes() == memory.render(record)
    assert _visible(store, old.key) == HIDDEN
    assert _visible(store, again.key) == SHOWN
    assert store.get(again.key) is not None and store.get(again.key).revision == 1  # type: ignore[union-attr]
    store.sync()
    assert _visible(store, old.key) == HIDDEN
    assert _visible(store, again.key) == SHOWN
    found = store.get(again.key)
    assert found is not None and (found.synced, found.revision) == (True, 1)
    assert found.as_json()["revision"] == 1
    assert memory.check_store(store) == []


def test_each_forget_of_a_relearned_finding_gives_the_next_learn_the_next_revision(
    store: memory.MemoryStore,
) -> None:
    keys = []
    for n in range(3):
        with store.session(scope="desk") as s:
            learned = s.learn(OLD)
            keys.append(learned.key)
            s.forget(learned.key, reason=f"wrong {n}")
    item = memory.validate(OLD, "session")
    assert keys == [memory.finding_id("desk", item, n) for n in range(3)]
    assert store.recall() == []
    with store.session(scope="desk") as s:
        last = s.learn(OLD)
    assert last.key == memory.finding_id("desk", item, 3)
    assert [e.key for e in store.recall()] == [last.key]


def test_a_session_that_learns_forgets_and_learns_again_ends_with_a_new_live_memory(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
        s.forget(old.key, reason="wrong")
        again = s.learn(OLD)
    assert again.key != old.key
    assert [e.key for e in store.recall()] == [again.key]


def test_a_session_that_learned_a_finding_forgotten_elsewhere_learns_it_anew(
    store: memory.MemoryStore,
) -> None:
    s = store.session(scope="desk")
    old = s.learn(OLD)
    with store.session(scope="desk") as other:
        other.forget(old.key, reason="wrong")
    again = s.learn(OLD)
    s.close()
    assert again.key != old.key and again.citation.run_id == old.citation.run_id
    assert [e.key for e in store.recall()] == [again.key]
    assert not old.path.exists()


def test_a_resumed_attempt_replaying_a_learn_made_before_the_forget_gets_its_commit_back_unpublished(
    store: memory.MemoryStore,
) -> None:
    backend = store.open_journal()
    _, lease = backend.begin("resumable", "desk", {})
    first = memory.RootRun(backend, lease, "resumable", "desk")
    old = store.learn(OLD, first)
    backend.release(lease)
    with store.session(scope="desk") as other:
        other.forget(old.key, reason="wrong")
    records = _all_records(store)
    second = memory.RootRun(backend, backend.acquire(lease.run_id), "resumable", "desk")
    replayed = store.learn(OLD, second)  # the resumed body re-running its learn
    assert replayed == old
    assert store.learn(OLD, second) == old  # and again: still the replay
    assert _all_records(store) == records
    assert not old.path.exists()
    assert store.recall() == []
    assert store.forget(old.key, second, reason="again") is not None  # the body's forget, answered
    anew = store.learn(OLD, second)  # after its own forget, the body's learn is a new memory
    assert anew.key != old.key
    assert [e.key for e in store.recall()] == [anew.key]


# -- history ---------------------------------------------------------------------------------


def test_history_lists_learned_forgotten_and_expired_oldest_first_with_citations(
    store: memory.MemoryStore, clock: Clock
) -> None:
    expires = clock.now + 50_000
    with store.session(scope="desk") as s:
        learned = s.learn({**OLD, "expiresMs": expires})
    assert [e.kind for e in store.history(learned.key)] == ["learned"]
    with store.session(scope="desk") as s:
        forgotten = s.forget(learned.key, reason="wrong")
    clock.now += 100_000
    events = store.history(learned.key)
    assert [e.kind for e in events] == ["learned", "forgotten", "expired"]
    assert [e.at_ms for e in events] == sorted(e.at_ms for e in events)
    assert events[0].citation == learned.citation
    assert (events[1].citation, events[1].reason) == (forgotten.citation, "wrong")
    assert (events[2].at_ms, events[2].citation) == (expires, learned.citation)
    body = events[1].as_json()
    assert body == {
        "kind": "forgotten",
        "memoryId": learned.key,
        "key": learned.key,
        "atMs": forgotten.forgotten_ms,
        "citation": forgotten.citation.as_json(),
        "reason": "wrong",
        "by": None,
        "flow": "session",
        "content": None,
    }
    with pytest.raises(memory.FindingUnknown):
        store.history("a" * 32)
    with pytest.raises(memory.ArgumentInvalid):
        store.history("nope")


# -- the limit after the merge ------------------------------------------------------------------


def test_rows_a_retired_file_names_before_any_sync_leave_the_limit_full(store: memory.MemoryStore) -> None:
    with store.session(scope="desk") as s:
        learned = [s.learn({"text": f"note {i}", "tags": ["n"]}) for i in range(6)]
    store.sync()
    with store.session(scope="desk") as s:
        s.forget(learned[5].key, reason="x")
        s.forget(learned[4].key, reason="x")
    expected = [learned[3].key, learned[2].key, learned[1].key]
    assert [e.key for e in store.recall(limit=3)] == expected
    assert [e.key for e in store.recall(tag="n", limit=3)] == expected
    store.sync()
    assert [e.key for e in store.recall(limit=3)] == expected


# -- nothing brings a retired finding back -------------------------------------------------------


def _lose_retired_file(store: memory.MemoryStore, key: str, scope: str = "desk") -> Path:
    """As if the forgetter died after its commit, before its retired file was published."""
    path = memory.retired_dir(store.db_path, scope) / f"{key}.json"
    path.unlink()
    return path


def test_sync_and_materialize_never_republish_a_forgotten_finding(store: memory.MemoryStore) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
    with store.session(scope="desk") as s:
        s.forget(old.key, reason="wrong")
    retired = _lose_retired_file(store, old.key)
    assert store.materialize() == 1  # the retired file, and not the learned one
    assert retired.exists() and not old.path.exists()
    _lose_retired_file(store, old.key)
    report = store.sync()
    assert (report.materialized, report.ingested) == (1, 0)
    assert _visible(store, old.key) == HIDDEN
    assert not old.path.exists()


def test_a_synced_retirement_keeps_hiding_the_row_if_its_retired_file_is_lost(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
    store.sync()
    with store.session(scope="desk") as s:
        s.forget(old.key, reason="wrong")
    store.sync()
    shutil.rmtree(memory.retired_dir(store.db_path, "desk"))
    assert _visible(store, old.key) == HIDDEN


def test_check_reports_and_repair_removes_a_learned_file_of_a_forgotten_finding(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
    original = old.path.read_bytes()
    with store.session(scope="desk") as s:
        s.forget(old.key, reason="wrong")
    old.path.write_bytes(original)  # a file published for the forgotten finding (a crash, a restore)
    assert _visible(store, old.key) == HIDDEN  # its retired file keeps it out of every read
    retired = memory.retired_dir(store.db_path, "desk") / f"{old.key}.json"
    retired_bytes = retired.read_bytes()
    retired.unlink()
    records = _all_records(store)

    problems = memory.check_store(store)
    assert {(p.kind, Path(p.path).name) for p in problems} == {
        ("learned_forgotten", old.path.name),
        ("retirement_unpublished", retired.name),
    }
    memory.repair_store(store, problems)
    assert memory.check_store(store) == []
    assert not old.path.exists() and retired.read_bytes() == retired_bytes
    assert len(list((store.db_path.parent / memory.QUARANTINE_DIR).rglob(old.path.name))) == 1
    assert _all_records(store) == records  # the journal untouched
    assert _visible(store, old.key) == HIDDEN


def test_check_repairs_a_damaged_retired_file_from_its_record(store: memory.MemoryStore) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
        s.forget(old.key, reason="wrong")
    retired = memory.retired_dir(store.db_path, "desk") / f"{old.key}.json"
    good = retired.read_bytes()
    retired.write_bytes(b"{not json")
    with pytest.raises(memory.Unreachable, match="retired file"):
        store.recall()  # a damaged marker fails reads closed rather than let the finding through
    (problem,) = memory.check_store(store)
    assert problem.kind == "retired_damaged"
    memory.repair_store(store, [problem])
    assert retired.read_bytes() == good
    assert _visible(store, old.key) == HIDDEN


def test_resume_never_brings_back_a_finding_forgotten_after_its_commit(
    db: Path, clock: Clock, journal_location: str, tmp_path: Path
) -> None:
    flow_file = tmp_path / "fees.py"
    flow_file.write_text(
        "import os\nimport flows\n\n\n"
        "@flows.flow(scope='desk')\n"
        "async def body(f):\n"
        f"    await f.memory.learn({OLD!r})\n"
        "    await f.memory.learn({'text': 'the pool is deep'})\n"
        "    if os.environ.get('FEES_FAIL'):\n"
        "        raise RuntimeError('the first attempt dies here')\n"
    )
    os.environ["FEES_FAIL"] = "1"
    try:
        first = flows.run(flow_file, db=db, journal_location=journal_location)
    finally:
        del os.environ["FEES_FAIL"]
    assert first.state is RunState.FAILED
    with memory.MemoryStore(db, journal=journal_location, clock=clock) as store:
        key = memory.finding_id("desk", memory.validate(OLD, "fees"))
        with store.session(scope="desk") as s:
            s.forget(key, reason="wrong")
        _lose_retired_file(store, key)  # and the forgetter died before publishing its retired file
        result = flows.resume(first.run_id, store=store)
        assert result.ok, result.error
        assert _visible(store, key) == HIDDEN
        assert not (memory.learned_dir(db, "desk") / f"{key}.json").exists()
        assert memory.check_store(store) == []
        assert [e.text for e in store.recall()] == ["the pool is deep"]


def test_a_flow_forgets_and_supersedes_through_f_memory(db: Path, tmp_path: Path) -> None:
    with memory.MemoryStore(db) as store, store.session(scope="desk") as s:
        old = s.learn(OLD)
        stale = s.learn({"text": "gas is cheap at noon"})

    async def body(f: flows.FlowContext) -> None:
        gone = await f.memory.forget(stale.key, reason="not any more")
        assert gone.key == stale.key
        await f.memory.learn(NEW, supersedes=old.key)

    result = flows.run(flows.flow(name="fixer", scope="desk")(body), db=db)
    assert result.ok, result.error
    with memory.MemoryStore(db) as store:
        assert [e.text for e in store.recall()] == [NEW["text"]]

    async def careless(f: flows.FlowContext) -> None:
        f.memory.forget(old.key, reason="twice")

    failed = flows.run(flows.flow(name="careless", scope="desk")(careless), db=db)
    assert isinstance(failed.error, flows.UnawaitedStep)
    assert failed.error.steps == (f"forget#1 '{old.key}'",)


def test_the_retired_file_is_a_pure_function_of_its_record(
    store: memory.MemoryStore, backend_name: str
) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
        new = s.learn(NEW, supersedes=old.key)
        run_id = s.run_id
    # the new version's commit retires the old one (on a journal hosts share too)
    record = store.open_journal().read(run_id, memory.STREAM)[-1]
    assert store.open_journal().read(run_id, memory.RETIRE_STREAM) == []
    forgotten_ms = record.payload["learnedMs"]
    path = memory.retired_dir(store.db_path, "desk") / f"{old.key}.json"
    body = orjson.loads(path.read_bytes())
    assert body == {
        "id": old.key,
        "scope": "desk",
        "flow": "session",
        "reason": None,
        "by": new.key,
        "forgottenMs": forgotten_ms,
        "journal": {"runId": run_id, "stream": record.stream, "id": record.id},
    }
    expected = path.read_bytes()
    path.unlink()  # what --repair publishes again is the same bytes, from the same record
    assert [p.kind for p in memory.check_store(store)] == ["retirement_unpublished"]
    memory.repair_store(store, memory.check_store(store))
    assert path.read_bytes() == expected and memory.check_store(store) == []


@pytest.mark.parametrize("revision", [0, -1, "1", 1.0, True, 2**31])
def test_a_learned_file_with_a_malformed_or_wrong_revision_is_damaged(
    store: memory.MemoryStore, revision: object
) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
        s.forget(old.key, reason="wrong")
        again = s.learn(OLD)
    body = orjson.loads(again.path.read_bytes())
    body["revision"] = revision
    again.path.write_bytes(orjson.dumps(body, option=orjson.OPT_SORT_KEYS) + b"\n")
    with pytest.raises(memory.Unreachable) as caught:
        memory.parse_learned(again.path, again.path.read_bytes())
    assert caught.value.code == "memory_unreachable"


def test_a_learn_record_whose_revision_does_not_hash_to_its_key_is_journal_corrupt(
    store: memory.MemoryStore,
) -> None:
    with store.session(scope="desk") as s:
        old = s.learn(OLD)
        s.forget(old.key, reason="wrong")
        again = s.learn(OLD)
    record = store.open_journal().find(again.citation.run_id, memory.STREAM, again.key)
    assert record is not None
    assert memory.checked_commit(record, "j") is record
    for bad in (2, 0, "1"):
        forged = journal.Record(**{**record.__dict__, "payload": {**record.payload, "revision": bad}})
        with pytest.raises(journal.JournalCorrupt):
            memory.checked_commit(forged, "j")


@pytest.mark.parametrize("synced", [False, True], ids=["unsynced", "synced"])
def test_history_shows_the_content_of_every_version_and_who_made_each_change(
    store: memory.MemoryStore, synced: bool
) -> None:
    with store.session(scope="desk", flow="first") as s:
        old = s.learn({**OLD, "metadata": {"user": "u1"}})
    with store.session(scope="desk", flow="second") as s:
        new = s.learn(NEW, supersedes=old.key)
    if synced:
        store.sync()
    events = store.history(old.key)
    assert [(e.kind, e.flow) for e in events] == [
        ("learned", "first"),
        ("learned", "second"),
        ("superseded", "second"),
    ]
    assert events[0].content == {**OLD, "source": "first", "metadata": {"user": "u1"}}
    assert events[0].as_json()["content"] == {**OLD, "source": "first", "metadata": {"user": "u1"}}
    assert events[2].content is None and events[2].by == new.key
    assert (events[1].key, events[1].content) == (new.key, {**NEW, "source": "second"})
    assert store.history(new.key) == events


def test_history_without_the_journal_shows_the_content_the_db_holds(
    store: memory.MemoryStore, tmp_path: Path
) -> None:
    with store.session(scope="desk", flow="first") as s:
        old = s.learn(OLD)
    store.sync()
    with memory.MemoryStore(store.db_path, journal=str(tmp_path / "another-journal")) as bare:
        (event,) = bare.history(old.key)
    assert (event.kind, event.flow, event.content) == ("learned", "first", {**OLD, "source": "first"})


# -- which commit is published ---------------------------------------------------------------


def _two_runs_commit_one_finding(
    store: memory.MemoryStore,
) -> tuple[journal.Lease, memory.Learned, memory.Learned]:
    """An older root run and a newer session each commit ``OLD``; the older one's lease is let go,
    as a crashed run's would be."""
    backend = store.open_journal()
    _, lease = backend.begin("resumable", "desk", {})
    older = store.learn({**OLD, "source": "s"}, memory.RootRun(backend, lease, "resumable", "desk"))
    backend.release(lease)
    with store.session(scope="desk", source="s") as s:
        newer = s.learn(OLD)
    assert newer.key == older.key and newer.learned_ms > older.learned_ms
    return lease, older, newer


def test_resuming_an_older_root_leaves_the_newer_commit_of_its_finding_published(
    store: memory.MemoryStore,
) -> None:
    lease, older, newer = _two_runs_commit_one_finding(store)
    newest = newer.path.read_bytes()
    backend = store.open_journal()
    resumed = memory.RootRun(backend, backend.acquire(lease.run_id), "resumable", "desk")
    assert store.republish_run(backend, lease.run_id) == 0
    assert newer.path.read_bytes() == newest
    assert store.learn({**OLD, "source": "s"}, resumed) == older  # the body's re-learn: its own commit
    assert newer.path.read_bytes() == newest
    assert memory.check_store(store) == []
    store.sync()
    (found,) = store.recall()
    assert found.citation == newer.citation


def test_check_reports_a_file_holding_an_older_commit_and_repair_publishes_the_newest(
    store: memory.MemoryStore,
) -> None:
    _, older, newer = _two_runs_commit_one_finding(store)
    record = store.open_journal().find(older.citation.run_id, memory.STREAM, older.key)
    assert record is not None
    newer.path.write_bytes(memory.render(record))  # what a resume published before the rule held
    (problem,) = memory.check_store(store)
    assert (problem.kind, problem.path) == ("learned_stale", str(newer.path))
    memory.repair_store(store, [problem])
    assert memory.check_store(store) == []
    assert orjson.loads(newer.path.read_bytes())["journal"]["runId"] == newer.citation.run_id


def test_an_emptied_forget_stream_is_reported_and_its_retired_file_is_never_moved(tmp_path: Path) -> None:
    # a memory-forget stream cut to nothing below its durable mark: the listing of the run's
    # streams skips an empty file, so check reads the memory's streams by name; it reports the
    # damage, never calls the retired file unjournaled, and --repair leaves it (the finding stays
    # forgotten) rather than moving it aside and bringing the finding back
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        with store.session(scope="s", flow="learner") as s:
            gone = s.learn({"text": "a finding to forget"})
            kept = s.learn({"text": "a finding to keep"})
        with store.session(scope="s", flow="forgetter") as s:
            s.forget(gone.key, reason="wrong")
        backend = store.open_journal()
        (run,) = [r for r in backend.runs() if r.flow == "forgetter"]
        backend.stream_path(run.run_id, memory.RETIRE_STREAM).write_bytes(b"")
    with memory.MemoryStore(db) as store:
        problems = memory.check_store(store)
        kinds = {p.kind for p in problems}
        assert "stream_corrupt" in kinds and "retired_unjournaled" not in kinds
        assert "retired_unverified" in kinds
        memory.repair_store(store, problems)
        assert [e.key for e in store.recall(limit=None)] == [kept.key]
