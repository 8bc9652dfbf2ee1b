"""Small builders for the LangGraph adapter tests."""

from __future__ import annotations

import time
from typing import Any

from langgraph.checkpoint.base import Checkpoint, empty_checkpoint

from flows.langgraph import JournalSaver
from flows.langgraph._catalog import CATALOG_FLOW, THREAD_FLOW
from journal import JournalBackend, RunInfo


def config(thread_id: str, checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
    """A LangGraph config naming a thread (and a checkpoint)."""
    c: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id is not None:
        c["checkpoint_id"] = checkpoint_id
    return {"configurable": c}


def checkpoint(values: dict[str, Any] | None = None, versions: dict[str, Any] | None = None) -> Checkpoint:
    """A fresh checkpoint (new time-ordered id) with the given channel values and versions."""
    cp = empty_checkpoint()
    cp["channel_values"] = dict(values or {})
    cp["channel_versions"] = dict(versions if versions is not None else {k: 1 for k in values or {}})
    return cp


def put_chain(saver: JournalSaver, thread_id: str, steps: list[dict[str, Any]], ns: str = "") -> list[str]:
    """Put one checkpoint per step, each the child of the last; ``steps`` are the changed values
    (versions count up per channel). Return the checkpoint ids."""
    ids: list[str] = []
    values: dict[str, Any] = {}
    versions: dict[str, int] = {}
    parent: str | None = None
    for i, changed in enumerate(steps):
        values.update(changed)
        for k in changed:
            versions[k] = versions.get(k, 0) + 1
        cp = checkpoint(values, versions)
        saver.put(
            config(thread_id, parent, ns),
            cp,
            {"source": "loop", "step": i},
            {k: versions[k] for k in changed},
        )
        parent = cp["id"]
        ids.append(cp["id"])
    return ids


def thread_runs(backend: JournalBackend) -> list[RunInfo]:
    """The journal's thread runs, oldest first."""
    return sorted(
        (r for r in backend.runs() if r.flow == THREAD_FLOW), key=lambda r: (r.created_ms, r.run_id)
    )


def catalog_runs(backend: JournalBackend) -> list[RunInfo]:
    """The journal's catalog runs, oldest first."""
    return sorted(
        (r for r in backend.runs() if r.flow == CATALOG_FLOW), key=lambda r: (r.created_ms, r.run_id)
    )


def next_millisecond() -> None:
    """Wait for the clock's next millisecond: the order of items updated within one millisecond is
    not defined, and a fast machine makes several puts in one."""
    last = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 == last:
        time.sleep(0.0002)
