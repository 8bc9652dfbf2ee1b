"""Resume republishes a root's committed findings in batches before re-running its body."""

from __future__ import annotations

from pathlib import Path

import pytest

import flows
import journal
import memory
import staging._stage
from journal import RunState
from tests._helpers.failpoints import armed
from tests.flows.helpers import check_invariants, journal_of, write_flow

TWENTY = """
for i in range(20):
    await f.memory.learn({"text": f"finding {i}"})
if __import__("os").environ.get("FAIL_AT_END"):
    raise RuntimeError("fail after learning")
"""


def _failed_twenty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost: int
) -> tuple[Path, flows.RunResult, Path, dict[str, bytes]]:
    """A root that learned twenty findings and failed, with the first ``lost`` of their files (by
    name) deleted: the DB, the run's result, the scope's folder and every file's bytes."""
    db = tmp_path / "history.db"
    flow = write_flow(tmp_path / "twenty.py", TWENTY, 'scope="batch"')
    monkeypatch.setenv("FAIL_AT_END", "1")
    first = flows.run(flow, db=db)
    assert first.state == RunState.FAILED
    monkeypatch.delenv("FAIL_AT_END")
    directory = memory.learned_dir(db, "batch")
    originals = {p.name: p.read_bytes() for p in directory.iterdir()}
    assert len(originals) == 20
    for name in sorted(originals)[:lost]:
        (directory / name).unlink()
    return db, first, directory, originals


def test_resume_republishes_lost_files_in_a_batch_and_re_learns_touch_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, first, directory, originals = _failed_twenty(tmp_path, monkeypatch, 12)

    single_publishes: list[Path] = []
    real_publish = staging._stage.Staged.publish

    def counting(self: staging._stage.Staged, final_path: object, *, sync_dir: bool = True) -> Path:
        if sync_dir and Path(str(final_path)).parent == directory:  # a learn's one-file path
            single_publishes.append(Path(str(final_path)))
        return real_publish(self, final_path, sync_dir=sync_dir)  # type: ignore[arg-type]

    monkeypatch.setattr(staging._stage.Staged, "publish", counting)
    finds: list[str] = []
    real_find = journal.FileJournal.find

    def counting_find(self: journal.FileJournal, run_id: str, stream: str, key: str) -> object:
        finds.append(key)
        return real_find(self, run_id, stream, key)

    monkeypatch.setattr(journal.FileJournal, "find", counting_find)
    resumed = flows.resume(first.run_id, db=db)
    assert resumed.state == RunState.DONE, resumed.error
    assert single_publishes == []  # every re-learn found its file in place
    assert finds == []  # and was answered from the commits republish read: no journal lookups
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == originals
    assert len(check_invariants(db, first.run_id)) == 20
    assert len(list(journal_of(db).read(first.run_id, memory.STREAM))) == 20


def test_a_run_is_marked_done_only_once_its_learned_names_are_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The names of a run's learned files are made durable before it reads done; when that fsync
    # fails the run is failed instead (a store open then restores any name a power loss took).
    db = tmp_path / "history.db"
    flow = write_flow(tmp_path / "twenty.py", TWENTY, 'scope="batch"')
    with armed(monkeypatch, "memory.before_flush_names=EIO"):
        result = flows.run(flow, db=db)
    assert result.state == RunState.FAILED
    assert isinstance(result.error, memory.Unwritable)
    assert journal_of(db).run(result.run_id).state is RunState.FAILED
    assert len(list(memory.learned_dir(db, "batch").iterdir())) == 20
    resumed = flows.resume(result.run_id, db=db)
    assert resumed.state == RunState.DONE, resumed.error


def test_a_resume_after_the_open_restored_its_files_checks_each_commit_once_and_reads_none_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open's walk for lost files checks each commit it reads and publishes its file; the resume
    right after (``republish_run``) neither checks those commits again (the journal-wide scan for
    retirements included) nor reads back the files the walk has just written. Each body re-learn
    still reads its file before it is answered from the commit."""
    import memory._finding
    import memory._learn
    import memory._publisher

    db, first, directory, originals = _failed_twenty(tmp_path, monkeypatch, 20)
    checked: list[str] = []
    real_problem = memory._finding._commit_problem

    def counting_problem(record: journal.Record) -> str | None:
        checked.append(record.id)
        return real_problem(record)

    read_back: list[Path] = []
    real_holds = memory._publisher.holds

    def counting_holds(path: str | Path, data: bytes) -> bool:
        read_back.append(Path(path))
        return real_holds(path, data)

    monkeypatch.setattr(memory._finding, "_commit_problem", counting_problem)
    monkeypatch.setattr(memory._learn, "holds", counting_holds)
    resumed = flows.resume(first.run_id, db=db)  # its store's open walks the failed run first
    assert resumed.state == RunState.DONE, resumed.error
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == originals
    assert len(checked) == 20 and len(set(checked)) == 20  # each commit once (was three times)
    assert sorted(p.name for p in read_back) == sorted(originals)  # the re-learns' reads alone
