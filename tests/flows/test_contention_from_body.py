"""An error of the contention family out of the body is the body's failure unless the journal says
this run was taken over: a resume the body makes of a run a live process drives
(``journal_lease_held`` about that other run) marks this run failed with it, recorded; a run truly
taken over (its lease lost) is left to its new holder, nothing recorded over it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import flows
import journal
from journal import RunState
from tests.flows.helpers import flows as flows_cli


def _journal(db: Path) -> journal.FileJournal:
    return journal.FileJournal(db.parent / "flows-journal")


def test_a_lease_held_error_about_another_run_fails_this_run_and_is_recorded(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    holder = _journal(db)  # another driver: it holds run X's lease
    other, _ = holder.begin("held", "s", {})
    try:

        async def orchestrator(f: flows.FlowContext) -> None:
            await flows.aresume(other.run_id, db=db)

        result = flows.run(flows.flow(name="orchestrator")(orchestrator), db=db)
        assert isinstance(result.error, journal.JournalLeaseHeld)
        assert result.state is RunState.FAILED
        info = _journal(db).run(result.run_id)
        assert info.state is RunState.FAILED
        assert info.error is not None and info.error["code"] == "journal_lease_held"
        events = [r.payload["event"] for r in _journal(db).read(result.run_id, "run")]
        assert events == ["failed"]

        src = tmp_path / "orchestrator.py"
        src.write_text(
            "import flows, os\n@flows.flow(scope='o')\nasync def body(f):\n"
            f"    await flows.aresume({other.run_id!r}, db=os.environ['DB'])\n"
        )
        done = flows_cli(db, "run", str(src), env={"DB": str(db)})
        assert done.returncode == 1
        last = done.stderr.strip().splitlines()[-1]
        (mine,) = [i for i in _journal(db).runs() if i.flow == "orchestrator" and i.run_id != result.run_id]
        assert _journal(db).run(mine.run_id).state is RunState.FAILED
        assert last.startswith("flows: error[journal_lease_held]: "), last
        assert f"an error about root run {other.run_id}" in last
        assert last.endswith(f"(root run {mine.run_id})"), last
    finally:
        holder.close()


def test_a_run_taken_over_while_its_body_runs_is_left_to_its_new_holder(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    taker = _journal(db)
    taken: list[journal.Lease] = []

    def take_over(run_id: str) -> None:
        # the lease lock removed (as a careless cleanup would), so another driver acquires the run
        os.remove(db.parent / "flows-journal" / "runs" / run_id / "lease.lock")
        taken.append(taker.acquire(run_id))

    async def body(f: flows.FlowContext) -> Any:
        await f.step("take", take_over, f.run_id)
        await f.step("after", lambda: 1)  # its record is refused: the lease was lost

    try:
        result = flows.run(flows.flow(name="taken")(body), db=db)
        assert isinstance(result.error, journal.JournalLeaseLost)
        info = _journal(db).run(result.run_id)
        assert info.state is RunState.RUNNING and info.epoch == 2 and info.error is None
        assert [r.payload.get("event") for r in _journal(db).read(result.run_id, "run")] == []
    finally:
        taker.close()
