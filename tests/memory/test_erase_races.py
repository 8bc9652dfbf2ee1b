"""Erasure racing other writers. An erase promises that once it returns no byte of the memory's
content is anywhere the store writes; these tests force the interleavings in which another writer
(a learn of the very content, in another store object and run) had looked for the key's retirement
before the erase's forget and commits after it, on either journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import memory
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


def test_a_learn_that_commits_between_the_erases_look_and_its_record_is_erased_by_the_erase(
    tmp_path: Path, journal_location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The racer looked before the erase's forget, and commits after the erase has read the commits
    # to erase but before its record: the racer finds no erase record to honour, so the erase must
    # find the commit itself, after its record.
    import threading

    import memory._erase as erase_module

    store = _store(tmp_path, journal_location)
    with store.session(scope="users", flow="first") as s:
        key = s.learn(_finding()).key
    other = memory.MemoryStore(store.db_path, journal=journal_location, clock=Clock(start=1_700_000_000_500))
    looked, go = threading.Event(), threading.Event()
    real_revision = other._learner._revision

    def look_then_wait(item: Any, root: Any) -> Any:
        got = real_revision(item, root)
        looked.set()
        assert go.wait(60)
        return got

    monkeypatch.setattr(other._learner, "_revision", look_then_wait)
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
    assert _files_holding(tmp_path, MARK) == [] and _pg_rows_holding(store, MARK) == 0
    assert memory.check_store(store) == []
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
