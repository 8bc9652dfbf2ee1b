"""Writes the run cannot wait for are refused at once with ``flow_usage``: a learn (or forget, or
step) started by a task the body left running after the body returned, and a learn from a thread."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import flows
import memory
from journal import RunState
from tests._helpers.failpoints import armed


@pytest.fixture
def slow_flush(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every journal fsync takes a while: a late learn has time to commit before the run ends."""
    with armed(monkeypatch, "linelog.before_fsync=sleep100"):
        yield


def test_a_learn_from_a_task_left_running_after_the_body_returned_is_refused(
    tmp_path: Path, slow_flush: None
) -> None:
    late: list[Any] = []

    async def body(f: flows.FlowContext) -> str:
        async def leftover() -> None:
            await asyncio.sleep(0)  # the body has returned by now; the run is ending
            for start in (
                lambda: f.memory.learn({"text": "learned too late", "tags": ["late"]}),
                lambda: f.step("late", lambda: 1),
            ):
                try:
                    late.append(await start())
                except BaseException as exc:  # what the leftover task got
                    late.append(exc)

        asyncio.get_running_loop().create_task(leftover())
        return "returned"

    store = memory.MemoryStore(tmp_path / "h.db")
    try:

        async def main() -> flows.RunResult:
            result = await flows.arun(flows.flow(name="late")(body), store=store)
            await asyncio.sleep(0.5)
            return result

        result = asyncio.run(main())
        assert result.ok, result.error
        assert [getattr(x, "code", x) for x in late] == ["flow_usage", "step_invalid"]
        backend = store.open_journal()
        assert backend.run(result.run_id).state is RunState.DONE
        assert backend.read(result.run_id, memory.STREAM) == []  # nothing committed into the done root
    finally:
        store.close()


def test_a_learn_from_a_thread_is_flow_usage(tmp_path: Path) -> None:
    async def body(f: flows.FlowContext) -> None:
        await asyncio.to_thread(lambda: f.memory.learn({"text": "from a thread", "tags": ["t"]}))

    result = flows.run(flows.flow(name="threaded")(body), db=tmp_path / "h.db")
    assert result.state is RunState.FAILED
    assert isinstance(result.error, flows.FlowUsage) and result.error.code == "flow_usage"
    assert "not from a thread" in str(result.error)
