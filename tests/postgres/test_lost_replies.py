"""A reply the server sent but the journal never received (the connection dropped after the
statement or its ``COMMIT`` reached the server): the caller gets a coded error or the true answer,
and what the server committed is neither doubled nor lost by the call or by a retry. A proxy between
the journal and the server passes one statement on, waits until the server has answered it, and
then closes the client's connection instead of passing the answer back."""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.parse
from collections.abc import Iterator

import pytest

import journal
from journal import RunState
from journal.postgres import PostgresJournal
from tests.postgres.conftest import OpenPg


class DroppingProxy:
    """A TCP proxy to the test server; once armed with some bytes, the first client message that
    holds them is passed on, and the connection that sent it is closed as the server answers."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._armed: bytes | None = None
        self.dropped = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, needle: bytes) -> None:
        with self._lock:
            self._armed = needle
            self.dropped.clear()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            self._sockets += [client, server]
            doomed = threading.Event()  # the client's message went on: drop what comes back
            threading.Thread(target=self._up, args=(client, server, doomed), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, doomed), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, doomed: threading.Event) -> None:
        try:
            while chunk := client.recv(1 << 16):
                with self._lock:
                    hit = self._armed is not None and self._armed in chunk
                    if hit:
                        self._armed = None
                server.sendall(chunk)
                if hit:
                    doomed.set()
        except OSError:
            pass

    def _down(self, server: socket.socket, client: socket.socket, doomed: threading.Event) -> None:
        try:
            while chunk := server.recv(1 << 16):
                if doomed.is_set():  # the server answered (so it committed): the client never hears
                    for s in (client, server):
                        with contextlib.suppress(OSError):
                            s.shutdown(socket.SHUT_RDWR)
                        s.close()
                    self.dropped.set()
                    return
                client.sendall(chunk)
        except OSError:
            pass

    def close(self) -> None:
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()


@pytest.fixture
def dropping(postgres_dsn: str, open_pg: OpenPg) -> Iterator[tuple[PostgresJournal, DroppingProxy, str]]:
    """A journal whose every connection passes a proxy that can drop one answer; and the DSN."""
    parts = urllib.parse.urlsplit(postgres_dsn)
    proxy = DroppingProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@127.0.0.1:{proxy.port}" if userinfo else f"127.0.0.1:{proxy.port}"
    query = [*urllib.parse.parse_qsl(parts.query), ("sslmode", "disable")]
    dsn = urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=urllib.parse.urlencode(query)))
    try:
        yield open_pg(dsn), proxy, postgres_dsn
    finally:
        proxy.close()


def test_a_finish_whose_commit_answer_is_lost_returns_the_finished_run(
    dropping: tuple[PostgresJournal, DroppingProxy, str], open_pg: OpenPg
) -> None:
    jr, proxy, direct = dropping
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"n": 1}, key="k1")
    proxy.arm(b"commit")  # the finish's transaction ends with the first commit sent from here
    got = jr.finish(lease, RunState.FAILED, {"code": "x"})
    assert proxy.dropped.wait(5)
    assert (got.state, got.epoch, got.error) == (RunState.FAILED, 1, {"code": "x"})
    other = open_pg(direct)
    assert other.run(info.run_id).state == RunState.FAILED
    assert [r.payload for r in other.read(info.run_id, "s")] == [{"n": 1}]
    assert other.acquire(info.run_id).epoch == 2  # the lease was let go: a resume takes it at once


def test_an_append_whose_answer_is_lost_is_answered_with_its_record_made_once(
    dropping: tuple[PostgresJournal, DroppingProxy, str], open_pg: OpenPg
) -> None:
    """Keyed or not, the append is asked again on a fresh connection with its record id, and the
    server answers with the record it committed: an unkeyed append was committed and reported
    unavailable, and the caller's retry (a new call, a new id) recorded it twice."""
    jr, proxy, direct = dropping
    info, lease = jr.begin("f", "s", {})
    got = []
    for n, key in enumerate(["k", None, None, "k2"], 1):
        proxy.arm(b"journal_append")
        got.append(jr.append(lease, "s", {"n": n}, key=key))
        assert proxy.dropped.wait(5)
    assert [(r.seq, r.key, r.payload) for r in got] == [
        (1, "k", {"n": 1}),
        (2, None, {"n": 2}),
        (3, None, {"n": 3}),
        (4, "k2", {"n": 4}),
    ]
    assert open_pg(direct).read(info.run_id, "s") == got


def test_a_finish_whose_connection_breaks_before_its_commit_is_unavailable_and_a_retry_finishes(
    dropping: tuple[PostgresJournal, DroppingProxy, str], open_pg: OpenPg
) -> None:
    jr, proxy, direct = dropping
    info, lease = jr.begin("f", "s", {})
    proxy.arm(b"update journal_runs r set state")  # its answer lost: COMMIT is never sent
    with pytest.raises(journal.JournalUnavailable):
        jr.finish(lease, RunState.DONE)
    assert proxy.dropped.wait(5)
    assert open_pg(direct).run(info.run_id).state == RunState.RUNNING  # rolled back, still ours
    assert jr.finish(lease, RunState.DONE).state == RunState.DONE
    assert open_pg(direct).run(info.run_id).state == RunState.DONE
