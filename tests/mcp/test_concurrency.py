"""Eight clients learning at once, over each transport, converge: one record per finding in each
session's root run, one finding per key in recall, a store that checks clean. Their 120 learns at
once pass the calls an HTTP server runs at once; a client sends a refused one again, as documented."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp.shared.exceptions import MCPError

from journal import RunState
from memory import MemoryStore, check_store
from tests.mcp.conftest import Transport
from tests.mcp.harness import call, learn_records, mcp_runs, run

CLIENTS = 8
SHARED = [f"shared finding {n}" for n in range(5)]


async def _client(transport: Transport, n: int, results: dict[int, list[dict[str, Any]]]) -> None:
    own = [f"client {n} finding {i}" for i in range(5)]
    out: list[dict[str, Any]] = []

    async def learn(text: str) -> None:
        while True:
            try:
                learned = await call(session, "learn", text=text, tags=["race"])
                break
            except MCPError as exc:  # over HTTP, past the calls a server runs at once: as documented,
                assert exc.error.data["code"] == "mcp_busy"  # send it again after Retry-After
                await anyio.sleep(exc.error.data["retryAfterS"])
        out.append({"text": text, **learned})

    async with transport.connect() as session, anyio.create_task_group() as tg:
        for text in [*SHARED, *SHARED, *own]:  # each shared finding twice at once in this session
            tg.start_soon(learn, text)
    results[n] = out


def test_eight_clients_learning_at_once_converge(transport: Transport) -> None:
    results: dict[int, list[dict[str, Any]]] = {}

    async def main() -> None:
        async with anyio.create_task_group() as tg:
            for n in range(CLIENTS):
                tg.start_soon(_client, transport, n, results)

    run(main)
    keys: dict[str, set[str]] = {}
    for out in results.values():
        assert len(out) == 15
        for r in out:
            keys.setdefault(r["text"], set()).add(r["key"])
    assert all(len(k) == 1 for k in keys.values())  # every client got the same key for a finding
    assert len(keys) == len(SHARED) + CLIENTS * 5

    roots = mcp_runs(transport.db)
    assert len(roots) == CLIENTS and all(r.state is RunState.DONE for r in roots)
    by_run: dict[str, list[str]] = {r.run_id: [] for r in roots}
    for out in results.values():
        run_ids = {r["citation"]["runId"] for r in out}
        assert len(run_ids) == 1  # a client's learns all went to its session's root run
        by_run[run_ids.pop()] = sorted({r["key"] for r in out})
    for root in roots:  # one record per finding in each root run
        recorded = [str(rec.key) for rec in learn_records(transport.db, root.run_id)]
        assert sorted(recorded) == by_run[root.run_id]

    every = {k for ks in keys.values() for k in ks}
    db: Path = transport.db
    with MemoryStore(db) as store:
        before = [f.key for f in store.recall(tag="race", limit=None)]
        store.sync()
        after = [f.key for f in store.recall(tag="race", limit=None)]
        assert check_store(store, sail_dirs=[], sweep_age_s=3600.0) == []
    assert sorted(before) == sorted(every)  # one finding per key, from the files...
    assert sorted(after) == sorted(every)  # ... and from the history DB after a sync
