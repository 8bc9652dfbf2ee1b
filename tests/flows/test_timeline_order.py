"""A run's timeline in the order the run committed it, even when records of several streams share one
millisecond: the streams are kept apart, so only the records' epochs say that a resume's first step
came after its ``resumed`` event."""

from __future__ import annotations

from pathlib import Path

from flows._timeline import timeline
from journal import FileJournal, RunState


def test_records_of_one_millisecond_are_shown_in_the_order_of_their_epochs(tmp_path: Path) -> None:
    jr = FileJournal(tmp_path / "journal", clock=lambda: 1_700_000_000_000)  # every record: one ms
    info, first = jr.begin("f", "s", {})
    jr.append(first, "steps", {"step": "a", "position": 0, "attempt": 1, "epoch": 1, "ok": True, "result": 1})
    jr.append(first, "run", {"event": "failed", "epoch": 1, "error": {"code": "x", "message": "m"}})
    jr.finish(first, RunState.FAILED, {"code": "x", "message": "m"})
    second = jr.acquire(info.run_id)
    jr.append(second, "run", {"event": "resumed", "epoch": 2, "changed": False})
    step_b = {"step": "b", "position": 1, "attempt": 1, "epoch": 2, "ok": True, "result": 2}
    jr.append(second, "steps", step_b)
    jr.append(second, "run", {"event": "output", "output": 2})
    shown = [(e["kind"], e.get("epoch")) for e in timeline(jr, info.run_id)["timeline"]]
    assert shown == [("step", 1), ("failed", 1), ("resumed", 2), ("step", 2), ("output", None)]
