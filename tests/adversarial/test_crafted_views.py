"""Crafted records under the views: ``flows show``, ``flows runs`` and the timeline the dashboard
draws read every record back as untrusted input, and answer with what they can show.

Records that pass the journal's own checks (written through its API, so framing and checksums are
valid) once crashed them with ``internal_error``: a run-stream event naming another stream's kind
(``{"event": "step"}``) was shown as a step and its missing fields indexed; a LangGraph thread's
checkpoint namespace given as a list was used as a dictionary key; a run's error code that is not a
string failed the whole ``flows runs`` listing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import journal
from flows._timeline import timeline
from tests.flows.helpers import flows, json_of

RUN_EVENTS: dict[str, dict[str, Any]] = {
    "a step": {"event": "step"},
    "a learn": {"event": "learn"},
    "a learn with keys a number": {"event": "learn", "text": "x", "keys": 5},
    "a checkpoint with numbers for nodes": {"event": "checkpoint", "nodes": [1, 2]},
    "a kind of its own": {"event": "kind", "kind": "step"},
    "a name that is not text": {"event": ["step"]},
}


def _journal(tmp_path: Path) -> tuple[Path, journal.FileJournal]:
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir(parents=True)
    return db, journal.FileJournal(db.parent / "flows-journal")


@pytest.mark.parametrize("payload", RUN_EVENTS.values(), ids=list(RUN_EVENTS))
def test_a_run_event_naming_another_kind_is_shown_as_an_event(
    tmp_path: Path, payload: dict[str, Any]
) -> None:
    db, jr = _journal(tmp_path)
    info, lease = jr.begin("myflow", "weather", {})
    jr.append(lease, "run", payload)
    jr.finish(lease, journal.RunState.DONE)
    (entry,) = timeline(jr, info.run_id)["timeline"]
    assert entry["kind"] == "event"
    jr.close()
    shown = flows(db, "show", info.run_id)
    assert shown.returncode == 0, shown.stderr
    assert " event " in shown.stdout
    assert json_of(flows(db, "--json", "show", info.run_id))["timeline"][0]["kind"] == "event"


def test_a_langgraph_threads_namespace_that_is_not_text_is_shown(tmp_path: Path) -> None:
    db, jr = _journal(tmp_path)
    info, lease = jr.begin("langgraph-thread", "langgraph", {"langgraph": {"thread": "t1", "generation": 1}})
    writes = {"kind": "writes", "ns": ["x"], "checkpoint": "c1", "task": "t", "path": "~__pregel_pull, agent"}
    jr.append(lease, "checkpoints", {**writes, "writes": []})
    jr.append(lease, "checkpoints", {"kind": "checkpoint", "ns": ["x"], "id": "c2", "parent": ["c1"]})
    jr.append(lease, "checkpoints", {"kind": "checkpoint", "ns": {"a": 1}, "id": {"b": 2}, "parent": "c1"})
    jr.finish(lease, journal.RunState.DONE)
    jr.close()
    shown = flows(db, "show", info.run_id)
    assert shown.returncode == 0, shown.stderr
    kinds = [e["kind"] for e in json_of(flows(db, "--json", "show", info.run_id))["timeline"]]
    assert kinds == ["writes", "checkpoint", "checkpoint"]


def test_a_runs_error_code_that_is_not_text_does_not_fail_the_listing(tmp_path: Path) -> None:
    db, jr = _journal(tmp_path)
    ok, lease = jr.begin("myflow", "weather", {})
    jr.finish(lease, journal.RunState.DONE)
    bad, lease = jr.begin("myflow", "weather", {})
    jr.finish(lease, journal.RunState.FAILED, {"code": ["c"], "message": {"m": 1}})
    jr.close()
    listed = flows(db, "runs")
    assert listed.returncode == 0, listed.stderr
    assert ok.run_id in listed.stdout and bad.run_id in listed.stdout and '["c"]' in listed.stdout


@pytest.mark.parametrize(
    "finding",
    [{"text": "not a store item"}, {"metadata": {"key": 5, "value": "x"}}, "a string", None],
)
def test_a_langgraph_store_runs_record_that_is_not_an_item_is_shown(tmp_path: Path, finding: object) -> None:
    db, jr = _journal(tmp_path)
    info, lease = jr.begin("langgraph-store", "langgraph:x", {})
    jr.append(lease, "memory-learn", {"finding": finding})
    jr.finish(lease, journal.RunState.DONE)
    jr.close()
    shown = flows(db, "show", info.run_id)
    assert shown.returncode == 0, shown.stderr
    assert [e["kind"] for e in json_of(flows(db, "--json", "show", info.run_id))["timeline"]] == ["learn"]
