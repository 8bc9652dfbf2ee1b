"""The failpoint sweep: every failpoint x each fault x every write operation, then recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import failpoints


def test_every_failpoint_in_the_write_paths_is_reached_by_some_operation(tmp_path: Path) -> None:
    names = failpoints.failpoint_names()
    assert {"staging.after_rename", "linelog.before_fsync", "ledger.reconcile_before_append"} <= set(names)
    reached = set()
    for op in failpoints.OPERATIONS:
        reached |= set(failpoints.reached(op, tmp_path, names))
    assert reached == set(names)


@pytest.mark.slow
def test_every_failpoint_killed_or_failing_leaves_nothing_lost_doubled_or_made_up() -> None:
    tally = failpoints.run_sweep(failpoints.FAULTS_QUICK)
    assert tally.cases >= 90
    assert tally.acknowledged > 100
    assert tally.clean, "\n".join([str(tally.row()), *tally.notes])


def test_a_fault_that_never_fires_is_reported_not_counted_as_a_pass(tmp_path: Path) -> None:
    tally = failpoints.Tally("probe")
    failpoints.run_case("sync", "linelog.before_append", "EIO", tmp_path, tally)  # sync never appends
    assert tally.unexpected == 1
    assert "never fired" in tally.notes[0]
