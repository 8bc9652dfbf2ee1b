"""A real LangGraph graph on ``JournalSaver`` + ``JournalStore``, run (or resumed) in a child process.

``python -m tests.langgraph.graph_child JOURNAL DB THREAD`` runs the graph on THREAD until it ends,
printing ``node <i>`` as each node starts and ``done <json>`` at the end. The test kills it with
SIGKILL at random points and starts it again: a new run resumes the thread from its last checkpoint
(``invoke(None)``, see ``run``), or starts it when there is none.

Each node writes the store twice: its own item (``step-<i>``), and an append to the shared
``log`` item that it skips when its entry is already there (a node re-run after a crash must find
its own earlier write, or the log would lose or double it).
"""

from __future__ import annotations

import json
import operator
import sys
import time
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.store.base import BaseStore

from flows.langgraph import JournalSaver, JournalStore

NODES = 6
NAMESPACE = ("graph", "crash")


class State(TypedDict):
    done: Annotated[list[int], operator.add]


def _node(i: int) -> Any:
    def node(state: State, *, store: BaseStore) -> dict[str, Any]:
        print(f"node {i}", flush=True)
        time.sleep(0.02)  # room for a kill inside the node, before its writes
        store.put(NAMESPACE, f"step-{i}", {"node": i, "after": list(state["done"])})
        log = store.get(NAMESPACE, "log")
        entries = list(log.value["entries"]) if log else []
        if i not in entries:
            store.put(NAMESPACE, "log", {"entries": [*entries, i]})
        time.sleep(0.02)  # and after them, before the checkpoint
        return {"done": [i]}

    return node


def build() -> StateGraph:  # type: ignore[type-arg]
    """The graph: a chain of ``NODES`` nodes, each writing the store."""
    builder = StateGraph(State)
    previous = START
    for i in range(NODES):
        builder.add_node(f"n{i}", _node(i))
        builder.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    builder.add_edge(previous, END)
    return builder


def run(graph: Any, config: Any) -> list[int]:
    """Run the thread ``config`` names to its end, resuming it when it has begun; its ``done``.

    A thread has not ended while its latest checkpoint has tasks, ``state.tasks``, not only
    ``state.next``: LangGraph writes the checkpoint that follows a step in the background while the
    next step runs (its default ``async`` durability), so a kill can leave a step's task writes
    stored and the checkpoint after them lost. ``get_state`` then applies those writes to the values
    and leaves the task out of ``next``, which is empty although the graph is only one step in;
    ``invoke(None)`` takes the stored writes as the task's result and goes on.
    """
    state = graph.get_state(config)
    if state.tasks:
        result = graph.invoke(None, config)
    elif not state.values:
        result = graph.invoke({"done": []}, config)
    else:
        result = state.values
    return list(result["done"])


def main(journal: str, db: str, thread: str) -> None:
    """Run or resume the graph on ``thread`` to its end."""
    with JournalSaver(journal=journal) as saver, JournalStore(db=db, journal=journal) as store:
        graph = build().compile(checkpointer=saver, store=store)
        done = run(graph, {"configurable": {"thread_id": thread}})
        print("done " + json.dumps(done), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
