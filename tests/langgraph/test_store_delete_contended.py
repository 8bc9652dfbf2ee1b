"""A delete whose item another process keeps writing (a read that refreshes its TTL re-learns the
item) either ends with the item gone or says it did not.

Each forget of the version a delete saw is answered by the refresh that replaced it; the delete
follows that answer to the version that replaced it. Before, it gave up after a few rounds and
returned as if done, the item live and kept alive by the other process's refreshes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from flows.langgraph import ItemContended, JournalStore
from flows.langgraph._store import scope_of
from memory import retired_dir
from tests.conftest import ROOT

TTL = {"default_ttl": 10.0, "refresh_on_read": True}


def _stores(tmp_path: Path) -> tuple[JournalStore, JournalStore]:
    db = str(tmp_path / "history.db")
    return JournalStore(db=db, ttl=TTL), JournalStore(db=db, ttl=TTL)


def _refresh_before_forgets(deleter: JournalStore, refresher: JournalStore, times: int | None) -> list[str]:
    """Make ``refresher`` read the item with a refresh (a new version) just before each of the
    deleter's first ``times`` forgets (every one when None); the keys the deleter forgot."""
    real = deleter._forget
    forgot: list[str] = []

    def forget(key: str, root: Any, reason: str) -> Any:
        if times is None or len(forgot) < times:
            refresher.get(("r",), "k", refresh_ttl=True)
        forgot.append(key)
        return real(key, root, reason)

    deleter._forget = forget  # type: ignore[method-assign]
    return forgot


@pytest.mark.parametrize("refreshes", [1, 5, 70])
def test_a_delete_follows_each_refresh_that_overtook_it_and_ends_with_the_item_gone(
    tmp_path: Path, refreshes: int
) -> None:
    deleter, refresher = _stores(tmp_path)
    with deleter, refresher:
        deleter.put(("r",), "k", {"v": 1})
        forgot = _refresh_before_forgets(deleter, refresher, refreshes)
        deleter.delete(("r",), "k")
        assert len(forgot) == refreshes + 1  # each version the refreshes made, then the last
        assert deleter.get(("r",), "k") is None
        assert refresher.get(("r",), "k") is None


def test_a_delete_overtaken_every_time_says_so_instead_of_returning_as_done(tmp_path: Path) -> None:
    deleter, refresher = _stores(tmp_path)
    with deleter, refresher:
        deleter.put(("r",), "k", {"v": 1})
        _refresh_before_forgets(deleter, refresher, None)
        with pytest.raises(ItemContended, match="under every one of 8 attempts") as raised:
            deleter.delete(("r",), "k")
        assert raised.value.code == "langgraph_item_contended"
        assert deleter.get(("r",), "k") is not None  # what the error says: live still


_REFRESH = """
import sys, time
from flows.langgraph import JournalStore
with JournalStore(db=sys.argv[1], ttl={"default_ttl": 10.0, "refresh_on_read": True}) as store:
    store.get(("r",), "k", refresh_ttl=True)
    print(time.monotonic_ns(), flush=True)
"""


def test_a_delete_waits_for_another_process_update_in_flight_and_forgets_what_it_made(tmp_path: Path) -> None:
    """Another process's read refreshing the item (an update) is paused between its retirement of
    the version it replaces and its rename of the new one. The delete waits for it to end, then
    forgets the version it made: the item is gone for every process."""
    db = tmp_path / "history.db"
    with JournalStore(db=str(db), ttl=TTL) as deleter:
        deleter.put(("r",), "k", {"v": 1})
        old = deleter.finding(("r",), "k")
        assert old is not None
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "FLOWS_FAILPOINTS": "memory.after_retire_replaced=sleep2000",
        }
        refresher = subprocess.Popen(
            [sys.executable, "-c", _REFRESH, str(db)], env=env, stdout=subprocess.PIPE, text=True
        )
        try:
            retired = retired_dir(db, scope_of(("r",))) / f"{old.key}.json"
            deadline = time.monotonic() + 60
            while not retired.exists():  # the refresh is inside its update, paused
                assert refresher.poll() is None and time.monotonic() < deadline
                time.sleep(0.01)
            deleter.delete(("r",), "k")
            deleted_at = time.monotonic_ns()
            out, _ = refresher.communicate(timeout=60)
        finally:
            refresher.kill()
        assert refresher.returncode == 0
        assert int(out.split()[-1]) < deleted_at  # the delete waited for the update to end
        assert deleter.get(("r",), "k") is None
    with JournalStore(db=str(db), ttl=TTL) as fresh:
        assert fresh.get(("r",), "k") is None

