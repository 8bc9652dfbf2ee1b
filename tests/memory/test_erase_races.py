"""Erasure racing other writers. An erase promises that once it returns no byte of the memory's
content is anywhere the store writes; these tests force the interleavings in which another writer
(a learn of the very content, in another store object and run) had looked for the key's retirement
before the erase's forget and commits after it, on either journal."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import memory
from tests._helpers.embedders import hashed_words
from tests.memory.conftest import Clock
from tests.memory.test_erase import MARK, _files_holding, _pg_rows_holding, _store


def _finding() -> dict[str, Any]:
    return {"text": f"hana's address {MARK}", "tags": [f"{MARK}t"], "source": "crm"}


def test_a_learn_that_looked_before_the_erase_and_commits_after_it_is_refused_and_erased(
    tmp_path: Path, journal_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The racer's learn checked that the key was not retired, then the whole erase ran and returned,
    # then the racer's commit is appended: the erased text must not come back in its commit, a
    # learned file or the DB. The learn is refused (its key was erased while it was written) and
    # its commit is a tombstone before it returns.
    store = _store(tmp_path, journal_location)
    with store.session(scope="users", flow="first") as s:
        key = s.learn(_finding()).key
    other = memory.MemoryStore(store.db_path, journal=journal_location, clock=Clock(start=1_700_000_000_500))
    real = other._learner._revision
    erased: list[memory.Erased] = []

    def looked_then_erased(item: Any, root: Any) -> Any:
        got = real(item, root)
        assert got[1] == key  # not retired yet: the learn takes the same key
        with store.session(scope="privacy") as s2:
            erased.append(s2.erase(key, reason="hana asked"))
        return got

    monkeypatch.setattr(other._learner, "_revision", looked_then_erased)
    with other.session(scope="users", flow="racer") as s3, pytest.raises(memory.FindingRetired) as caught:
        s3.learn(_finding())
    assert "erased" in caught.value.message
    assert erased and erased[0].rewritten == 1
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    for each in (other, store):
        each.sync()
        assert each.recall(scope="users", limit=None) == []
        assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    assert memory.check_store(store) == []
    monkeypatch.undo()
    with other.session(scope="users", flow="later") as s4:  # learnt afresh: a new memory, a new key
        assert s4.learn(_finding()).key != key
    other.close()
    store.close()


def _two_hosts_one_paused_after_its_look(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[memory.MemoryStore, str, memory.MemoryStore, threading.Event, threading.Event]:
    """Host B's store, which has learned the finding (its key), and host A's, whose next learn
    sets ``looked`` once it has looked at its key and waits for ``go`` before it goes on."""
    store = memory.MemoryStore(tmp_path / "b" / "history.db", journal=postgres_dsn, clock=Clock())
    with store.session(scope="users", flow="first") as s:
        key = s.learn(_finding()).key
    other = memory.MemoryStore(
        tmp_path / "a" / "history.db", journal=postgres_dsn, clock=Clock(start=1_700_000_000_500)
    )
    looked, go = threading.Event(), threading.Event()
    real_revision = other._learner._revision

    def look_then_wait(item: Any, root: Any) -> Any:
        got = real_revision(item, root)
        looked.set()
        assert go.wait(60)
        return got

    monkeypatch.setattr(other._learner, "_revision", look_then_wait)
    return store, key, other, looked, go


def test_a_learn_that_commits_between_the_erases_look_and_its_record_is_erased_by_the_erase(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The racer (host A) looked before the erase's forget (host B), and commits after the erase has
    # read the commits to erase but before its record: the racer finds no erase record to honour,
    # so the erase must find the commit itself, after its record. A learn's commit holds the
    # scope's turn among the hosts shared, which the erase holds (the next test): here the racer's
    # commit takes no turn, the net under that rule (on one host a plain learn's share of its
    # scope's turn keeps it out the same way).
    import memory._erase as erase_module

    store, key, other, looked, go = _two_hosts_one_paused_after_its_look(tmp_path, postgres_dsn, monkeypatch)
    monkeypatch.setattr(other._learner, "hosts_journal", lambda: None)
    learned: list[memory.Learned] = []

    def racer() -> None:
        with other.session(scope="users", flow="racer") as s2:
            learned.append(s2.learn(_finding()))

    thread = threading.Thread(target=racer)
    real_payload = erase_module.audit_payload

    def racer_commits_first(*args: Any, **kwargs: Any) -> Any:
        go.set()
        thread.join(60)  # its run has ended: the erase may rewrite it
        return real_payload(*args, **kwargs)

    monkeypatch.setattr(erase_module, "audit_payload", racer_commits_first)
    thread.start()
    assert looked.wait(60)
    with store.session(scope="privacy") as s3:
        erased = s3.erase(key, reason="hana asked")
    assert not thread.is_alive() and learned and learned[0].key == key
    assert erased.rewritten == 2
    assert _pg_rows_holding(store, MARK) == 0 and _files_holding(tmp_path / "b", MARK) == []
    for host in (other, store):  # host A erases its derived copies on its next sync
        host.sync()
        assert host.recall(scope="users", limit=None) == []
        assert memory.check_store(host) == []
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    other.close()
    store.close()


def test_a_learn_on_one_host_released_during_anothers_erase_commits_after_it_and_is_erased(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As above, but the racer's commit holds the scope's turn among the hosts shared: released
    # while the erase (host B) holds that turn, between its look at the commits and its record, it
    # waits (read from the server's lock table) and commits after the erase's record, which it
    # then honours: refused, its commit erased.
    import memory._erase as erase_module
    from tests.postgres.test_turns import _waiting

    store, key, other, looked, go = _two_hosts_one_paused_after_its_look(tmp_path, postgres_dsn, monkeypatch)
    outcome: list[object] = []

    def racer() -> None:
        with other.session(scope="users", flow="racer") as s2:
            try:
                outcome.append(s2.learn(_finding()))
            except memory.FindingRetired as exc:
                outcome.append(exc)

    thread = threading.Thread(target=racer)
    real_payload = erase_module.audit_payload
    waited: list[bool] = []

    def racer_released_in_the_erase(*args: Any, **kwargs: Any) -> Any:
        go.set()
        while not _waiting(postgres_dsn, "memory-scope:users"):  # bounded by the join below
            assert thread.is_alive() and not outcome, "the racer committed inside the erase's turn"
            threading.Event().wait(0.01)
        waited.append(True)
        return real_payload(*args, **kwargs)

    monkeypatch.setattr(erase_module, "audit_payload", racer_released_in_the_erase)
    thread.start()
    assert looked.wait(60)
    with store.session(scope="privacy") as s3:
        erased = s3.erase(key, reason="hana asked")
    thread.join(60)
    assert not thread.is_alive() and waited and erased.rewritten == 1
    assert len(outcome) == 1 and isinstance(outcome[0], memory.FindingRetired)
    for host in (other, store):
        host.sync()
        assert host.recall(scope="users", limit=None) == []
        assert memory.check_store(host) == []
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    other.close()
    store.close()


def test_a_learn_on_one_host_that_looked_before_anothers_erase_is_refused_and_erased(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same race across two hosts sharing a PostgreSQL journal: host A's learn sees no retired
    # file of its own after its commit (B's forget published B's), so it asks the journal's
    # retirements, and honours B's erase.
    a = memory.MemoryStore(tmp_path / "a" / "history.db", journal=postgres_dsn, clock=Clock())
    b = memory.MemoryStore(
        tmp_path / "b" / "history.db", journal=postgres_dsn, clock=Clock(start=1_700_000_000_500)
    )
    with b.session(scope="users", flow="first") as s:
        key = s.learn(_finding()).key
    real = a._learner._revision

    def looked_then_erased_on_b(item: Any, root: Any) -> Any:
        got = real(item, root)
        assert got[1] == key
        with b.session(scope="privacy") as s2:
            s2.erase(key, reason="hana asked")
        return got

    monkeypatch.setattr(a._learner, "_revision", looked_then_erased_on_b)
    with a.session(scope="users", flow="racer") as s3, pytest.raises(memory.FindingRetired):
        s3.learn(_finding())
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(b, MARK) == 0
    for host in (a, b):
        host.sync()
        assert host.recall(scope="users", limit=None) == []
        assert memory.check_store(host) == []
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(b, MARK) == 0
    a.close()
    b.close()


@pytest.mark.parametrize("read", ["why", "recall", "get", "current"])
def test_a_read_that_listed_an_unsynced_finding_erased_before_it_was_served_answers_without_it(
    tmp_path: Path, journal_location: str, monkeypatch: pytest.MonkeyPatch, read: str
) -> None:
    # A read lists an unsynced finding's file, then another store erases it (file gone, commit a
    # tombstone) before the read checks the file against its commit: the read answers as if it had
    # begun after the erase, never with memory_unreachable.
    writer = _store(tmp_path, journal_location)
    with writer.session(scope="users", flow="first") as s:
        key = s.learn(_finding()).key
        kept = s.learn({"text": "hana's favourite colour is green"}).key
    reader = memory.MemoryStore(
        writer.db_path, journal=journal_location, clock=Clock(start=1_800_000_000_000)
    )
    real = reader._citations.check
    done: list[bool] = []

    def erased_first(entry: Any, path_of: Any) -> None:
        if not done:  # before the first check reads the run's commits
            done.append(True)
            with writer.session(scope="privacy") as s2:
                s2.erase(key, reason="hana asked")
        real(entry, path_of)

    monkeypatch.setattr(reader._citations, "check", erased_first)
    if read == "why":
        assert [x.finding.key for x in reader.why("hana")] == [kept]
    elif read == "recall":
        assert [e.key for e in reader.recall(scope="users")] == [kept]
    elif read == "get":
        assert reader.get(key) is None
    else:
        assert reader.current(key) is None
    assert done
    reader.close()
    writer.close()


class _ForgetsWhileEmbedding:
    """A toy embedder (each word hashed into a bucket) that runs ``act`` once, the first time it is
    asked to embed a text holding ``door``: a forget made while a search embeds its candidates."""

    name = "toy@1"
    dims = 32

    def __init__(self, act: Any) -> None:
        self.act = act

    def embed(self, texts: Any) -> list[list[float]]:
        if self.act is not None and any("door" in t for t in texts):
            act, self.act = self.act, None
            act()
        return hashed_words(texts, self.dims)


@pytest.mark.parametrize("hosts", [1, 2])
def test_a_forget_of_an_unsynced_finding_while_a_search_embeds_it_leaves_no_answer_and_no_vector(
    tmp_path: Path, postgres_dsn: str, hosts: int
) -> None:
    # The search lists the finding, the forget (on this host or another) lands while its vector is
    # derived: the answer leaves it out, and its vector is kept by no host once that host has synced
    # (on this host at once: the search sees the file gone after storing the vector)
    import sqlite3

    from memory._vectors import vectors_path

    b = memory.MemoryStore(tmp_path / "b" / "history.db", journal=postgres_dsn, clock=Clock())
    with b.session(scope="team") as s:
        key = s.learn({"text": "the door code is 4711"}).key
        other = s.learn({"text": "the door is blue"}).key

    def forget() -> None:
        with b.session(scope="team") as s2:
            s2.forget(key, reason="rotated")

    db = tmp_path / ("a" if hosts == 2 else "b") / "history.db"
    racing = _ForgetsWhileEmbedding(forget)
    a = memory.MemoryStore(db, journal=postgres_dsn, clock=Clock(start=1_800_000_000_000), embedder=racing)
    if hosts == 2:
        a.materialize()
    assert [x.finding.key for x in a.why("door code", mode="semantic")] == [other]
    if hosts == 2:
        a.sync()  # another host's forget reaches this host's copies (file, vector) at its sync
    assert memory.check_store(a) == []
    with sqlite3.connect(vectors_path(a.db_path)) as conn:
        assert [k for (k,) in conn.execute("select key from vectors")] == [other]
    a.close()
    b.close()


def test_a_forget_by_filter_that_listed_before_an_erase_and_commits_after_it_keeps_no_erased_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A forget by filter names its filter in its record, and the filter's metadata is a value the
    # erased finding held. An erase started (another store, another thread) after the forget listed
    # the finding and before its record: the forget looks and writes holding the scope's turn,
    # which the erase takes too, so the erase comes after the record, finds it and rewrites it
    # without the value (before the forget held the turn on a file journal, the erase came first
    # and the forget's own rewrite dropped the value). Either way the journal must not keep that
    # value next to the erased key.
    journal_location = str(tmp_path / "journal")
    store = _store(tmp_path, journal_location)
    with store.session(scope="users", flow="first") as s:
        key = s.learn({"text": "hana's address", "metadata": {"user": f"{MARK}@example.com"}}).key
    other = memory.MemoryStore(store.db_path, journal=journal_location, clock=Clock(start=1_700_000_000_500))
    real = other._retirer.forget_many
    erasing: list[threading.Thread] = []
    failed: list[BaseException] = []

    def erase() -> None:
        try:
            with store.session(scope="privacy") as s2:
                s2.erase(key, reason="hana asked")
        except BaseException as exc:  # reported by the test
            failed.append(exc)

    def erase_begins(root: Any, ids: Any, **kwargs: Any) -> Any:
        assert [k for k, _ in ids] == [key]
        erasing.append(threading.Thread(target=erase))
        erasing[0].start()
        return real(root, ids, **kwargs)

    monkeypatch.setattr(other._retirer, "forget_many", erase_begins)
    with other.session(scope="users", flow="racer") as s3:
        s3.forget_where(reason="hana left", meta={"user": f"{MARK}@example.com"})
    erasing[0].join(120)
    assert not erasing[0].is_alive() and failed == []
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    assert memory.check_store(store) == []
    other.close()
    store.close()


@pytest.mark.parametrize("materialize", [True, False])
def test_a_sync_that_read_a_file_before_an_erase_and_writes_its_row_after_keeps_no_content(
    tmp_path: Path, journal_location: str, monkeypatch: pytest.MonkeyPatch, materialize: bool
) -> None:
    # A sync reads an unsynced finding's file, the erase (another store) runs and returns, then the
    # sync writes the finding's row: the row (and its pages in the DB's write-ahead log) must not
    # outlive the sync, also for a sync that materializes nothing (the LangGraph store's)
    store = _store(tmp_path, journal_location)
    with store.session(scope="users", flow="first") as s:
        key = s.learn(_finding()).key
    syncer = memory.MemoryStore(store.db_path, journal=journal_location, clock=Clock(start=1_800_000_000_000))
    real = syncer._syncer._files

    def files_then_erase() -> Any:
        read = real()
        with store.session(scope="privacy") as s2:
            s2.erase(key, reason="hana asked")
        return read

    monkeypatch.setattr(syncer._syncer, "_files", files_then_erase)
    syncer.sync(materialize=materialize)
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    assert memory.check_store(store) == []
    syncer.close()
    store.close()


def test_a_learn_whose_stage_the_erase_removed_before_its_commit_is_refused_and_erased(
    tmp_path: Path, journal_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The racer has looked and staged its file; the whole erase runs (and removes the racer's stage,
    # which holds the key) before the racer's commit is appended: the publish then fails, and the
    # commit must not keep the erased text behind that failure.
    store = _store(tmp_path, journal_location)
    with store.session(scope="users", flow="first") as s:
        key = s.learn(_finding()).key
    other = memory.MemoryStore(store.db_path, journal=journal_location, clock=Clock(start=1_700_000_000_500))
    backend = other.open_journal()
    real = backend.append
    done: list[bool] = []

    def erase_then_append(lease: Any, stream: str, payload: Any, **kwargs: Any) -> Any:
        if stream == memory.STREAM and not done:
            done.append(True)
            with store.session(scope="privacy") as s2:
                s2.erase(key, reason="hana asked")
        return real(lease, stream, payload, **kwargs)

    monkeypatch.setattr(backend, "append", erase_then_append)
    with other.session(scope="users", flow="racer") as s3, pytest.raises(memory.FindingRetired):
        s3.learn(_finding())
    assert done
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    other.close()
    store.close()
