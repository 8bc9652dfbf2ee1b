"""A saver's ``with_allowlist`` view shares the saver's lifetime: the executor its async calls run
on and its open/closed state. A view used from async code must not leave a thread pool that the
saver's ``close`` never shuts down, nor keep serving after the saver is closed."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from flows.langgraph import JournalSaver
from journal import JournalClosed
from tests.langgraph.helpers import config, put_chain


def _pool_threads(prefix: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(prefix)]


def test_a_views_async_calls_end_with_the_saver(tmp_path: Path) -> None:
    saver = JournalSaver(db=str(tmp_path / "h.db"))
    put_chain(saver, "t", [{"v": 1}])
    view = saver.with_allowlist([("tests.langgraph", "Nothing")])
    assert view is not saver

    async def read() -> None:
        assert await view.aget_tuple(config("t")) is not None

    asyncio.run(read())
    assert _pool_threads("langgraph-saver"), "the view's async read ran on the saver's pool"
    saver.close()
    assert not [t for t in _pool_threads("langgraph-saver") if t.is_alive()]
    with pytest.raises(JournalClosed):
        view.get_tuple(config("t"))
    with pytest.raises(JournalClosed):
        asyncio.run(read())


def test_closing_the_view_closes_the_saver(tmp_path: Path) -> None:
    saver = JournalSaver(db=str(tmp_path / "h.db"))
    put_chain(saver, "t", [{"v": 1}])
    view = saver.with_allowlist([("tests.langgraph", "Nothing")])
    view.close()
    with pytest.raises(JournalClosed):
        saver.get_tuple(config("t"))
    saver.close()  # safe twice, through either
