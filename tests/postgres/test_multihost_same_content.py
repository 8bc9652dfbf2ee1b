"""A learn on one host and an update on another giving a memory the same content.

A key is one memory's. An update on host B whose new version has the content that a learn on host
A holds (a finding of another memory) takes the next revision's key, whether or not B has synced
A's learn: B looks for the key in every run's commits, in the scope's turn among the hosts, and
A's commit holds that turn shared, so it lands before B's look or after B's commit. Before, B took
A's key while it had not synced: A's memory then read as B's, and B's next update retired it.

The other way round, a plain learn on A of what B's update made the live version of B's memory is
that version again, as on one host: A's commit names B's memory (the append finds B's commit of the
key), whether or not A has synced it. Before, A's commit named none, it was the newest commit of the
key, and after a sync both hosts listed the version as a memory of its own: B's memory had lost it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

import memory
from journal import JournalCorrupt
from tests._helpers.hosts import two_hosts
from tests.postgres.test_turns import _waiting

MONDAY, TUESDAY, WEDNESDAY = (f"the meeting is on {day}" for day in ("monday", "tuesday", "wednesday"))


def _live(store: memory.MemoryStore) -> list[tuple[str, str, str]]:
    store.sync()
    return sorted((e.memory or e.key, e.key, e.text) for e in store.recall(scope="team"))


def _updated_on_b(b: memory.MemoryStore) -> tuple[str, memory.Learned]:
    """Host B's memory learned on monday, then updated to tuesday: its id and the update's answer."""
    with b.session(scope="team") as s:
        m2 = s.learn({"text": MONDAY}).memory_id
    with b.session(scope="team") as s:
        return m2, s.update(m2, {"text": TUESDAY})


def test_an_update_on_b_never_takes_the_key_of_what_a_learned_unsynced(
    tmp_path: Path, postgres_dsn: str
) -> None:
    a, b = two_hosts(tmp_path, postgres_dsn)
    with b.session(scope="team") as s:
        m2 = s.learn({"text": MONDAY}).memory_id
    with a.session(scope="team") as s:
        theirs = s.learn({"text": TUESDAY})
    assert theirs.memory_id == theirs.key
    with b.session(scope="team") as s:  # B has not synced A's learn
        mine = s.update(m2, {"text": TUESDAY})
    assert mine.memory_id == m2 and mine.key != theirs.key  # the next revision's key
    with b.session(scope="team") as s:
        later = s.update(m2, {"text": WEDNESDAY})
    for store in (a, b):
        # A's memory stands, untouched by B's updates of its own memory; B's is at its last version
        assert _live(store) == sorted([(theirs.key, theirs.key, TUESDAY), (m2, later.key, WEDNESDAY)])
        now = store.current(theirs.memory_id)
        assert now is not None and (now.key, now.text) == (theirs.key, TUESDAY)
        assert [(e.kind, e.key) for e in store.history(theirs.memory_id)] == [("learned", theirs.key)]
        assert theirs.key not in {e.key for e in store.history(m2)}
        assert memory.check_store(store) == []
    a.close()
    b.close()


def test_a_learn_on_a_waits_while_an_update_on_b_is_between_its_look_and_its_commit(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = two_hosts(tmp_path, postgres_dsn)
    with b.session(scope="team") as s:
        m2 = s.learn({"text": MONDAY}).memory_id
    looked, go = threading.Event(), threading.Event()
    look = b._learner._held_by_hosts  # the update's look at the key among the hosts

    def held_by_hosts(fid: str) -> set[str]:
        found = look(fid)
        looked.set()
        assert go.wait(60)  # B's update holds the scope's turn among the hosts, the key unseen
        return found

    monkeypatch.setattr(b._learner, "_held_by_hosts", held_by_hosts)
    answers: dict[str, Any] = {}

    def update() -> None:
        with b.session(scope="team") as s:
            answers["b"] = s.update(m2, {"text": TUESDAY})

    def learn() -> None:
        with a.session(scope="team") as s:
            answers["a"] = s.learn({"text": TUESDAY})

    updater = threading.Thread(target=update, daemon=True)
    updater.start()
    assert looked.wait(60)
    learner = threading.Thread(target=learn, daemon=True)
    learner.start()
    # A's commit waits for the turn B holds (read from the server's lock table, not a clock); before,
    # it committed A's memory under the key B had just found free, and B's update then took it too
    deadline = time.monotonic() + 30
    while not _waiting(postgres_dsn, "memory-scope:team") and "a" not in answers:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert "a" not in answers, "A's learn committed while B's update was between its look and its commit"
    go.set()
    for thread in (updater, learner):
        thread.join(60)
        assert not thread.is_alive()
    # B committed first: A's learn, after it, learned what B's memory holds (as on one host: the
    # same version again), and is answered with that key and that memory
    assert answers["b"].memory_id == m2 and answers["a"].key == answers["b"].key
    assert answers["a"].memory_id == m2
    seen = [_live(store) for store in (a, b)]
    assert seen[0] == seen[1] == [(m2, answers["b"].key, TUESDAY)]
    for store in (a, b):
        assert memory.check_store(store) == []
    a.close()
    b.close()


def test_a_learn_on_a_of_what_an_update_on_b_made_live_is_that_memorys_version_synced_or_not(
    tmp_path: Path, postgres_dsn: str
) -> None:
    a, b = two_hosts(tmp_path, postgres_dsn)
    m2, mine = _updated_on_b(b)
    with a.session(scope="team") as s:  # A has not synced B's update
        theirs = s.learn({"text": TUESDAY})
    assert (theirs.key, theirs.memory_id) == (mine.key, m2)  # the same version of B's memory
    for store in (a, b):  # before a sync and after it, on both hosts
        assert [(e.memory, e.key) for e in store.recall(scope="team")] == [(m2, mine.key)]
        assert _live(store) == [(m2, mine.key, TUESDAY)]
    with a.session(scope="team") as s:  # an update by the memory id A was answered with
        later = s.update(theirs.memory_id, {"text": WEDNESDAY})
    assert later.memory_id == m2
    for store in (a, b):
        assert _live(store) == [(m2, later.key, WEDNESDAY)]
        assert {e.memory or e.key for e in store.history(m2)} == {m2}
        assert memory.check_store(store) == []
    a.close()
    b.close()


def test_a_learn_whose_key_another_hosts_crafted_commit_names_fails_closed(
    tmp_path: Path, postgres_dsn: str
) -> None:
    # The commit another run holds of the key is read back untrusted: one whose payload is not a
    # commit's (crafted, or damaged) fails the learn with journal_corrupt naming its run, and
    # nothing is committed for it here.
    import psycopg

    a, b = two_hosts(tmp_path, postgres_dsn)
    _, mine = _updated_on_b(b)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "update journal_records set payload = %s where key = %s", ('{"memory":"nobody"}', mine.key)
        )
    with a.session(scope="team") as s, pytest.raises(JournalCorrupt) as err:
        s.learn({"text": TUESDAY})
    assert err.value.code == "journal_corrupt" and err.value.run_id == mine.citation.run_id
    assert not list((tmp_path / "a").rglob(f"{mine.key}.json"))
    a.close()
    b.close()
