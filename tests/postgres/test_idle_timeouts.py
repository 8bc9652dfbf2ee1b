"""A server that ends idle sessions does not take a turn or a lease from a holder still at work.

A turn is an advisory lock held by a session idle in a transaction while its holder works (an
update reading a version and retiring it); a lease is one held by a session idle outside any
transaction. ``idle_in_transaction_session_timeout`` and ``idle_session_timeout`` (set on the
server, a role, a database, or a DSN's ``options``, as here) would end those sessions and hand the
lock to another host while the holder goes on: two hosts retiring one version at once, or a live
driver's run read as interrupted and taken over. The journal switches both off on the sessions
that hold such locks.
"""

from __future__ import annotations

import threading
import time
import urllib.parse

import pytest

import journal
from tests.postgres.conftest import OpenPg

TIMEOUT_MS = 150


def _with_options(dsn: str, extra: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    query = dict(urllib.parse.parse_qsl(parts.query))
    options = f"{query.pop('options', '')} {extra}".strip()
    rest = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
    encoded = "options=" + urllib.parse.quote(options, safe="")  # libpq reads no '+' as a space
    return parts._replace(query="&".join(q for q in (rest, encoded) if q)).geturl()


def test_a_turn_outlives_an_idle_in_transaction_timeout(open_pg: OpenPg, postgres_dsn: str) -> None:
    holder = open_pg(_with_options(postgres_dsn, f"-cidle_in_transaction_session_timeout={TIMEOUT_MS}"))
    other = open_pg()
    holder.runs()  # migrated before the turn is taken
    other.runs()
    taken = threading.Event()

    def take() -> None:
        with other.turn("memory-scope:s"):
            taken.set()

    with holder.turn("memory-scope:s"):
        time.sleep(TIMEOUT_MS * 4 / 1000)  # a slow holder: idle in its transaction past the timeout
        thread = threading.Thread(target=take, daemon=True)
        thread.start()
        assert not taken.wait(0.5), "another host took the turn while its holder still held it"
    thread.join(10)
    assert taken.is_set()  # and gets it as soon as the holder lets go


def test_a_lease_outlives_an_idle_session_timeout(open_pg: OpenPg, postgres_dsn: str) -> None:
    holder = open_pg(_with_options(postgres_dsn, f"-cidle_session_timeout={TIMEOUT_MS}"))
    other = open_pg()
    info, lease = holder.begin("f", "s", {})
    time.sleep(TIMEOUT_MS * 4 / 1000)  # the driver works; its lease connection sits idle
    assert other.run(info.run_id).state is journal.RunState.RUNNING
    with pytest.raises(journal.JournalLeaseHeld):
        other.acquire(info.run_id)
    holder.append(lease, "a", {"n": 1})
    holder.finish(lease, journal.RunState.DONE)
