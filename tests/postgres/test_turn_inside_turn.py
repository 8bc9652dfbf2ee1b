"""A turn taken inside another on a PostgreSQL journal: the same session's lock, never a wait for itself.

A thread's turns are advisory locks. Each used to be asked on a session of its own, so a turn asked
inside another waited for the thread's own first turn whenever the two were one lock: a forget by
filter made inside ``MemoryStore.turn(scope)`` (its wider turn, held shared by the scope's turn,
asked for whole), or an update between two scopes whose names share a lock number (the server's
32-bit hash of the name). Each waited for good, and every host asking for either turn waited behind
it. Now a thread takes every turn it holds on one session; and two holders each waiting for a turn
the other holds are a deadlock the server sees and breaks, failing one with a coded error.

Each case runs in a child process with a deadline: a wait for itself is a child killed at the end
of it, and a failed test.
"""

from __future__ import annotations

import concurrent.futures
import json
import subprocess
import threading
import urllib.parse
from pathlib import Path

import psycopg
import pytest

from journal import JournalUnavailable
from journal.postgres import PostgresJournal
from tests.conftest import run_python
from tests.postgres.conftest import OpenPg, turn_holder

_INSIDE = """
import sys
import memory
dsn, db, op = sys.argv[1:4]
store = memory.MemoryStore(db, journal=dsn)
with store.session(scope="harbour") as s:
    old = s.learn({"text": "the ferry leaves at seven", "tags": ["ferry"]})
    s.learn({"text": "the pier is closed", "tags": ["pier"]})
    with store.turn("harbour"):
        if op == "forget_where":
            print(len(s.forget_where(reason="timetable changed", scope="harbour", tags=["ferry"]).keys))
        elif op == "erase_where":
            print(len(s.erase_where(reason="asked to", scope="harbour", tags=["ferry"])))
        else:
            s.update(old.memory_id, {"text": "the ferry leaves at eight", "tags": ["ferry"]})
            print(store.current(old.memory_id).text)
    print(sorted(e.text for e in store.recall(scope="harbour", limit=None)))
store.close()
"""

_MOVE = """
import sys
import memory
dsn, db, here, there = sys.argv[1:5]
store = memory.MemoryStore(db, journal=dsn)
with store.session(scope=here) as s:
    old = s.learn({"text": "the lighthouse keeper retires in May"})
with store.session(scope=there) as s:
    s.update(old.memory_id, {"text": "the lighthouse keeper retires in June"})
now = store.current(old.memory_id)
print(now.scope, now.text)
store.close()
"""

_DEADLOCK = """
import json, sys, threading
import journal, memory
dsn, base = sys.argv[1:3]
stores = [memory.MemoryStore(f"{base}/host{n}/history.db", journal=dsn) for n in (0, 1)]
for n, store in enumerate(stores):
    with store.session(scope=f"bay{n}") as s:
        s.learn({"text": f"a buoy in bay {n} is adrift", "tags": ["buoy"]})
both = threading.Barrier(2)
said = {}

def host(n):
    store = stores[n]
    try:
        with store.session(scope=f"bay{n}") as s, store.turn(f"bay{n}"):
            both.wait()  # each holds its scope's turn, and so the wider one, shared
            said[n] = len(s.forget_where(reason="recovered", tags=["buoy"], scope=f"bay{n}").keys)
    except journal.JournalError as exc:
        said[n] = f"{exc.code}: {exc}"

threads = [threading.Thread(target=host, args=(n,)) for n in (0, 1)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps(said))
for store in stores:
    store.close()
"""


def _child(script: str, *args: str, timeout: float = 60) -> str:
    try:
        done = run_python(script, *args, timeout=timeout)
    except subprocess.TimeoutExpired:  # the child is killed, and its sessions end with it
        pytest.fail(f"the child still waited after {timeout} s: a turn waited for its own thread")
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.parametrize("op", ["forget_where", "erase_where", "update"])
def test_a_write_inside_the_scopes_turn_takes_its_turns_on_the_turns_own_session(
    postgres_dsn: str, tmp_path: Path, op: str
) -> None:
    out = _child(_INSIDE, postgres_dsn, str(tmp_path / "history.db"), op).splitlines()
    if op == "update":
        assert out == ["the ferry leaves at eight", "['the ferry leaves at eight', 'the pier is closed']"]
    else:
        assert out == ["1", "['the pier is closed']"]


def _schema_of(dsn: str) -> str:
    options = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(dsn).query))["options"]
    return options.removeprefix("-csearch_path=")


def test_an_update_between_two_scopes_whose_turns_share_a_lock_number_goes_through(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Scope names are the caller's (an MCP client's, say): two whose turns hash to one lock number
    are easy to find, and likely by chance among some 77,000 scopes."""
    schema = _schema_of(postgres_dsn)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        row = conn.execute(
            "select array_agg(n order by n) from (select 'cove' || i as n,"
            " hashtext(%s || ':memory-scope:cove' || i) as h from generate_series(1, 400000) i) s"
            " group by h having count(*) > 1 limit 1",
            (schema,),
        ).fetchone()
    assert row is not None, "no two of 400,000 names share a lock number (about 1 in 10^8)"
    here, there = row[0][:2]
    out = _child(_MOVE, postgres_dsn, str(tmp_path / "history.db"), here, there)
    assert out == f"{there} the lighthouse keeper retires in June\n"


def test_two_holders_each_waiting_for_the_others_turn_is_a_deadlock_the_server_breaks(
    postgres_dsn: str, tmp_path: Path
) -> None:
    """Two hosts each hold a scope's turn (and the wider turn, shared) and each asks for the wider
    turn whole: neither can have it while the other holds its share. One fails at once with a coded
    error saying to retry; the other goes on."""
    said = json.loads(_child(_DEADLOCK, postgres_dsn, str(tmp_path)))
    failed = [v for v in said.values() if isinstance(v, str)]
    assert len(failed) == 1 and failed[0].startswith("journal_unavailable: "), said
    assert "ended a deadlock" in failed[0] and "do the work again" in failed[0]
    assert sorted(v for v in said.values() if isinstance(v, int)) == [1]


def test_a_turn_left_in_another_thread_leaves_the_first_thread_free_to_take_turns(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    """A generator that enters a turn in one thread and is run to its end in another (as a thread
    pool does): the first thread kept the ended turn's closed cursor as its own, and every turn it
    asked for afterwards failed for good."""
    jr = open_pg()
    held = jr.turn("memory-scope:a")
    pool = concurrent.futures.ThreadPoolExecutor
    with pool(1) as first, pool(1) as second:
        first.submit(held.__enter__).result()
        assert turn_holder(postgres_dsn, "memory-scope:a") is not None
        second.submit(held.__exit__, None, None, None).result()
        assert turn_holder(postgres_dsn, "memory-scope:a") is None

        def another_turn() -> bool:
            with jr.turn("memory-scope:b"):
                return turn_holder(postgres_dsn, "memory-scope:b") is not None

        assert first.submit(another_turn).result() and first.submit(another_turn).result()


def test_turns_of_one_thread_ending_out_of_order_are_each_held_until_they_end(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    """Two coroutines of one thread each hold a turn across an ``await``: the second is taken on the
    first's session, and the first ending ended the session's transaction, letting go of the
    second's turn while its holder was still in it (another host then took it: two holders)."""
    jr, other = open_pg(), open_pg()
    first, second = jr.turn("memory-scope:a"), jr.turn("memory-scope:b")
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert turn_holder(postgres_dsn, "memory-scope:b") is not None  # still held for the second
    taken = threading.Event()

    def another_host() -> None:
        with other.turn("memory-scope:b"):
            taken.set()

    thread = threading.Thread(target=another_host)
    thread.start()
    assert not taken.wait(1.0), "another host took a turn its holder is still in"
    second.__exit__(None, None, None)
    thread.join(10)
    assert taken.is_set() and turn_holder(postgres_dsn, "memory-scope:b") is None


def test_after_a_deadlock_the_threads_let_go_turns_refuse_commits_saying_so_until_it_leaves_them(
    open_pg: OpenPg,
) -> None:
    """The server breaks a deadlock by failing one holder's lock request, and its transaction with
    it: every turn that thread held on its session is let go. A further turn, or a commit, inside
    its blocks said the server was unreachable or the session killed, and "retry" could never
    succeed there; now each says the turns were let go, and to leave the blocks and start over."""
    a, b = open_pg(), open_pg()
    leases = {"x": a.begin("f", "s", {})[1], "y": b.begin("f", "s", {})[1]}
    both = threading.Barrier(2)
    said: dict[str, str] = {}

    def holder(jr: PostgresJournal, mine: str) -> None:
        with jr.turn(f"memory-scope:{mine}", under="memory-scopes"):
            both.wait()
            try:
                with jr.turn("memory-scopes"):  # the wider turn whole: each waits for the other's share
                    said[mine] = "took it"
            except JournalUnavailable as exc:
                said[mine] = str(exc)
                for what, attempt in (
                    ("turn", lambda: jr.turn("memory-scope:c").__enter__()),
                    ("commit", lambda: jr.append(leases[mine], "memory-learn", {"text": "lost"}, key="k1")),
                ):
                    try:
                        attempt()
                        said[f"{mine} {what}"] = "went on"
                    except JournalUnavailable as later:
                        said[f"{mine} {what}"] = str(later)

    threads = [threading.Thread(target=holder, args=(a, "x")), threading.Thread(target=holder, args=(b, "y"))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    (loser,) = [m for m in ("x", "y") if said.get(m, "took it") != "took it"]
    winner = "y" if loser == "x" else "x"
    assert said[winner] == "took it" and f"{winner} turn" not in said, said
    assert "ended a deadlock" in said[loser] and "leave every turn block" in said[loser]
    assert "let go" in said[f"{loser} turn"], said
    assert said[f"{loser} commit"].startswith("nothing was committed") and "let go" in said[f"{loser} commit"]
    jr = a if loser == "x" else b
    with jr.turn(f"memory-scope:{loser}", under="memory-scopes"):  # out of the blocks: turns again
        assert jr.append(leases[loser], "memory-learn", {"text": "after"}, key="k2").seq == 1
