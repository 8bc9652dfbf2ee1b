"""Leases on PostgreSQL: they die with the holder's session, expire when the holder stalls, and fence."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

import journal
from journal import RunState, now_ms
from journal.postgres import PostgresJournal
from tests.conftest import ROOT
from tests.pg_fixtures import admin_connection
from tests.postgres.conftest import OpenPg

# A holder that appends k0..k2, prints its run id, then appends one keyed record per stdin line,
# answering each with "ok <seq>" or the journal error's code.
_HOLDER = """
import sys, journal
from journal.postgres import PostgresJournal
jr = PostgresJournal(sys.argv[1], lease_ttl_s=float(sys.argv[2]))
info, lease = jr.begin("f", "s", {})
for i in range(3):
    jr.append(lease, "s", {"by": "holder"}, key=f"k{i}")
print(info.run_id, flush=True)
for line in sys.stdin:
    try:
        print("ok", jr.append(lease, "s", {"by": "holder"}, key=line.strip()).seq, flush=True)
    except journal.JournalError as exc:
        print(exc.code, flush=True)
"""


@pytest.fixture
def holder(postgres_dsn: str) -> Iterator[subprocess.Popen[str]]:
    """A process driving a fresh run with a 30 s lease; its first stdout line is the run id."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, postgres_dsn, "30"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    yield proc
    proc.kill()
    proc.wait(10)
    for pipe in (proc.stdin, proc.stdout):
        if pipe is not None:
            pipe.close()


def _ask(proc: subprocess.Popen[str], key: str) -> str:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(key + "\n")
    proc.stdin.flush()
    return proc.stdout.readline().strip()


def _run_id(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    return proc.stdout.readline().strip()


def test_a_sigkilled_holder_frees_the_lease_at_once(
    holder: subprocess.Popen[str], pg: PostgresJournal
) -> None:
    run_id = _run_id(holder)
    assert pg.run(run_id).state == RunState.RUNNING
    with pytest.raises(journal.JournalLeaseHeld):
        pg.acquire(run_id)
    holder.send_signal(signal.SIGKILL)
    holder.wait(10)
    killed = time.monotonic()
    while pg.run(run_id).state != RunState.INTERRUPTED:
        assert time.monotonic() - killed < 2, "the dead holder's session still holds the lease"
        time.sleep(0.01)
    lease = pg.acquire(run_id)  # long before the 30 s lease would have expired
    assert lease.epoch == 2
    assert [r.key for r in pg.read(run_id, "s")] == ["k0", "k1", "k2"]


@pytest.mark.slow
def test_a_stalled_holder_loses_its_expired_lease_and_its_next_append_is_refused(
    open_pg: OpenPg, holder: subprocess.Popen[str], postgres_dsn: str
) -> None:
    run_id = _run_id(holder)
    assert _ask(holder, "k3") == "ok 4"
    holder.send_signal(signal.SIGSTOP)  # stalled: alive, session open, no heartbeat
    try:
        now = open_pg()
        with pytest.raises(journal.JournalLeaseHeld):
            now.acquire(run_id)  # within its lease the stalled holder still counts as live
        now.close()
        # A resumer whose clock reads past the 30 s lease (no sleeping in tests).
        later = open_pg(clock=lambda: now_ms() + 61_000)
        assert later.run(run_id).state == RunState.INTERRUPTED
        lease = later.acquire(run_id)
        assert lease.epoch == 2
        # The resumed body re-runs its steps: existing keys return their records, new ones append.
        redone = [later.append(lease, "s", {"by": "resumer"}, key=f"k{i}") for i in range(6)]
        assert [r.seq for r in redone] == [1, 2, 3, 4, 5, 6]
    finally:
        holder.send_signal(signal.SIGCONT)
    assert _ask(holder, "k6") == "journal_lease_lost"
    assert _ask(holder, "k0") == "journal_lease_lost"  # even a key that exists: fencing comes first
    records = list(later.read(run_id, "s"))
    assert [(r.seq, r.key) for r in records] == [(i + 1, f"k{i}") for i in range(6)]
    assert [r.payload["by"] for r in records] == ["holder"] * 4 + ["resumer"] * 2
    assert later.run(run_id).state == RunState.RUNNING
    assert later.run(run_id).epoch == 2
    later.close()


def test_the_heartbeat_keeps_a_live_holders_lease_past_its_ttl(open_pg: OpenPg, postgres_dsn: str) -> None:
    # a TTL long enough that a renewal delayed by a busy machine (a full test run on 2 cores) is
    # still in time, short enough that only renewals can keep the lease over the sleep
    holder = open_pg(lease_ttl_s=1.0)
    other = open_pg()
    info, lease = holder.begin("f", "s", {})
    time.sleep(3.0)  # three TTLs: only renewals keep it
    assert other.run(info.run_id).state == RunState.RUNNING
    with pytest.raises(journal.JournalLeaseHeld):
        other.acquire(info.run_id)
    holder.append(lease, "s", {"still": "mine"})
    holder.close()
    other.close()


def test_an_expired_lease_is_broken_and_the_old_holders_renewal_forgets_it(
    open_pg: OpenPg, postgres_dsn: str
) -> None:
    offset = [0]
    holder = open_pg(clock=lambda: now_ms() + offset[0])
    info, old = holder.begin("f", "s", {})
    resumer = open_pg(clock=lambda: now_ms() + 31_000)
    new = resumer.acquire(info.run_id)
    holder.renew()  # the old holder wakes up: its lease is gone, so it lets go of it
    with pytest.raises(journal.JournalLeaseLost) as caught:
        holder.append(old, "s", {})
    assert (caught.value.expected, caught.value.got) == (2, 1)
    with pytest.raises(journal.JournalLeaseHeld):
        holder.acquire(info.run_id)  # the resumer is live: the old holder cannot take it back
    resumer.finish(new, RunState.DONE)
    assert holder.run(info.run_id).state == RunState.DONE
    holder.close()
    resumer.close()


def _kill_lease_session(jr: PostgresJournal) -> None:
    conn = jr._lease_conn
    assert conn is not None
    with admin_connection() as admin:
        admin.execute("select pg_terminate_backend(%s)", (conn.info.backend_pid,))


def test_a_holder_whose_session_drops_reads_interrupted_and_retakes_its_lease_on_reconnect(
    open_pg: OpenPg,
    postgres_dsn: str,
) -> None:
    holder = open_pg()
    other = open_pg()
    info, lease = holder.begin("f", "s", {})
    _kill_lease_session(holder)
    deadline = time.monotonic() + 2
    while other.run(info.run_id).state != RunState.INTERRUPTED:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    holder.renew()  # reconnects; nobody took the run, so its lease lock is taken back
    assert other.run(info.run_id).state == RunState.RUNNING
    with pytest.raises(journal.JournalLeaseHeld):
        other.acquire(info.run_id)
    assert holder.append(lease, "s", {"n": 1}).seq == 1
    holder.close()
    assert other.run(info.run_id).state == RunState.INTERRUPTED
    other.close()


def test_a_holder_whose_session_dropped_does_not_take_back_a_run_resumed_meanwhile(
    open_pg: OpenPg,
    postgres_dsn: str,
) -> None:
    holder = open_pg()
    other = open_pg()
    info, lease = holder.begin("f", "s", {})
    _kill_lease_session(holder)
    deadline = time.monotonic() + 2
    while True:
        try:
            new = other.acquire(info.run_id)
            break
        except journal.JournalLeaseHeld:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    holder.renew()
    with pytest.raises(journal.JournalLeaseLost):
        holder.append(lease, "s", {})
    assert other.append(new, "s", {"n": 1}).seq == 1
    with pytest.raises(journal.JournalLeaseHeld):
        holder.acquire(info.run_id)
    holder.close()
    other.close()


def test_an_append_the_server_fences_fails_closed_as_journal_lease_lost_even_if_the_rule_saw_no_reason(
    pg: PostgresJournal, postgres_dsn: str
) -> None:
    """The server's fence is the authority: should its answer and the shared rule ever disagree
    (here a ``journal_append`` that fences every call, even one at the current epoch of a running
    run), the append fails with the fence's code and nothing is written."""
    import psycopg

    info, lease = pg.begin("f", "s", {})
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:  # the DSN names the test's schema
        conn.execute(
            """create or replace function journal_append(
                p_run text, p_epoch integer, p_stream text, p_key text, p_id text, p_ts bigint,
                p_payload text
            ) returns table (
                o_status text, o_epoch integer, o_state text, o_seq bigint, o_id text, o_key text,
                o_ts bigint, o_payload text
            ) language sql as $$
                select 'fenced', r.epoch, r.state, null::bigint, null::text, null::text,
                    null::bigint, null::text
                from journal_runs r where r.run_id = p_run
            $$"""
        )
    with pytest.raises(journal.JournalLeaseLost) as err:
        pg.append(lease, "s", {"n": 1}, key="k")
    assert (err.value.code, err.value.expected, err.value.got) == ("journal_lease_lost", 1, 1)
    assert err.value.run_id == info.run_id
    assert "resume it to continue" in str(err.value)
    assert list(pg.read(info.run_id, "s")) == []
