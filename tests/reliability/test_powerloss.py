"""Power loss: every crash state of short workloads, random states of long ones, and the proof that
the harness sees a missing directory fsync."""

from __future__ import annotations

from pathlib import Path

import pytest

import staging
from journal import LineLog, Record, RecordCodec
from tests.reliability import powerloss
from tests.reliability.powerloss import CrashPoint, Op


def _summary(tally: powerloss.Tally) -> str:
    return "\n".join([str(tally.row()), *tally.notes])


@pytest.mark.slow
def test_every_crash_state_of_every_workload_of_two_steps_recovers_with_nothing_lost() -> None:
    for tally in powerloss.run_exhaustive(2):
        assert tally.cases > 200, _summary(tally)
        assert tally.acknowledged > 50, _summary(tally)
        assert tally.clean, _summary(tally)


def test_random_crash_states_of_longer_workloads_recover_with_nothing_lost() -> None:
    tally = powerloss.run_random(states=300, length=8, seed=11)
    assert tally.cases == 300
    assert tally.clean, _summary(tally)


def test_the_harness_reports_lost_writes_when_the_publish_directory_fsync_is_removed() -> None:
    with powerloss.without_publish_dir_fsync(where="compacted"):  # learned files only
        (tally,) = powerloss.run_exhaustive(1, kinds=("findings",))
    assert tally.lost > 0, _summary(tally)
    assert any("acknowledged L1 has 1 records, recalled=False" in n for n in tally.notes), tally.notes
    with powerloss.without_publish_dir_fsync():  # run.json as well: the root run itself is lost
        (tally,) = powerloss.run_exhaustive(1, kinds=("findings",))
    assert any("is gone" in n for n in tally.notes), tally.notes


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


def test_the_recorder_logs_a_learn_as_stage_fsync_append_fsync_rename_dir_fsync(tmp_path: Path) -> None:
    trace = powerloss.record_findings(["L1", "L2"], tmp_path)
    first = _kinds_of(trace, "L1")  # a new folder: the stage is fsync'd on its own
    assert _in_order(first, ["create", "write", "fsync", "write", "fsync", "rename", "fsync"]), first
    assert first[-2:] == ["rename", "fsync"]  # publish ends the learn: rename, then the directory
    second = _kinds_of(trace, "L2")
    if staging.HAVE_SYNCFS:  # stage and journal on one file system: one syncfs covers both
        assert _in_order(second, ["create", "write", "write", "syncfs", "rename", "fsync"]), second
        assert "syncfs" in second and second.count("fsync") == 1, second
    else:
        assert _in_order(second, ["create", "write", "fsync", "write", "fsync", "rename", "fsync"]), second
    assert second[-2:] == ["rename", "fsync"]


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
