"""A store used after ``close()`` fails with ``memory_store_closed``: it never quietly opens its
history DB and journal again (nothing would close them), on any read, write, sync or session."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memory


def _store(tmp_path: Path) -> tuple[memory.MemoryStore, str]:
    store = memory.MemoryStore(tmp_path / "history.db")
    with store.session(scope="notes") as s:
        key = s.learn({"text": "the kettle is in the left cupboard", "tags": ["home"]}).key
    return store, key


USES: dict[str, Callable[[memory.MemoryStore, str], Any]] = {
    "recall": lambda st, key: st.recall(scope="notes"),
    "why": lambda st, key: st.why("kettle"),
    "get": lambda st, key: st.get(key),
    "current": lambda st, key: st.current(key),
    "scopes": lambda st, key: st.scopes(),
    "history": lambda st, key: st.history(key),
    "sync": lambda st, key: st.sync(),
    "materialize": lambda st, key: st.materialize(),
    "session": lambda st, key: st.session(scope="notes"),
    "journal": lambda st, key: st.open_journal(),
    "arecall": lambda st, key: asyncio.run(st.arecall(scope="notes")),
}


@pytest.mark.parametrize("use", sorted(USES))
def test_a_closed_store_refuses_every_use_and_opens_nothing_again(tmp_path: Path, use: str) -> None:
    store, key = _store(tmp_path)
    store.close()
    with pytest.raises(memory.StoreClosed) as err:
        USES[use](store, key)
    assert err.value.code == "memory_store_closed" and str(tmp_path / "history.db") in str(err.value)
    assert store._journal is None  # nothing was opened again
    store.close()  # still safe twice
    again = memory.MemoryStore(tmp_path / "history.db")  # a new store reads what the old one wrote
    assert [f.key for f in again.recall(scope="notes")] == [key]
    again.close()


def test_a_with_block_closes_its_store_for_good(tmp_path: Path) -> None:
    with memory.MemoryStore(tmp_path / "history.db") as store, store.session(scope="notes") as s:
        s.learn({"text": "milk"})
    with pytest.raises(memory.StoreClosed):
        store.recall(scope="notes")
