"""A session write whose caller stops waiting (``wait_for`` timing out, a cancelled task) is still in
flight: ``aclose``/``close``/``aflush`` wait for it before the root run ends, so no learn is
committed into, or renamed into place after, a root already marked done."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import memory
from journal import RunState
from tests.memory.conftest import Failpoints, learned_files


async def _abandoned_learn(session: memory.MemorySession) -> None:
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(session.alearn({"text": "a slow finding", "tags": ["slow"]}), 0.05)


@pytest.mark.parametrize("how", ["aclose", "close", "async with"])
def test_closing_waits_for_a_write_whose_caller_stopped_waiting(
    store: memory.MemoryStore, db: Path, failpoints: Failpoints, how: str
) -> None:
    failpoints.set("memory.after_append=sleep600")  # the write is committed, its file not yet named

    async def main() -> str:
        if how == "async with":
            async with store.session(scope="slow") as session:
                await _abandoned_learn(session)
            return session.run_id
        session = store.session(scope="slow")
        await _abandoned_learn(session)
        if how == "aclose":
            await session.aclose()
        else:  # a blocking close on the loop's own thread: the write's thread ends it, not the loop
            session.close()
        return session.run_id

    run_id = asyncio.run(main())
    backend = store.open_journal()
    # when the root reads done, the write it committed has its file in place (its name made
    # durable by the close's flush, which came after)
    assert backend.run(run_id).state is RunState.DONE
    (commit,) = backend.read(run_id, memory.STREAM)
    assert [p.stem for p in learned_files(db)] == [commit.key]
