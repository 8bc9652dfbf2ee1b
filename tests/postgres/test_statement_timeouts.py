"""A statement the server cancels (a ``statement_timeout`` or ``lock_timeout``, or an
administrator's cancel) is reported as what it is, once: it was reported as an unreachable server
("check that the server is running"), and the pool ran the statement again on a fresh connection,
so the caller waited the timeout twice. Only a connection that died while idle is retried."""

from __future__ import annotations

import time

import psycopg
import pytest

import journal
from tests.postgres.conftest import OpenPg
from tests.postgres.test_idle_timeouts import _with_options

TIMEOUT_S = 1.5


@pytest.mark.parametrize("setting", ["statement_timeout", "lock_timeout"])
def test_a_cancelled_statement_is_named_and_waited_for_once(
    open_pg: OpenPg, postgres_dsn: str, setting: str
) -> None:
    jr = open_pg(_with_options(postgres_dsn, f"-c{setting}={int(TIMEOUT_S * 1000)}"))
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "events", {"n": 1})
    assert len(jr.read(info.run_id, "events")) == 1  # the pool now holds a live, reused connection
    with psycopg.connect(postgres_dsn) as locker:  # a transaction that holds the records' table
        locker.execute("lock table journal_records in access exclusive mode")
        t0 = time.perf_counter()
        with pytest.raises(journal.JournalUnavailable) as caught:
            jr.read(info.run_id, "events")
        took = time.perf_counter() - t0
    message = str(caught.value)
    assert "cancelled by the server" in message and setting in message
    assert "check that the server is running" not in message
    assert caught.value.run_id == info.run_id
    assert took < 2 * TIMEOUT_S - 0.1, took  # run once: a second run would wait the timeout again
    assert len(jr.read(info.run_id, "events")) == 1  # the lock gone, the journal reads again
