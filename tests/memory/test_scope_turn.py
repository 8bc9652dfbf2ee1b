"""``MemoryStore.turn(scope)``: the turn every update, forget and erase of a scope holds from its look
to its last write, held by a caller so that a look made in it sees each memory of the scope whole
(a LangGraph store's delete looks at its item in it). While one process holds it, another's update
of that scope waits; the holder's own thread goes on (the turn is re-entrant within a thread)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import memory
from tests.conftest import ROOT

_HOLD = """
import sys, time
import memory
with memory.MemoryStore(sys.argv[1]) as store, store.turn("desk"):
    print("holding", flush=True)
    time.sleep(1.5)
    print(time.monotonic_ns(), flush=True)
"""


def test_another_process_update_waits_for_the_scopes_turn(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="desk") as s:
        old = s.learn({"text": "the desk opens at nine"})
        holder = subprocess.Popen(
            [sys.executable, "-c", _HOLD, str(db)],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
            s.update(old.memory_id, {"text": "the desk opens at ten"})
            updated_at = time.monotonic_ns()
            out, _ = holder.communicate(timeout=60)
        finally:
            holder.kill()
        assert holder.returncode == 0
        assert int(out.split()[-1]) < updated_at  # the update waited for the turn to be let go


def test_the_holders_own_thread_updates_and_forgets_in_the_turn(tmp_path: Path) -> None:
    with memory.MemoryStore(tmp_path / "history.db") as store, store.session(scope="desk") as s:
        old = s.learn({"text": "the desk opens at nine"})
        with store.turn("desk"):
            new = s.update(old.memory_id, {"text": "the desk opens at ten"})
            s.forget(new.key, reason="closed for good")
        assert store.recall(scope="desk") == []


@pytest.mark.parametrize("scope", ["", "\x00", 7])
def test_a_scope_no_session_can_have_is_refused(tmp_path: Path, scope: object) -> None:
    with (
        memory.MemoryStore(tmp_path / "history.db") as store,
        pytest.raises(memory.ArgumentInvalid),
        store.turn(scope),  # type: ignore[arg-type]
    ):
        pass
