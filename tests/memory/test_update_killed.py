"""An update killed at each rename it makes, on a file journal: no reader, already open or opened
after, ever finds the memory with two live versions, and the memory stays one line.

The update retires the version it replaces (its retired file) before it renames its own version
into place. Before, it renamed first: a kill in between left both versions answered by every read
of every process (a fresh store's open does not walk the journal again in the same boot) until a
``sync``, and a reader in another process caught the two for the length of that window in every
update.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import memory
from tests._helpers.failpoints import run_armed

_UPDATE = """
import sys
import memory
db, mid = sys.argv[1:3]
store = memory.MemoryStore(db)
with store.session(scope="team") as s:
    print("ACK", s.update(mid, {"text": "the second version"}).key, flush=True)
"""


def _live(store: memory.MemoryStore) -> list[str]:
    return sorted(r.text for r in store.recall(scope="team", limit=None))


@pytest.mark.parametrize("nth", [1, 2, 3, 4])
def test_an_update_killed_after_any_rename_never_leaves_two_live_versions(tmp_path: Path, nth: int) -> None:
    db = tmp_path / "history.db"
    store = memory.MemoryStore(db)  # a reader that stays open across the kill
    with store.session(scope="team") as s:
        mid = s.learn({"text": "the first version"}).memory_id
    done = run_armed(f"staging.after_rename=kill:nth{nth}", _UPDATE, str(db), mid, drop=("FLOWS_JOURNAL",))
    assert done.returncode in (0, -9), done.stderr[-2000:]
    killed = done.returncode == -9
    with memory.MemoryStore(db) as fresh:
        for reader in (store, fresh):
            live = _live(reader)
            # and never none: a kill between the retirement and the rename leaves the old version's
            # file beside its retired file, and the read that meets it publishes the new version
            assert len(live) == 1, f"not one live version of one memory after a kill at rename {nth}: {live}"
        now = store.current(mid)  # the committed version is the memory's, even before a sync
        assert now is not None
        if not killed or "ACK" in done.stdout:
            assert now.text == "the second version"
    with store.session(scope="team") as s:  # an update by memory id builds on it: one line
        third = s.update(mid, {"text": "the third version"})
    assert third.memory_id == mid
    assert _live(store) == ["the third version"]
    store.sync()
    assert _live(store) == ["the third version"]
    kinds = [e.kind for e in store.history(mid)]
    assert kinds.count("superseded") == kinds.count("learned") - 1
    assert memory.check_store(store) == []
    store.close()
