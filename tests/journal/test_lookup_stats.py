"""A file journal's lookup by hint looks at each folder of the run once: a fresh journal object
checks the run's folder and its ``streams`` folder as it first finds them (one ``lstat`` each,
which it also keeps as the folders it guards), and the next lookup guards them (one each again)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import journal


def test_a_first_lookup_by_hint_looks_at_each_run_folder_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    written = [jr.append(lease, "memory-learn", {"n": i}) for i in range(3)]
    hints = jr.hints(info.run_id, "memory-learn")
    jr.close()
    run = str(tmp_path / "j" / "runs" / info.run_id)
    looked: list[str] = []
    real = os.lstat

    def counting(path: str | os.PathLike[str], *args: object, **kwargs: object) -> os.stat_result:
        looked.append(os.fspath(path))
        return real(path, *args, **kwargs)  # type: ignore[arg-type]

    fresh = journal.FileJournal(tmp_path / "j")
    try:
        monkeypatch.setattr(os, "lstat", counting)
        second = written[1]
        assert fresh.lookup(info.run_id, "memory-learn", second.id, hint=hints[second.id]) == second
        assert (looked.count(run), looked.count(f"{run}/streams")) == (1, 1)
        looked.clear()
        third = written[2]
        assert fresh.lookup(info.run_id, "memory-learn", third.id, hint=hints[third.id]) == third
        assert (looked.count(run), looked.count(f"{run}/streams")) == (1, 1)  # the guard, once each
    finally:
        monkeypatch.undo()
        fresh.close()


def test_a_run_folder_swapped_after_the_first_lookup_is_journal_corrupt(tmp_path: Path) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    written = [jr.append(lease, "memory-learn", {"n": i}) for i in range(2)]
    hints = jr.hints(info.run_id, "memory-learn")
    jr.close()
    fresh = journal.FileJournal(tmp_path / "j")
    try:
        first = written[0]
        assert fresh.lookup(info.run_id, "memory-learn", first.id, hint=hints[first.id]) == first
        run = tmp_path / "j" / "runs" / info.run_id
        os.rename(run, run.with_name(run.name + ".moved"))
        run.symlink_to(run.with_name(run.name + ".moved"), target_is_directory=True)
        with pytest.raises(journal.JournalCorrupt):
            fresh.lookup(info.run_id, "memory-learn", written[1].id, hint=hints[written[1].id])
    finally:
        fresh.close()
