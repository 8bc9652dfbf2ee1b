"""``flows resume`` of a run the LangGraph adapters keep: refused, whatever ``--file`` and
``--allow-changed`` say.

Such a run records no flow file, so resume used to say "name its flow file with --file FILE", then
"--allow-changed"; with both it ran any flow inside the thread's run and finished it, and every
later ``graph.invoke`` on the thread failed (``journal_lease_lost``, "retry") for good.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

import flows
import memory
from flows.langgraph import JournalSaver
from journal import RunState
from tests.conftest import ROOT
from tests.langgraph.helpers import config


class State(TypedDict):
    n: int


def _graph(saver: JournalSaver) -> Any:
    builder = StateGraph(State)
    builder.add_node("inc", lambda s: {"n": s["n"] + 1})
    builder.add_edge(START, "inc")
    builder.add_edge("inc", END)
    return builder.compile(checkpointer=saver)


ANY_FLOW = """
import flows

@flows.flow(scope="x")
async def body(f):
    return "an unrelated flow"
"""

STORE_KILLED = """
import os, sys
from flows.langgraph import JournalStore
store = JournalStore(db=sys.argv[1])
store.put(("notes",), "k", {"text": "kept"})
os._exit(9)
"""


def test_flows_resume_refuses_langgraphs_runs_whatever_file_and_allow_changed_say(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    any_flow = tmp_path / "any.py"
    any_flow.write_text(ANY_FLOW)
    with JournalSaver(db=str(db)) as saver:
        assert _graph(saver).invoke({"n": 1}, config("t1")) == {"n": 2}
    # a store's process killed while its run is open leaves the run interrupted (a store closed
    # finishes its run done, which resume refuses as done)
    killed = subprocess.run(
        [sys.executable, "-c", STORE_KILLED, str(db)],
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert killed.returncode == 9, killed.stderr
    with memory.MemoryStore(db) as mem:
        backend = mem.open_journal()
        runs = {r.flow: r for r in backend.runs()}
        assert {r.state for r in runs.values()} == {RunState.INTERRUPTED}
        assert {"langgraph-thread", "langgraph-catalog", "langgraph-store"} == set(runs)
        for flow in ("langgraph-thread", "langgraph-catalog", "langgraph-store"):
            before = runs[flow]
            argv = ["resume", before.run_id, "--db", str(db), "--file", str(any_flow), "--allow-changed"]
            done = subprocess.run(
                [sys.executable, "-m", "flows", *argv],
                env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert done.returncode == 1, done.stdout + done.stderr
            assert "error[flow_langgraph_not_resumable]" in done.stderr and before.run_id in done.stderr
            assert "an unrelated flow" not in done.stdout
            run_id = before.run_id
            for call in (
                lambda: flows.resume(run_id, db=db, flow_file=any_flow, allow_changed=True),  # noqa: B023
                lambda: asyncio.run(flows.aresume(run_id, store=mem, allow_changed=True)),  # noqa: B023
                lambda: flows.resume(run_id, store=mem),  # noqa: B023
            ):
                with pytest.raises(flows.LangGraphRunNotResumable) as raised:
                    call()
                assert raised.value.code == "flow_langgraph_not_resumable" and raised.value.run_id == run_id
                assert "nothing was written" in str(raised.value)
            after = backend.run(run_id)  # nothing was written: no new lease, no new state
            assert (after.state, after.epoch, after.updated_ms) == (
                before.state,
                before.epoch,
                before.updated_ms,
            )
    with JournalSaver(db=str(db)) as saver:  # the thread goes on where it was
        graph = _graph(saver)
        assert graph.get_state(config("t1")).values == {"n": 2}
        assert graph.invoke({"n": 100}, config("t1")) == {"n": 101}


def test_the_refusal_of_a_thread_run_says_how_langgraph_resumes_it(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with JournalSaver(db=str(db)) as saver:
        _graph(saver).invoke({"n": 1}, config("a thread"))
    with memory.MemoryStore(db) as mem:
        (run,) = [r for r in mem.open_journal().runs() if r.flow == "langgraph-thread"]
        with pytest.raises(flows.LangGraphRunNotResumable) as raised:
            flows.resume(run.run_id, store=mem)
    said = str(raised.value)
    assert "LangGraph thread 'a thread'" in said
    assert "graph.invoke(None, {'configurable': {'thread_id': 'a thread'}})" in said
