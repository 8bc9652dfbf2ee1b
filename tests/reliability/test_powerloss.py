"""Power loss: every crash state of short workloads, random states of long ones, and the proof that
the harness sees a missing directory fsync."""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

import journal
import memory
import staging
from journal import LineLog, Record, RecordCodec
from tests.reliability import powerloss
from tests.reliability.powerloss import CrashPoint, Op


def _summary(tally: powerloss.Tally) -> str:
    return "\n".join([str(tally.row()), *tally.notes])


@pytest.mark.slow
@pytest.mark.timeout(600)  # an exhaustive walk: about 100 s on a busy two-core machine, past the default
def test_every_crash_state_of_every_workload_of_two_steps_recovers_with_nothing_lost() -> None:
    for tally in powerloss.run_exhaustive(2):
        assert tally.cases > 200, _summary(tally)
        assert tally.acknowledged > 50, _summary(tally)
        assert tally.clean, _summary(tally)


def test_random_crash_states_of_longer_workloads_recover_with_nothing_lost() -> None:
    tally = powerloss.run_random(states=300, length=8, seed=11)
    assert tally.cases == 300
    assert tally.clean, _summary(tally)


def test_the_harness_reports_lost_learns_when_the_store_open_recovers_no_lost_name() -> None:
    # A learn's rename is not fsync'd before it returns: a power loss may take the name (never the
    # record), and only the check a store open makes brings the file back before any resume.
    (tally,) = powerloss.run_exhaustive(1, kinds=("findings",), recover=False)
    assert tally.lost > 0, _summary(tally)
    assert any("acknowledged L1 has 1 records, recalled=False" in n for n in tally.notes), tally.notes
    assert tally.fabricated == 0, _summary(tally)  # nothing unjournaled is ever readable


def test_the_harness_reports_a_lost_root_run_when_the_publish_directory_fsync_is_removed() -> None:
    with powerloss.without_publish_dir_fsync():  # run.json: the root run itself is lost
        (tally,) = powerloss.run_exhaustive(1, kinds=("findings",))
    assert any("is gone" in n for n in tally.notes), tally.notes


def _judge_after(
    trace: powerloss.Trace, step: str, *, recover: bool, at_end: bool = False, every: int = 1
) -> powerloss.Tally:
    """Every crash state from the end of ``step`` on, judged (``at_end``: at its end only;
    ``every``: one state in that many, in order)."""
    end = next(e.end for e in trace.events if e.step == step)
    assert end is not None
    tally = powerloss.Tally("after " + step)
    scratch = powerloss.scratch_root()
    try:
        explorer = powerloss.Explorer(tally, scratch, recover=recover)
        for k in range(end, end + 1 if at_end else len(trace.ops) + 1):
            point = explorer.point(trace, k)
            for n, (dirs, files) in enumerate(point.states()):
                if n % every == 0:
                    explorer.judge_state(trace, point, dirs, files, set())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tally


def test_a_run_marked_done_has_every_name_durable_without_any_recovery(tmp_path: Path) -> None:
    # The store open checks only runs that did not end cleanly; a done run's names must already
    # be durable: the flush before ``finish`` makes them so.
    trace = powerloss.record_findings(["L1", "L2", "D"], tmp_path)
    tally = _judge_after(trace, "D", recover=False)
    assert tally.cases > 0 and tally.acknowledged > 0
    assert tally.clean, _summary(tally)


def test_without_the_flush_before_done_a_done_run_loses_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory.MemoryStore, "flush", lambda self: None)
    monkeypatch.setattr(memory.MemoryStore, "close", _close_without_flush)
    trace = powerloss.record_findings(["L1", "L2", "D"], tmp_path)
    monkeypatch.undo()
    tally = _judge_after(trace, "D", recover=False)
    assert tally.lost > 0, _summary(tally)


def _close_without_flush(self: memory.MemoryStore) -> None:
    self.db.close()
    self.open_journal().close()


def test_a_lost_name_is_published_again_byte_identical_by_the_store_open(tmp_path: Path) -> None:
    # One learn, then the power goes: the record is durable, the rename is not. Of the crash states
    # at the end, one has the record and no file; the store's open brings the file back.
    (tmp_path / "w").mkdir()
    trace = powerloss.record_findings(["L1"], tmp_path / "w")
    point = CrashPoint(trace.ops, len(trace.ops), trace.info["names"])
    lost = None
    for dirs, files in point.states():
        tree = point.tree(dirs, files)
        if tree is None or any(p.endswith(".json") and "compacted" in p for p in tree):
            continue
        if any(p.endswith("memory-learn.jsonl") and tree[p] for p in tree):
            lost = tree
            break
    assert lost is not None  # the model has a state where the record survives and the name does not
    state = tmp_path / "state"
    state.mkdir()
    powerloss.materialize(lost, state)
    db = state / "data" / "history.db"
    with memory.MemoryStore(db, recover=False) as reader:
        assert reader.recall(limit=None) == []  # a reader that recovers nothing misses it
    with memory.MemoryStore(db) as store:
        (found,) = store.recall(limit=None)
        record = store.open_journal().find(trace.info["run_id"], memory.STREAM, found.key)
        assert record is not None
        path = memory.learned_dir(db, powerloss.SCOPE) / f"{found.key}.json"
        assert path.read_bytes() == memory.render(record)
    assert found.key == powerloss.fid_of("L1")


def test_the_same_workload_with_every_fsync_in_place_loses_nothing() -> None:
    (tally,) = powerloss.run_exhaustive(1, kinds=("findings",))
    assert tally.cases > 50
    assert tally.clean, _summary(tally)


def _kinds_of(trace: powerloss.Trace, step: str) -> list[str]:
    learn = next(e for e in trace.events if e.step == step)
    assert learn.end is not None
    return [op.args[0] if op.kind == "entry" else op.kind for op in trace.ops[learn.start : learn.end]]


def _in_order(kinds: list[str], wanted: list[str]) -> bool:
    """Whether ``wanted`` occurs in ``kinds`` in this order (other operations may come between)."""
    it = iter(kinds)
    return all(any(kind == w for kind in it) for w in wanted)


def test_the_recorder_logs_a_learn_as_stage_append_sync_then_a_rename_left_unsynced(tmp_path: Path) -> None:
    trace = powerloss.record_findings(["L1", "L2", "D"], tmp_path)
    first = _kinds_of(trace, "L1")  # a new folder: the stage is fsync'd on its own
    assert _in_order(first, ["create", "write", "fsync", "write", "fsync", "rename"]), first
    assert first[-1] == "rename"  # the learn ends with the rename: its name is made durable later
    second = _kinds_of(trace, "L2")
    if staging.HAVE_SYNCFS:  # stage and journal on one file system: the stage is left unsynced
        assert _in_order(second, ["create", "write", "write", "fsync", "rename"]), second
        assert second.count("fsync") == 1 and "syncfs" not in second, second  # one flush: the log's
        learn = next(e for e in trace.events if e.step == "L2")
        (synced,) = [op for op in trace.ops[learn.start : learn.end] if op.kind == "fsync"]
        assert isinstance(synced.target, int)  # a file's (the journal's log), not a folder's
    else:
        assert _in_order(second, ["create", "write", "fsync", "write", "fsync", "rename"]), second
    assert second[-1] == "rename"
    done = _kinds_of(trace, "D")  # files and names are made durable before the run is marked done
    if staging.HAVE_SYNCFS:
        assert done[0] == "syncfs", done
        assert _in_order(done, ["syncfs", "create", "write", "rename"]), done
    else:
        assert done[0] == "fsync" and trace.ops[_start(trace, "D")].target
        assert _in_order(done, ["fsync", "create", "write", "rename"]), done


def _start(trace: powerloss.Trace, step: str) -> int:
    return next(e.start for e in trace.events if e.step == step)


def test_a_syncfs_makes_every_file_and_name_before_it_durable() -> None:
    ops = [
        Op("entry", "", ("create", ".stage-1", 1)),
        Op("write", 1, (0, b"data\n")),
        Op("entry", "", ("create", "log", 2)),
        Op("write", 2, (0, b"rec\n")),
        Op("syncfs", ""),
        Op("entry", "", ("rename", ".stage-1", "final")),
    ]
    point = CrashPoint(ops, 6)
    trees = [point.tree(d, f) for d, f in point.states()]
    assert trees and all(t is not None and t["log"] == b"rec\n" for t in trees)
    assert {"final": b"data\n", "log": b"rec\n"} in trees
    assert {".stage-1": b"data\n", "log": b"rec\n"} in trees  # the rename after it is not durable
    assert all(t is not None and b"" not in t.values() for t in trees)


def test_a_name_renamed_into_place_without_a_directory_fsync_may_vanish() -> None:
    ops = [
        Op("entry", "", ("create", ".stage-1", 1)),
        Op("write", 1, (0, b"data\n")),
        Op("fsync", 1),
        Op("entry", "", ("rename", ".stage-1", "final")),
    ]
    trees = [CrashPoint(ops, 4).tree(d, f) for d, f in CrashPoint(ops, 4).states()]
    assert {"final": b"data\n"} in trees
    assert {} in trees  # neither the stage nor the rename reached the disk
    assert {".stage-1": b"data\n"} in trees
    durable = [*ops, Op("fsync", "")]
    assert [CrashPoint(durable, 5).tree(d, f) for d, f in CrashPoint(durable, 5).states()] == [
        {"final": b"data\n"}
    ]


def test_an_unsynced_append_is_torn_with_zeros_garbage_stale_bytes_and_replayed_lines() -> None:
    ops = [
        Op("entry", "", ("create", "log", 1)),
        Op("write", 1, (0, b"one\n")),
        Op("fsync", 1),
        Op("fsync", ""),
        Op("write", 1, (4, b"two-and-more\n")),
    ]
    point = CrashPoint(ops, 5)
    logs = {t["log"] for d, f in point.states() if (t := point.tree(d, f)) is not None}
    assert b"one\n" in logs and b"one\ntwo-and-more\n" in logs
    assert b"one\ntwo-an" + b"\0" * 7 in logs
    assert b"one\none\none\none\no" in logs  # a replayed copy of the line before
    assert any(log.startswith(b"one\ntwo-an") and log[10:] not in (b"", b"\0" * 7) for log in logs)


def test_the_recorder_logs_a_removal_made_through_a_folders_descriptor(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x")
    rec = powerloss.Recorder(tmp_path)
    with rec.recording():
        fd = os.open(tmp_path / "d", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.unlink("f", dir_fd=fd)
            os.fsync(fd)
        finally:
            os.close(fd)
    assert rec.ops == [Op("entry", "d", ("unlink", "f")), Op("fsync", "d")]


def _record(seq: int, text: str) -> Record:
    return Record(
        run_id="run", stream="s", seq=seq, id=f"id{seq}", key=f"k{seq}", ts_ms=seq, payload={"t": text}
    )


def test_a_torn_append_holding_copies_of_an_earlier_line_is_cut_not_taken_for_damage(tmp_path: Path) -> None:
    # The power-loss harness found this: the unsynced region of an append held stale copies of the
    # line before it (valid, checksummed, but numbered 1 again), and the log failed closed on them.
    path = tmp_path / "s.jsonl"
    log: LineLog[Record] = LineLog(path, RecordCodec("run", "s"), sequence=lambda r: r.seq)
    with log.locked():
        log.recover()
        log.append(_record(1, "short"))
    first = path.read_bytes()
    torn = RecordCodec("run", "s").encode(_record(2, "long " * 40))[:30]
    path.write_bytes(first + torn + b"\n" + first + first)
    with log.locked():
        assert [r.seq for r in log.recover()] == [1]
        log.append(_record(2, "after"))
    assert [r.payload["t"] for r in log.read()] == ["short", "after"]


def test_without_syncfs_names_are_made_durable_in_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where a learn's append cannot sync the folder's file system, its rename waits in a group: the
    # learn that brings the group to ``NAMES_GROUP`` names fsyncs the folder once for all of them.
    import memory._publisher

    monkeypatch.setattr(journal.FileJournal, "shares_filesystem", lambda self, path: False)
    monkeypatch.setattr(memory._publisher, "NAMES_GROUP", 2)
    monkeypatch.setattr(memory._publisher, "NAMES_WAIT_S", 3600.0)
    (tmp_path / "three").mkdir()
    trace = powerloss.record_findings(["L1", "L2", "L3"], tmp_path / "three")
    (tmp_path / "two").mkdir()
    pair = powerloss.record_findings(["L1", "L2"], tmp_path / "two")
    monkeypatch.undo()
    kinds = {step: _kinds_of(trace, step) for step in ("L1", "L2", "L3")}
    assert all("syncfs" not in k for k in kinds.values())
    assert kinds["L1"][-1] == kinds["L3"][-1] == "rename", kinds  # waits
    assert kinds["L2"][-2:] == ["rename", "fsync"], kinds  # one fsync for two
    # Every crash state from the end of L2 on: L1 and L2 survive with no recovery at all.
    tally = _judge_after(pair, "L2", recover=False)
    assert tally.cases > 0 and tally.acknowledged > 0
    assert tally.clean, _summary(tally)


def test_a_name_waits_no_longer_than_the_group_time_while_learns_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import memory._publisher

    monkeypatch.setattr(journal.FileJournal, "shares_filesystem", lambda self, path: False)
    monkeypatch.setattr(memory._publisher, "NAMES_WAIT_S", 0.0)  # every learn finds the last one due
    trace = powerloss.record_findings(["L1", "L2"], tmp_path)
    monkeypatch.undo()
    assert _kinds_of(trace, "L1")[-2:] == _kinds_of(trace, "L2")[-2:] == ["rename", "fsync"]


def test_a_group_flush_makes_the_unsynced_files_and_their_names_durable_with_one_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A learn's file is staged without fsync (its record holds every byte of it): the learn that
    # brings the group to ``NAMES_GROUP`` names makes the files and the names durable together.
    import memory._publisher

    if not staging.HAVE_SYNCFS:
        pytest.skip("the unsynced stage needs syncfs")
    monkeypatch.setattr(memory._publisher, "NAMES_GROUP", 2)
    monkeypatch.setattr(memory._publisher, "NAMES_WAIT_S", 3600.0)
    trace = powerloss.record_findings(["L1", "L2"], tmp_path)
    monkeypatch.undo()
    kinds = {step: _kinds_of(trace, step) for step in ("L1", "L2")}
    assert kinds["L2"][-2:] == ["rename", "syncfs"], kinds  # one flush for two files and names
    # Every crash state from the end of L2 on: both files survive whole with no recovery at all.
    tally = _judge_after(trace, "L2", recover=False)
    assert tally.cases > 0 and tally.acknowledged > 0
    assert tally.clean and tally.refused == 0, _summary(tally)


def test_the_harness_reports_torn_files_when_the_store_open_does_not_write_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stage is not fsync'd (after a folder's first learn), so a power loss can keep a learn's
    # name and tear its bytes: the store's open must write such a file again from its record, not
    # only the missing ones.
    import memory._learn

    if not staging.HAVE_SYNCFS:
        pytest.skip("the unsynced stage needs syncfs")
    trace = powerloss.record_findings(["L1", "L2"], tmp_path)
    monkeypatch.setattr(memory._learn, "_to_replace", lambda final, rec, data: False)
    broken = _judge_after(trace, "L2", recover=True, at_end=True, every=7)
    monkeypatch.undo()
    assert broken.unexpected > 0, _summary(broken)
    assert any("damaged" in n for n in broken.notes), broken.notes
    assert broken.fabricated == 0, _summary(broken)  # a torn file is refused, never served
    fixed = _judge_after(trace, "L2", recover=True, at_end=True, every=7)
    assert fixed.clean, _summary(fixed)
    assert fixed.refused > 0, _summary(fixed)  # what a reader that recovers nothing met: refused


@pytest.mark.slow
def test_damage_in_the_middle_of_a_stream_after_a_crash_loses_nothing_silently() -> None:
    # A crash state, then one middle line below its watermark deleted, zeroed with its newline,
    # duplicated or swapped with the next: every acknowledged learn survives recovery, or the
    # store refuses with journal_corrupt; never a silent loss.
    tally = powerloss.run_mid_stream_damage(states=120)
    assert tally.cases == 120
    assert tally.clean, _summary(tally)
    assert tally.refused > 0, _summary(tally)


# -- updates, forgets by filter and erases, each in a session of its own ---------------------------


def test_random_crash_states_of_updates_forgets_and_erases_lose_resurrect_and_leave_nothing() -> None:
    # L1 L2, then every sequence of one or two of U (a new version of memory 1), W (forget every
    # finding by filter), E (erase memory 1) and X (erase by filter: every memory): recovered by
    # the store's open, the root's resume and `flows check --repair`, nothing acknowledged is
    # undone, nothing retired is read again, and no byte of an erased memory is left in any file
    # of the store.
    tally = powerloss.run_random_changes(per_workload=30, longest=2)
    assert tally.cases > 300, _summary(tally)
    assert tally.acknowledged > 600, _summary(tally)
    assert tally.clean, _summary(tally)


def _erase_trace(tmp_path: Path) -> powerloss.Trace:
    (tmp_path / "w").mkdir(exist_ok=True)
    return powerloss.record_findings(["L1", "E"], tmp_path / "w")


def _cover(trace: powerloss.Trace, points: range) -> powerloss.Tally:
    tally = powerloss.Tally("covering")
    scratch = powerloss.scratch_root()
    try:
        powerloss.Explorer(tally, scratch).cover(trace, random.Random(5), points)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return tally


def test_every_choice_at_every_point_of_an_erase_leaves_it_finished_or_reported_and_then_finished(
    tmp_path: Path,
) -> None:
    # Every choice of every file and folder at every operation of the erase (the others drawn at
    # random): in flight it is untouched, or reported and finished by the repair; acknowledged, no
    # byte of memory 1 is left anywhere under the store.
    trace = _erase_trace(tmp_path)
    erase = next(e for e in trace.events if e.step == "E")
    assert erase.end is not None
    tally = _cover(trace, range(erase.start, len(trace.ops) + 1))
    assert tally.cases > 100, _summary(tally)
    assert tally.clean, _summary(tally)


def test_the_harness_reports_erased_bytes_a_power_loss_brings_back_when_the_erase_does_not_sync_its_removals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The erase's first step, a forget, removes the learned file without an fsync (a retired file
    # keeps it out of every read). A power loss that undid the removal would leave the text on disk
    # once the journal's commits are tombstones. Two things keep it from surviving: the erase makes
    # its removals durable before the rewrite, and `flows check` reports a learned file of an erased
    # key as an unfinished erasure, whose repair deletes it (never moves it to flows-quarantine).
    # Without both, the harness finds the bytes.
    import memory._check
    import memory._erase

    monkeypatch.setattr(memory._erase, "sync_folders", lambda folders: None)
    trace = _erase_trace(tmp_path)
    monkeypatch.undo()
    erase = next(e for e in trace.events if e.step == "E")
    assert erase.end is not None
    assert _cover(trace, range(erase.end, erase.end + 1)).unerased == 0  # the repair deletes it
    monkeypatch.setattr(memory._check, "_finish_erasures", lambda ctx: [])
    tally = _cover(trace, range(erase.end, erase.end + 1))
    assert tally.unerased > 0, _summary(tally)
    assert any("erase_incomplete" in n for n in tally.notes), tally.notes


def test_the_harness_reports_forgotten_findings_read_again_when_the_retired_files_are_not_made_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A forget by filter returns once its retired files' folder is fsync'd: from then on no read
    # returns what it forgot, power loss or not. Without that fsync, a reader after a power loss
    # (before any recovery) reads the forgotten findings again.
    real = staging._stage.fsync_dir

    def all_but_retired(directory: str | os.PathLike[str], at: staging.OpenDir | None = None) -> None:
        if "retired" not in os.fspath(directory):
            real(directory, at)

    monkeypatch.setattr(staging._stage, "fsync_dir", all_but_retired)
    trace = powerloss.record_findings(["L1", "L2", "W"], tmp_path)
    monkeypatch.undo()
    forget = next(e for e in trace.events if e.step == "W")
    assert forget.end is not None
    tally = _cover(trace, range(forget.end, forget.end + 1))
    assert tally.resurrected > 0, _summary(tally)
    assert any("before any recovery" in n and "retired findings readable again" in n for n in tally.notes)
    (tmp_path / "kept").mkdir()
    kept = powerloss.record_findings(["L1", "L2", "W"], tmp_path / "kept")
    forget = next(e for e in kept.events if e.step == "W")
    assert forget.end is not None
    assert _cover(kept, range(forget.end, forget.end + 1)).clean


def test_a_retired_file_an_update_named_lazily_and_a_power_loss_tore_is_written_again_by_the_store_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An update names the old version's retired file lazily: where the journal shares the folder's
    # file system its bytes are staged without fsync, made durable with the names later. A power
    # loss just after the update returned can keep the name and tear the bytes; the store's open
    # writes the file again from its record (as it does a torn learned file). Without that, every
    # read of the scope fails closed on it until `flows check --repair`.
    import memory._retire

    if not staging.HAVE_SYNCFS:
        pytest.skip("the unsynced stage needs syncfs")
    trace = powerloss.record_findings(["L1", "L2", "U", "U"], tmp_path)
    update = [e for e in trace.events if e.step == "U"][-1]
    assert update.end is not None
    monkeypatch.setattr(memory._retire, "_torn", lambda path, record: False)
    broken = _cover(trace, range(update.end, update.end + 1))
    monkeypatch.undo()
    assert broken.unexpected > 0, _summary(broken)
    assert any("retired file" in n and "damaged" in n for n in broken.notes), broken.notes
    fixed = _cover(trace, range(update.end, update.end + 1))
    assert fixed.clean, _summary(fixed)
    assert fixed.refused > 0, _summary(fixed)  # a reader that recovers nothing: refused, coded
