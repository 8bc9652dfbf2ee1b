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

import json
import subprocess
import urllib.parse
from pathlib import Path

import psycopg
import pytest

from tests.conftest import run_python

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
    assert "ended a deadlock" in failed[0] and "retry" in failed[0]
    assert sorted(v for v in said.values() if isinstance(v, int)) == [1]
