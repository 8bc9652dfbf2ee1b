"""A root run as JSON and its timeline: the one owner of both, below the CLI (``flows runs``,
``flows show``) and the dashboard (its runs list, run page and ``/api``), which import it and
nothing of each other.

Every value here is read from the journal, which is untrusted: a field of the wrong type is shown
as it is or left out, never trusted to have a shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import memory
from flows import _langgraph_view as langgraph_view
from journal import JournalBackend, Record, RunInfo


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _output_of(events: Sequence[Record]) -> Any:
    for rec in events:
        if rec.key == "output" and rec.payload.get("event") == "output":
            return rec.payload.get("output")
    return None


def _citation(rec: Record) -> dict[str, str]:
    return {"runId": rec.run_id, "stream": rec.stream, "id": rec.id}


def _step_entry(rec: Record) -> dict[str, Any]:
    p = rec.payload
    entry: dict[str, Any] = {
        "kind": "step",
        "step": f"{p.get('step')}#{p.get('position')}",
        "name": p.get("step"),
        "attempt": p.get("attempt"),
        "final": p.get("final"),
        "epoch": p.get("epoch"),
        "startedMs": p.get("startedMs"),
        "durationMs": p.get("durationMs"),
    }
    if p.get("ok"):
        entry["result"] = p.get("result")
    else:
        entry["error"] = p.get("error")
        if "retryInMs" in p:
            entry["retryInMs"] = p.get("retryInMs")
    return entry


def _learn_entry(rec: Record) -> dict[str, Any]:
    p = rec.payload
    finding = _mapping(p.get("finding"))
    entry = {"kind": "learn", "key": p.get("id"), "text": finding.get("text"), "tags": finding.get("tags")}
    if "supersedes" in p:  # a new version of a memory: the version it replaced
        entry["supersedes"] = p.get("supersedes")
    return entry


def _forget_entry(rec: Record) -> dict[str, Any]:
    p = rec.payload
    ids = p.get("ids")
    if isinstance(ids, list):  # a forget by filter: one record, every key it retired
        keys = [pair[0] for pair in ids if isinstance(pair, list) and pair]
        return {
            "kind": "forget",
            "keys": keys,
            "filter": p.get("filter"),
            "reason": p.get("reason"),
            "by": None,
        }
    return {"kind": "forget", "key": p.get("id"), "reason": p.get("reason"), "by": p.get("by")}


RUN_EVENTS = frozenset({"failed", "interrupted", "output", "resumed"})
"""The events a runtime writes to a run's own stream: the kinds its entries may take."""


def _event_entry(rec: Record) -> dict[str, Any]:
    """A run-stream event. Its kind is its ``event`` when that is one the runtime writes; any other
    (a record read back is untrusted) is an ``event`` entry keeping the name, never the kind of
    another stream's entry (a step, a learn), whose fields it need not have."""
    p = dict(rec.payload)
    name = p.pop("event", "event")
    if isinstance(name, str) and name in RUN_EVENTS:
        return {**p, "kind": name}
    return {**p, "kind": "event", "name": name if isinstance(name, str) else None}


def timeline(backend: JournalBackend, run_id: str) -> dict[str, Any]:
    """A root run and everything it recorded, in commit order: steps (each attempt), learns,
    forgets (a finding forgotten, or superseded ``by`` another), and the run's own events (resumes,
    an interruption, the output). Each entry cites its record."""
    from flows._runtime import RUN_STREAM
    from flows._steps import STEPS_STREAM

    info = backend.run(run_id)
    sources: list[tuple[int, str, Callable[[Record], dict[str, Any]]]] = [
        (0, STEPS_STREAM, _step_entry),
        (1, memory.STREAM, _learn_entry),
        (2, memory.RETIRE_STREAM, _forget_entry),
        (3, RUN_STREAM, _event_entry),
    ]
    # a LangGraph run's own streams, and its store's learns and forgets shown as items
    own = langgraph_view.timeline_sources(info, (memory.STREAM, memory.RETIRE_STREAM))
    sources = [s for s in sources if s[1] not in {o[1] for o in own}] + own
    entries: list[tuple[tuple[int, int, int], dict[str, Any]]] = []
    events: Sequence[Record] = ()
    for rank, stream, make in sources:
        records = backend.read(run_id, stream)
        if stream == RUN_STREAM:
            events = records
        for rec in records:
            entry = {**make(rec), "tsMs": rec.ts_ms, "citation": _citation(rec)}
            entries.append(((rec.ts_ms, rank, rec.seq), entry))
    entries.sort(key=lambda e: e[0])
    shown = _by_epoch_within_a_millisecond([e for _, e in entries])
    langgraph_view.finish(info, shown)
    return {
        **run_json(info, events),
        "timeline": shown,
    }


def _by_epoch_within_a_millisecond(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``entries`` (sorted by time, then stream) with the ties of one millisecond put in the order
    the run committed them: each stream is kept apart, so a resume's first step could share the
    millisecond of its ``resumed`` event and be shown before it. A ``resumed`` event is the first
    record of its epoch, so within a millisecond entries go by epoch (steps and the run's events
    name theirs; the others take the one before them), the ``resumed`` event first in its own."""
    epoch = 1
    keyed: list[tuple[tuple[int, int, int, int], dict[str, Any]]] = []
    for i, entry in enumerate(entries):
        named = entry.get("epoch")
        if type(named) is int:
            epoch = named
        first = 0 if entry.get("kind") == "resumed" else 1
        keyed.append(((int(entry["tsMs"]), epoch, first, i), entry))
    keyed.sort(key=lambda k: k[0])
    return [e for _, e in keyed]


def run_json(r: RunInfo, events: Sequence[Record]) -> dict[str, Any]:
    """A root run's summary as JSON (``flows runs --json``, the dashboard's run list and run page):
    its identity, state, error, input, the output its ``output`` event recorded (``events``: its
    run stream, or none), and what a LangGraph run is."""
    return {
        "runId": r.run_id,
        "flow": r.flow,
        "scope": r.scope,
        "state": r.state.value,
        "epoch": r.epoch,
        "createdMs": r.created_ms,
        "updatedMs": r.updated_ms,
        "error": r.error,
        "source": r.meta.get("source"),
        "sourceSha256": r.meta.get("sourceSha256"),
        "input": r.meta.get("input"),
        "output": _output_of(events),
        **({"langgraph": described} if (described := langgraph_view.describe(r)) else {}),
    }
