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
from typing import Any

import pytest

from flows.langgraph import JournalSaver, JournalStore
from flows.langgraph._store import scope_of
from tests.conftest import ROOT
from tests.langgraph.graph_child import NAMESPACE, NODES, build, run

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


def _kill_at_random(child: subprocess.Popen[str], rng: random.Random) -> str | None:
    """Let the child start ``k`` nodes (random), wait a random moment, SIGKILL it. The child's
    ``done`` line when it finished before the kill came, else None."""
    assert child.stdout is not None
    target = rng.randrange(0, NODES + 1)
    started = 0
    while started < target:
        line = child.stdout.readline()
        if not line or line.startswith("done"):
            finished = child.wait(timeout=60) == 0 and line.startswith("done")
            return line.strip() if finished else None
        started += line.startswith("node")
    time.sleep(rng.uniform(0, 0.06))
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=60)
    return None


@pytest.mark.slow
@pytest.mark.timeout(600)  # each child imports LangGraph anew: seconds apiece on a loaded machine
def test_a_graph_killed_between_nodes_resumes_without_losing_or_doubling_store_writes(
    journal_location: str, tmp_path: Path
) -> None:
    rng = random.Random(20261202)
    db = tmp_path / "history.db"
    finished: str | None = None
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
    if finished:  # a child that says it is done ran every node, once each
        assert finished == "done " + json.dumps(list(range(NODES)))
    else:
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


def test_a_thread_killed_after_a_task_wrote_but_before_the_next_checkpoint_resumes_past_that_task(
    journal_location: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What a kill leaves under LangGraph's default (async) durability, made on purpose: the first
    node's writes are stored against the checkpoint before it, the checkpoint after it never is.
    ``get_state`` then shows the node's output in the values and nothing in ``next``; the thread is
    not done: a resume takes the stored writes as the node's result and runs the rest, once each."""
    config: Any = {"configurable": {"thread_id": "cut"}}
    with (
        JournalSaver(journal=journal_location) as saver,
        JournalStore(db=str(tmp_path / "history.db"), journal=journal_location) as store,
    ):
        build().compile(checkpointer=saver, store=store, interrupt_before=["n0"]).invoke({"done": []}, config)
        graph = build().compile(checkpointer=saver, store=store)
        (task,) = graph.get_state(config).tasks
        saver.put_writes(graph.get_state(config).config, [("done", [0]), ("branch:to:n1", None)], task.id)
        cut = graph.get_state(config)
        assert (cut.values, cut.next) == ({"done": [0]}, ())  # what the crash test once took for the end
        capsys.readouterr()

        assert run(graph, config) == list(range(NODES))
        started = [line for line in capsys.readouterr().out.splitlines() if line.startswith("node")]
        assert started == [f"node {i}" for i in range(1, NODES)]  # n0's stored writes stand for it
        end = saver.get_tuple({"configurable": {"thread_id": "cut", "checkpoint_ns": ""}})
        assert end is not None
        assert end.checkpoint["channel_values"]["done"] == list(range(NODES))
        assert graph.get_state(config).tasks == ()
