"""Commits that become visible out of the order their transactions began in.

PostgreSQL hands out transaction ids when a transaction first writes, and a transaction with a
lower id may commit after one with a higher id. A reader that looks at the heads that moved "after"
what it saw last must not skip an append that was running at its look and commits later: the mark
``heads_changed`` hands back is its snapshot's ``xmin`` (the oldest transaction still running), not
the newest stamp it read. Within one run a stream's numbers are handed out under the run's row lock,
held until the append commits, so a reader reading "after number N" (``read_after``,
``read_streams_after``: the learn, forget and erase streams alike) never misses a number below one it
has read. Each test holds an append's transaction open on a connection of its own, deterministically.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest

import memory
from journal import Lease, payload_json, record_id
from journal.postgres import PostgresJournal
from memory._finding import (
    ERASE_STREAM,
    RETIRE_STREAM,
    STREAM,
    finding_id,
    learn_payload,
    retire_payload,
    validate,
)
from tests._helpers.hosts import host
from tests.postgres.conftest import OpenPg

_APPEND = "select o_status, o_seq from journal_append(%s, %s, %s, %s, %s, %s, %s)"


def new_record_id(run_id: str, stream: str, key: str | None) -> str:
    """A record's id as the journal draws it: derived from its key, else random."""
    return record_id(run_id, stream, key) if key is not None else secrets.token_hex(16)


def _held_append(
    dsn: str, lease: Lease, stream: str, payload: Mapping[str, Any], key: str | None = None
) -> psycopg.Connection[Any]:
    """A connection whose open transaction has taken an id (before whatever the caller commits
    next) and appended ``payload`` the way ``PostgresJournal.append`` does, uncommitted: the caller
    commits it (late) or rolls it back."""
    conn = psycopg.connect(dsn)
    conn.execute("select pg_current_xact_id()")  # the id is taken now: lower than any taken later
    status, _ = conn.execute(
        _APPEND,
        (
            lease.run_id,
            lease.epoch,
            stream,
            key,
            new_record_id(lease.run_id, stream, key),
            1_700_000_000_000,
            payload_json(payload).decode(),
        ),
    ).fetchone()
    assert status == "appended"
    return conn


@pytest.fixture
def held(postgres_dsn: str) -> Iterator[list[psycopg.Connection[Any]]]:
    conns: list[psycopg.Connection[Any]] = []
    yield conns
    for conn in conns:
        conn.close()


@pytest.mark.parametrize("stream", [STREAM, RETIRE_STREAM, ERASE_STREAM])
def test_a_look_after_a_later_commit_still_finds_an_earlier_transaction_committed_late(
    open_pg: OpenPg, postgres_dsn: str, held: list[psycopg.Connection[Any]], stream: str
) -> None:
    jr = open_pg()
    early, early_lease = jr.begin("early", "s", {})
    late, late_lease = jr.begin("late", "s", {})
    _, mark, _ = jr.heads_changed([stream], None)
    held.append(_held_append(postgres_dsn, early_lease, stream, {"n": "early"}))  # the lower id
    jr.append(late_lease, stream, {"n": "late"})  # a higher id, committed first
    found, mark, whole = jr.heads_changed([stream], mark)
    assert found == {stream: {late.run_id: 1}} and not whole
    held[0].commit()  # the lower id commits last
    # (a head may come back unmoved, here the late one: the mark is at or below the early id)
    found, mark, _ = jr.heads_changed([stream], mark)
    assert found[stream].get(early.run_id) == 1
    assert [r.payload for r in jr.read_after(early.run_id, stream, 0)] == [{"n": "early"}]


def test_a_second_append_to_a_run_waits_for_the_first_to_commit(
    pg: PostgresJournal, postgres_dsn: str, held: list[psycopg.Connection[Any]]
) -> None:
    """What ``read_after`` rests on: number 2 of a run's stream is never visible while number 1
    is not (the run's row lock, taken by every append, is held until the append commits)."""
    info, lease = pg.begin("f", "s", {})
    held.append(_held_append(postgres_dsn, lease, RETIRE_STREAM, {"n": 1}))
    with psycopg.connect(postgres_dsn, autocommit=True) as other:
        other.execute("set lock_timeout = '100ms'")
        with pytest.raises(psycopg.errors.LockNotAvailable):
            second = new_record_id(info.run_id, RETIRE_STREAM, None)
            args = (info.run_id, lease.epoch, RETIRE_STREAM, None, second, 1, payload_json({"n": 2}).decode())
            other.execute(_APPEND, args)
    assert pg.read_after(info.run_id, RETIRE_STREAM, 0) == []
    held[0].commit()
    pg.append(lease, RETIRE_STREAM, {"n": 2})
    assert [r.seq for r in pg.read_after(info.run_id, RETIRE_STREAM, 0)] == [1, 2]


def test_a_forget_committed_late_is_honoured_by_a_host_that_saw_a_later_one(
    tmp_path: Path, postgres_dsn: str, held: list[psycopg.Connection[Any]]
) -> None:
    """Host B reads after host C's forget (a higher id) committed and before host A's (a lower id,
    begun first) did: B's next read honours A's forget too, and catch_up on B publishes a learn
    committed late the same way."""
    a = host(tmp_path, "a", postgres_dsn)
    b = host(tmp_path, "b", postgres_dsn)
    c = host(tmp_path, "c", postgres_dsn)
    with a.session(scope="team") as s:
        first = s.learn({"text": "the door code is 4711"}).key
        second = s.learn({"text": "the gate code is 1234"}).key
        kept = s.learn({"text": "lunch is at noon"}).key
    assert b.catch_up() == 3
    assert {e.key for e in b.recall(scope="team")} == {first, second, kept}
    jr = PostgresJournal(postgres_dsn)
    try:
        _, lease = jr.begin("forgetter", "team", {})
        payload = retire_payload(first, "team", "forgetter", reason="rotated", by=None, forgotten_ms=1)
        held.append(_held_append(postgres_dsn, lease, RETIRE_STREAM, payload, key=first))
        with c.session(scope="team") as s:  # begun and committed after A's forget began
            s.forget(second, reason="rotated too")
        assert {e.key for e in b.recall(scope="team")} == {first, kept}  # A's is not committed yet
        held[0].commit()
        assert {e.key for e in b.recall(scope="team")} == {kept}
        assert b.get(first) is None
        finding = validate({"text": "the lift is out of order"}, "test")
        late = finding_id("team", finding)
        payload = learn_payload(late, "team", "forgetter", finding, 1)
        held.append(_held_append(postgres_dsn, lease, STREAM, payload, key=late))
        with c.session(scope="team") as s:  # begun and committed after A's learn began
            newer = s.learn({"text": "the stairs are open"}).key
        assert b.catch_up() == 1
        held[1].commit()
        assert b.catch_up() == 1
        assert {e.key for e in b.recall(scope="team")} == {kept, late, newer}
    finally:
        jr.close()
    b.sync()
    assert {e.key for e in b.recall(scope="team")} == {kept, late, newer}
    assert memory.check_store(b) == []
    for store in (a, b, c):
        store.close()
