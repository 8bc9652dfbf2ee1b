"""Rows read back are bounded as files are: a run row whose flow, scope, meta and error hold more
than ``MAX_RUN_BYTES`` together, or a record whose payload holds more than ``MAX_PAYLOAD_BYTES``, is
``journal_corrupt`` naming the run (the stream and the record's number), from every call that reads
it, and the server never sends the value: a proxy between the journal and the server counts what
crosses."""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import journal
from journal import JournalCorrupt, RunState
from journal.postgres import PostgresJournal
from tests.postgres.conftest import OpenPg

CAP_RUN = journal.MAX_RUN_BYTES
CAP_PAYLOAD = journal.MAX_PAYLOAD_BYTES
SENT_BOUND = 1 << 20  # what a refused read may receive: its other columns and the protocol's chatter


class CountingProxy:
    """A TCP proxy to the test server that counts the bytes the server sends to its clients."""

    def __init__(self, host: str, port: int) -> None:
        self._upstream = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self.received = 0
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self._upstream)
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, counted: bool) -> None:
        try:
            while chunk := src.recv(1 << 16):
                if counted:
                    with self._lock:
                        self.received += len(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def reset(self) -> None:
        with self._lock:
            self.received = 0

    def close(self) -> None:
        for s in self._sockets:
            s.close()


@pytest.fixture
def proxied(postgres_dsn: str, open_pg: OpenPg) -> Iterator[tuple[PostgresJournal, CountingProxy]]:
    """A journal on the test's schema whose every byte from the server passes a counting proxy."""
    parts = urllib.parse.urlsplit(postgres_dsn)
    proxy = CountingProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = f"{userinfo}@127.0.0.1:{proxy.port}" if userinfo else f"127.0.0.1:{proxy.port}"
    try:
        yield open_pg(urllib.parse.urlunsplit(parts._replace(netloc=netloc))), proxy
    finally:
        proxy.close()


def _sql(dsn: str, query: str, *params: Any) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(query, params)


def _json_of(size: int) -> str:
    """SQL for a JSON object of exactly ``size`` bytes (stored compressed: the test stays fast)."""
    return f"""'{{"a":"' || repeat('x', {size - len('{"a":""}')}) || '"}}'"""


def _sent_while(proxy: CountingProxy, call: Callable[[], object]) -> int:
    proxy.reset()
    with pytest.raises(JournalCorrupt) as err:
        call()
    assert err.value.code == "journal_corrupt"
    return proxy.received


RUN_COLUMNS = {
    "meta": _json_of(CAP_RUN + 1),
    "error": _json_of(CAP_RUN + 1),
    "flow": f"repeat('f', {CAP_RUN + 1})",
    "scope": f"repeat('s', {CAP_RUN + 1})",
}


@pytest.mark.parametrize("column", sorted(RUN_COLUMNS))
def test_a_run_row_over_the_cap_is_journal_corrupt_naming_the_run_and_never_sent(
    proxied: tuple[PostgresJournal, CountingProxy], postgres_dsn: str, column: str
) -> None:
    pg, proxy = proxied
    info, lease = pg.begin("f", "s", {"source": "/x/flow.py"})
    pg.append(lease, "a", {"n": 1})
    crafted = RUN_COLUMNS[column]
    _sql(postgres_dsn, f"update journal_runs set {column} = {crafted} where run_id = %s", info.run_id)
    reads: dict[str, Callable[[], object]] = {
        "run": lambda: pg.run(info.run_id),
        "runs": pg.runs,
        "hints": lambda: pg.hints(info.run_id, "a"),
        "finish": lambda: pg.finish(lease, RunState.DONE),
    }
    for name, call in reads.items():
        assert _sent_while(proxy, call) < SENT_BOUND, name
        with pytest.raises(JournalCorrupt) as err:
            call()
        assert err.value.run_id == info.run_id, name
        assert f"over the {CAP_RUN:,} bytes a run record may hold" in str(err.value), name
        assert "restore it from a backup or inspect it with `flows check`" in str(err.value), name
    # finish refused the row before writing anything: the run is still running at its epoch
    with psycopg.connect(postgres_dsn) as conn:
        row = conn.execute("select state, epoch from journal_runs where run_id = %s", (info.run_id,))
        assert row.fetchone() == ("running", 1)
    # the proxy counts what a row sends: one just within the cap crosses whole
    within = _json_of(CAP_RUN - 2)
    _sql(postgres_dsn, f"update journal_runs set flow = 'f', scope = 's', meta = {within}, error = null")
    proxy.reset()
    assert len(pg.run(info.run_id).meta["a"]) == CAP_RUN - 2 - len('{"a":""}')
    assert proxy.received > CAP_RUN


def test_a_listing_with_one_run_over_the_cap_fails_closed_naming_that_run(
    pg: PostgresJournal, postgres_dsn: str
) -> None:
    runs = [pg.begin("f", "s", {"n": n})[0] for n in range(6)]
    crafted = runs[3].run_id
    _sql(postgres_dsn, f"update journal_runs set meta = {_json_of(CAP_RUN + 1)} where run_id = %s", crafted)
    with pytest.raises(JournalCorrupt) as err:
        pg.runs()
    assert (err.value.code, err.value.run_id) == ("journal_corrupt", crafted)
    assert crafted in str(err.value)
    for info in runs:  # the others read as ever
        if info.run_id != crafted:
            assert pg.run(info.run_id).meta == info.meta


def _record_reads(
    pg: PostgresJournal, run_id: str, lease: journal.Lease, rid: str
) -> dict[str, Callable[[], object]]:
    return {
        "read": lambda: pg.read(run_id, "s"),
        "read_after": lambda: pg.read_after(run_id, "s", 1),
        "find": lambda: pg.find(run_id, "s", "k"),
        "lookup": lambda: pg.lookup(run_id, "s", rid),
        "append of its key": lambda: pg.append(lease, "s", {"n": 0}, key="k"),
    }


def test_a_record_over_the_cap_is_journal_corrupt_naming_run_stream_and_number_and_never_sent(
    proxied: tuple[PostgresJournal, CountingProxy], postgres_dsn: str
) -> None:
    pg, proxy = proxied
    info, lease = pg.begin("f", "s", {})
    pg.append(lease, "s", {"n": 1})
    rec = pg.append(lease, "s", {"n": 2}, key="k")
    pg.append(lease, "s", {"n": 3})
    _sql(
        postgres_dsn,
        f"update journal_records set payload = {_json_of(CAP_PAYLOAD + 1)} where run_id = %s and seq = 2",
        info.run_id,
    )
    for name, call in _record_reads(pg, info.run_id, lease, rec.id).items():
        assert _sent_while(proxy, call) < SENT_BOUND, name
        with pytest.raises(JournalCorrupt) as err:
            call()
        assert (err.value.run_id, err.value.stream, err.value.line) == (info.run_id, "s", 2), name
        assert f"a payload of {CAP_PAYLOAD + 1:,} bytes, over the {CAP_PAYLOAD:,}" in str(err.value), name
        assert "restore it from a backup or inspect it with `flows check`" in str(err.value), name
    # a payload of exactly the cap is read, and crosses whole
    _sql(
        postgres_dsn,
        f"update journal_records set payload = {_json_of(CAP_PAYLOAD)} where run_id = %s and seq = 2",
        info.run_id,
    )
    proxy.reset()
    assert len(pg.find(info.run_id, "s", "k").payload["a"]) == CAP_PAYLOAD - len('{"a":""}')  # type: ignore[union-attr]
    assert proxy.received > CAP_PAYLOAD
