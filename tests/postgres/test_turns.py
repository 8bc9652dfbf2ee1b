"""Turns under a wider turn: many are held at once, and the wider turn's holder holds them all.

A forget by filter holds every scope's turn at once (``turn("memory-scopes")``) while updates each
hold their scope's turn under it (``turn("memory-scope:<s>", under="memory-scopes")``). Whether a
holder waits is read from the server's lock table (a request not granted), never from a clock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

import psycopg
import pytest

from journal import Record
from journal.postgres import PostgresJournal
from tests.postgres.conftest import OpenPg


def _waiting(dsn: str, name: str) -> bool:
    """Whether some session waits for the turn ``name`` of the journal at ``dsn``."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select count(*) from pg_locks l where l.locktype = 'advisory' and not l.granted"
            " and l.objsubid = 2 and l.classid = 1953854062"  # 'turn': the journal's turn namespace
            " and l.objid::bigint = hashtext(current_schema() || ':' || %s)::bigint & 4294967295",
            (name,),
        ).fetchone()
    return bool(row and row[0])


def _until_waiting(dsn: str, name: str) -> None:
    while not _waiting(dsn, name):  # bounded by the test's timeout
        threading.Event().wait(0.01)


class _Holder:
    """A thread that takes a turn (``take()``), notes ``label`` in ``log`` once it holds it, and
    lets go when ``let_go`` is called."""

    def __init__(self, take: Callable[[], AbstractContextManager[None]], log: list[str], label: str) -> None:
        self._release = threading.Event()

        def hold() -> None:
            with take():
                log.append(label)
                self._release.wait()

        self._thread = threading.Thread(target=hold, daemon=True)
        self._thread.start()

    def let_go(self) -> None:
        self._release.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


def test_turns_under_one_wider_turn_are_held_at_once_and_its_holder_waits_for_them(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    one, two, whole = open_pg(), open_pg(), open_pg()
    for jr in (one, two, whole):
        jr.runs()  # migrated before any turn is taken
    log: list[str] = []
    with one.turn("a", under="w"):
        with two.turn("b", under="w"):  # while the other is held: turns under one turn do not wait
            holder = _Holder(lambda: whole.turn("w"), log, "whole")
            _until_waiting(postgres_dsn, "w")
            log.append("a and b held")
        log.append("b done")
        assert log == ["a and b held", "b done"]  # the wider turn waits for every turn under it
    holder.let_go()
    assert log == ["a and b held", "b done", "whole"]


def test_a_turn_asked_for_while_the_wider_turn_is_held_waits_for_it(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    whole, late = open_pg(), open_pg()
    for jr in (whole, late):
        jr.runs()
    log: list[str] = []
    with whole.turn("w"):
        holder = _Holder(lambda: late.turn("c", under="w"), log, "c")
        _until_waiting(postgres_dsn, "w")
        log.append("whole done")
    holder.let_go()
    assert log == ["whole done", "c"]


def test_a_turn_name_or_wider_name_that_is_not_one_is_refused(pg: PostgresJournal) -> None:
    for name, under in (("", None), ("a", ""), ("a", "x" * 1025), ("a", 7)):
        with pytest.raises(ValueError, match="a turn's name"), pg.turn(name, under=under):  # type: ignore[arg-type]
            pass


def test_an_append_in_a_turn_waits_while_the_turn_is_held_and_its_holder_waits_for_it(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    # A learn's commit holds its scope's turn shared (``append(turn=)``); an update holds the turn
    # itself: the commit waits while the update holds it, and the update waits for a commit in it.
    holder, writer = open_pg(), open_pg()
    info, lease = writer.begin("f", "s", {})
    log: list[str] = []

    def append() -> None:
        writer.append(lease, "memory-learn", {"n": 1}, key="k1", turn="memory-scope:s")
        log.append("appended")

    with holder.turn("memory-scope:s", under="w"):
        appender = threading.Thread(target=append, daemon=True)
        appender.start()
        _until_waiting(postgres_dsn, "memory-scope:s")
        assert writer.find(info.run_id, "memory-learn", "k1") is None  # not committed meanwhile
        log.append("turn let go")
    appender.join(30)
    assert log == ["turn let go", "appended"]
    # another turn's holder does not hold this append up; nor does a turn held shared by another
    with holder.turn("memory-scope:other"):
        writer.append(lease, "memory-learn", {"n": 2}, key="k2", turn="memory-scope:s")
    assert [r.key for r in writer.read(info.run_id, "memory-learn")] == ["k1", "k2"]
    # an append in the turn is idempotent by key as any append is
    again = writer.append(lease, "memory-learn", {"n": 3}, key="k1", turn="memory-scope:s")
    assert again.seq == 1 and again.payload == {"n": 1}
    for bad in ("", "x" * 1025, 7):
        with pytest.raises(ValueError, match="a turn's name"):
            writer.append(lease, "memory-learn", {"n": 4}, key="k4", turn=bad)  # type: ignore[arg-type]



def test_an_append_unless_another_run_holds_the_key_with_a_token_returns_that_record_instead(
    pg: PostgresJournal, postgres_dsn: str
) -> None:
    # A learn on one host asks its append to hand back another run's commit of its key that names
    # a memory (another host's update), and appends nothing then: the learn commits as that
    # memory's version instead.
    other, other_lease = pg.begin("f", "s", {})
    pg.append(other_lease, "memory-learn", {"memory": "m", "n": 1}, key="named")
    pg.append(other_lease, "memory-learn", {"n": 2}, key="plain")
    pg.append(other_lease, "memory-learn", {"n": 0}, key="escaped")  # its stored text crafted below
    info, lease = pg.begin("f", "s", {})

    def append(key: str, payload: dict[str, object]) -> Record:
        turn = "memory-scope:s"
        return pg.append(lease, "memory-learn", payload, key=key, turn=turn, unless_elsewhere='"memory"')

    found = append("named", {"n": 3})
    assert (found.run_id, found.key, found.payload) == (other.run_id, "named", {"memory": "m", "n": 1})
    assert pg.find(info.run_id, "memory-learn", "named") is None  # nothing appended
    mine = append("plain", {"n": 4})  # the other run's commit names no memory: appended here
    assert (mine.run_id, mine.payload) == (info.run_id, {"n": 4})
    # a record stored with a \u escape in its text is handed back too (it may spell the token)
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "update journal_records set payload = %s where key = 'escaped'", ('{"\\u006demory":"spelt"}',)
        )
    assert append("escaped", {"n": 5}).run_id == other.run_id
    # this run's own record of the key is not looked at: the other run's is handed back, and the
    # caller's next append of the key answers with its own, as any keyed append does
    pg.append(lease, "memory-learn", {"n": 6}, key="named", turn="memory-scope:s")
    assert append("named", {"n": 7}).run_id == other.run_id
    again = pg.append(lease, "memory-learn", {"n": 7}, key="named", turn="memory-scope:s")
    assert (again.run_id, again.payload) == (info.run_id, {"n": 6})
    # a key many runs committed: at most 8 of their records are read, and any that names the token
    # answers (every other run's commit of a key names the same memory, or none does)
    for n in range(20):
        _, each = pg.begin("f", f"s{n}", {})
        pg.append(each, "memory-learn", {"memory": "m", "n": n}, key="many")
        pg.append(each, "memory-learn", {"n": n}, key="many-plain")
    assert append("many", {"n": 9}).payload["memory"] == "m"
    mine = append("many-plain", {"n": 9})
    assert (mine.run_id, mine.payload) == (info.run_id, {"n": 9})
    for bad in ({"turn": None}, {"key": None}, {"unless_elsewhere": ""}):
        options: dict[str, object] = {"key": "k9", "turn": "memory-scope:s", "unless_elsewhere": '"memory"'}
        with pytest.raises(ValueError, match="unless_elsewhere"):
            pg.append(lease, "memory-learn", {"n": 8}, **{**options, **bad})  # type: ignore[arg-type]
