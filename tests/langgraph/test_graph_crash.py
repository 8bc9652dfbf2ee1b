"""A real graph on ``JournalSaver`` + ``JournalStore``, killed with SIGKILL at random points and
resumed from its thread's last checkpoint: no store write is lost or doubled."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.langgraph import JournalSaver, JournalStore
from flows.langgraph._store import scope_of
from tests.conftest import ROOT
from tests.langgraph.graph_child import NAMESPACE, NODES

_KILLS = 5  # at most this many kills; then the graph runs to its end


def _start(journal: str, db: Path, thread: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.langgraph.graph_child", journal, str(db), thread],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def _kill_at_random(child: subprocess.Popen[str], rng: random.Random) -> bool:
    """Let the child start ``k`` nodes (random), wait a random moment, SIGKILL it. True when it
    finished before the kill came."""
    assert child.stdout is not None
    target = rng.randrange(0, NODES + 1)
    started = 0
    while started < target:
        line = child.stdout.readline()
        if not line or line.startswith("done"):
            return child.wait(timeout=60) == 0 and line.startswith("done")
        started += line.startswith("node")
    time.sleep(rng.uniform(0, 0.06))
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    return False


@pytest.mark.slow
@pytest.mark.timeout(600)  # each child imports LangGraph anew: seconds apiece on a loaded machine
def test_a_graph_killed_between_nodes_resumes_without_losing_or_doubling_store_writes(
    journal_location: str, tmp_path: Path
) -> None:
    rng = random.Random(20261202)
    db = tmp_path / "history.db"
    finished = False
    kills = 0
    while not finished and kills < _KILLS:
        child = _start(journal_location, db, "crashy")
        try:
            finished = _kill_at_random(child, rng)
        finally:
            child.kill()
            child.wait(timeout=60)
            for pipe in (child.stdout, child.stderr):
                if pipe is not None:
                    pipe.close()
        kills += not finished
    if not finished:
        child = _start(journal_location, db, "crashy")
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err[-3000:]
        assert out.strip().splitlines()[-1] == "done " + json.dumps(list(range(NODES)))
    assert kills > 0  # with this random seed it kills at least once, so the test resumes at least once

    with (
        JournalSaver(journal=journal_location) as saver,
        JournalStore(db=str(db), journal=journal_location) as store,
    ):
        state = saver.get_tuple({"configurable": {"thread_id": "crashy", "checkpoint_ns": ""}})
        assert state is not None
        assert state.checkpoint["channel_values"]["done"] == list(range(NODES))  # each node once

        items = {i.key: i.value for i in store.search(NAMESPACE, limit=100)}
        assert set(items) == {f"step-{i}" for i in range(NODES)} | {"log"}
        assert items["log"] == {"entries": list(range(NODES))}  # nothing lost, nothing doubled
        for i in range(NODES):
            assert items[f"step-{i}"] == {"node": i, "after": list(range(i))}

        # One live finding per item: a re-run node's put found its earlier write.
        live = store.memory.recall(scope=scope_of(NAMESPACE), limit=None)
        keys = [r.metadata["key"] for r in live]
        assert sorted(keys) == sorted(items)
