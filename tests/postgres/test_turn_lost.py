"""A turn whose session ended while its holder went on: the holder's commits in it are refused.

A turn is an advisory lock held by a session of its own; a commit goes out on another. When the
turn's session ends (an administrator's ``pg_terminate_backend``, a lost connection), the lock goes
with it and another host may take the turn. Before, the first holder, unaware, committed beside the
second: an update or a forget the second host had acknowledged was overridden, and one memory was
left with two live versions. Who holds what is read from the server's lock table, never a clock.
"""

from __future__ import annotations

import contextlib
import threading

import psycopg
import pytest

from journal import JournalUnavailable
from journal.postgres import PostgresJournal
from tests.postgres.conftest import OpenPg, turn_holder


def _turn_session(dsn: str, name: str) -> int:
    """The backend pid holding the turn ``name`` (exclusively)."""
    pid = turn_holder(dsn, name)
    assert pid is not None, f"nobody holds the turn {name!r}"
    return pid


def _terminate(dsn: str, pid: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select pg_terminate_backend(%s)", (pid,))


@pytest.mark.parametrize("write", ["append", "rewrite"])
def test_a_commit_in_a_turn_whose_session_ended_is_refused_and_the_next_holders_stands(
    open_pg: OpenPg, postgres_dsn: str, write: str
) -> None:
    a, b = open_pg(), open_pg()
    info, lease = a.begin("f", "s", {})
    a.append(lease, "memory-learn", {"text": "version zero"}, key="k0")
    _, lease_b = b.begin("f", "s", {})
    with pytest.raises(JournalUnavailable), a.turn("memory-scope:s", under="w"):
        _terminate(postgres_dsn, _turn_session(postgres_dsn, "memory-scope:s"))
        with b.turn("memory-scope:s", under="w"):  # another host takes the turn now free
            b.append(lease_b, "memory-learn", {"text": "version B"}, key="kb")
        with pytest.raises(JournalUnavailable, match="no longer holds the turn 'memory-scope:s'"):
            if write == "append":
                a.append(lease, "memory-learn", {"text": "version A"}, key="ka")
            else:
                a.rewrite_payloads(info.run_id, "memory-learn", {1: {"text": ""}}, pad="pad", lease=lease)
    # nothing of the refused commit went in; the turn's end says so too (JournalUnavailable above)
    assert [r.key for r in a.read(info.run_id, "memory-learn")] == ["k0"]
    assert a.read(info.run_id, "memory-learn")[0].payload == {"text": "version zero"}
    # the journal goes on: a new turn, a commit in it
    with a.turn("memory-scope:s", under="w"):
        assert a.append(lease, "memory-learn", {"text": "version A"}, key="ka").seq == 2


def test_a_refused_commit_is_the_error_a_lost_turn_raises_not_the_turns_failed_end(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    a, b = open_pg(), open_pg()
    info, lease = a.begin("f", "s", {})
    _, lease_b = b.begin("f", "s", {})
    refused = "no longer holds the turn 'memory-scope:s'"
    with pytest.raises(JournalUnavailable, match=refused) as raised, a.turn("memory-scope:s", under="w"):
        _terminate(postgres_dsn, _turn_session(postgres_dsn, "memory-scope:s"))
        with b.turn("memory-scope:s", under="w"):
            b.append(lease_b, "memory-learn", {"text": "version B"}, key="kb")
        a.append(lease, "memory-learn", {"text": "version A"}, key="ka")
    assert any("the turn's end failed" in note for note in raised.value.__notes__)
    assert a.read(info.run_id, "memory-learn") == []


def test_the_next_holder_of_a_turn_waits_for_a_commit_its_last_holder_is_making_in_it(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    """A turn's session may end just after the commit's check that it holds the turn: the commit
    then holds the turn's gate, and the next holder passes the gate only once the commit has ended,
    so it reads what the commit made."""
    a, b = open_pg(), open_pg()
    for jr in (a, b):
        jr.runs()  # migrated
    log: list[str] = []
    with psycopg.connect(postgres_dsn) as committing:  # a commit in the turn, in flight
        committing.execute(
            "select pg_advisory_xact_lock_shared(%s, hashtext(current_schema() || ':' || %s))",
            (0x74676174, "memory-scope:s"),
        )

        taker = _taking(b, "memory-scope:s", log, "taken")
        _until_gate_waited(postgres_dsn)
        assert log == []
        log.append("committed")
        committing.commit()
    taker.join(30)
    assert log == ["committed", "taken"]


def _taking(jr: PostgresJournal, name: str, log: list[str], label: str) -> threading.Thread:
    """A thread, started, that takes the turn ``name`` and notes ``label`` in ``log`` once it holds it."""

    def take() -> None:
        with jr.turn(name):
            log.append(label)

    taker = threading.Thread(target=take, daemon=True)
    taker.start()
    return taker


def _until_gate_waited(dsn: str) -> None:
    """Until some session waits for a turn's gate."""
    _until_waiting(dsn, "locktype = 'advisory' and objsubid = 2 and classid = %s", (0x74676174,))


def _until_waiting(dsn: str, which: str, params: tuple[object, ...]) -> None:
    """Until some session waits for a lock ``which`` (a condition on ``pg_locks``) names."""
    while True:  # bounded by the test's timeout
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(
                f"select count(*) from pg_locks where not granted and {which}", params
            ).fetchone()
        if row and row[0]:
            return
        threading.Event().wait(0.01)


def test_a_commit_in_a_turn_held_throughout_goes_in_as_before(open_pg: OpenPg, postgres_dsn: str) -> None:
    a = open_pg()
    info, lease = a.begin("f", "s", {})
    with a.turn("memory-scope:s", under="w"), a.turn("memory-scope:t", under="w"):
        a.append(lease, "memory-learn", {"n": 1}, key="k1")
    with a.turn("w"):  # the wider turn alone
        a.append(lease, "memory-learn", {"n": 2}, key="k2")
    a.append(lease, "memory-learn", {"n": 3}, key="k3")  # in no turn
    assert [r.key for r in a.read(info.run_id, "memory-learn")] == ["k1", "k2", "k3"]


def test_one_who_takes_the_wider_turn_waits_for_a_commit_made_in_a_turn_under_it(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    """A commit made in a scope's turn (held under the wider turn of every scope) holds the wider
    turn's gate too. Its turn's session ends after the commit's check, while the commit waits (here
    on a lock of the table): the wider turn is free, and a forget by filter takes it; it must wait
    for the commit before it reads. Before, it passed its gate at once and forgot the version the
    commit then replaced: an acknowledged forget overridden."""
    a, b = open_pg(), open_pg()
    info, lease = a.begin("f", "s", {})
    b.runs()
    seen: list[list[str | None]] = []  # what the wider turn's holder reads once it holds it
    with psycopg.connect(postgres_dsn) as admin:  # holds every insert into the records back
        admin.execute("lock table journal_records in share mode")

        def commit_in_scope_turn() -> None:
            with contextlib.suppress(JournalUnavailable), a.turn("memory-scope:s", under="memory-scopes"):
                a.append(lease, "memory-learn", {"text": "version A"}, key="ka")

        def take_the_wider_turn() -> None:
            with b.turn("memory-scopes"):
                seen.append([r.key for r in b.read(info.run_id, "memory-learn")])

        committer = threading.Thread(target=commit_in_scope_turn, daemon=True)
        committer.start()
        _until_insert_waits(postgres_dsn)  # past its check, held back by the table's lock
        _terminate(postgres_dsn, _turn_session(postgres_dsn, "memory-scope:s"))

        taker = threading.Thread(target=take_the_wider_turn, daemon=True)
        taker.start()
        _until_gate_waited(postgres_dsn)
        assert seen == []
        admin.commit()  # the commit goes in; then the wider turn's holder goes on
    committer.join(30)
    taker.join(30)
    assert seen == [["ka"]]  # it read the commit it waited for


def _until_insert_waits(dsn: str) -> None:
    """Until some session waits for a lock of the records' table."""
    _until_waiting(dsn, "locktype = 'relation' and relation = 'journal_records'::regclass", ())


def test_two_turns_under_one_wider_turn_and_a_taker_of_the_wider_turn_never_wait_in_a_ring(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    """An update across two scopes holds both scopes' turns, taken one after the other, each under
    the wider turn of every scope; a forget by filter takes the wider turn itself. Before, the
    second scope's turn asked again for the wider turn (shared, on a session of its own) and queued
    behind the forget's request, which waited for the first scope's hold of it: both hosts waited
    for good, and the server saw no deadlock (the ring ran through two sessions of one client)."""
    a, b = open_pg(), open_pg()
    for jr in (a, b):
        jr.runs()
    order: list[str] = []
    first_held, go_on = threading.Event(), threading.Event()

    def update_two_scopes() -> None:
        with a.turn("memory-scope:s1", under="memory-scopes"):
            first_held.set()
            go_on.wait(30)
            with a.turn("memory-scope:s2", under="memory-scopes"):
                order.append("both scopes held")

    def forget_by_filter() -> None:
        with b.turn("memory-scopes"):
            order.append("every scope held")

    updater = threading.Thread(target=update_two_scopes, daemon=True)
    updater.start()
    assert first_held.wait(30)
    taker = threading.Thread(target=forget_by_filter, daemon=True)
    taker.start()
    try:
        _until_waiting(
            postgres_dsn, "locktype = 'advisory' and objsubid = 2 and classid = %s", (0x7475726E,)
        )  # the wider turn asked for, waiting for the first scope's hold
        go_on.set()
        updater.join(20)
        taker.join(20)
        assert order == ["both scopes held", "every scope held"]
    finally:
        if updater.is_alive() or taker.is_alive():  # the ring: end it so the suite goes on
            with psycopg.connect(postgres_dsn, autocommit=True) as admin:
                admin.execute(
                    "select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory'"
                    " and classid = %s and pid <> pg_backend_pid()",
                    (0x7475726E,),
                )
