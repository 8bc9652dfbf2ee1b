"""Servers on two hosts (two history DBs) sharing one PostgreSQL journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import journal
from journal import RunState
from memory import MemoryStore
from tests.mcp.harness import call, http_server, http_session, run, stdio_session

pytestmark = pytest.mark.postgres


def test_two_hosts_learn_into_one_postgresql_journal_and_each_recalls_both(
    tmp_path: Path, postgres_dsn: str
) -> None:
    host_a, host_b = tmp_path / "a" / "history.db", tmp_path / "b" / "history.db"
    host_a.parent.mkdir()
    host_b.parent.mkdir()
    with http_server(host_b, "--journal", postgres_dsn) as server_b:

        async def main() -> tuple[Any, Any]:
            async with stdio_session(host_a, "--journal", postgres_dsn) as a:
                learned_a = await call(a, "learn", text="learned on host a", tags=["shared"])
            async with http_session(server_b.url) as b:
                learned_b = await call(b, "learn", text="learned on host b", tags=["shared"])
            return learned_a, learned_b

        learned_a, learned_b = run(main)
    backend = journal.open_journal(postgres_dsn)
    try:
        roots = {r.run_id: r for r in backend.runs() if r.flow == "mcp"}
    finally:
        backend.close()
    assert set(roots) == {learned_a["citation"]["runId"], learned_b["citation"]["runId"]}
    assert all(r.state is RunState.DONE for r in roots.values())
    for db in (host_a, host_b):  # each host materializes the other's finding from the journal
        with MemoryStore(db, journal=postgres_dsn) as store:
            store.sync()
            keys = {f.key for f in store.recall(tags=["shared"], limit=None)}
        assert keys == {learned_a["key"], learned_b["key"]}
