"""``flows check`` reports the bytes a cut of a stream kept beside it, and never removes them.

A locked open that cuts a stream's poisoned end (a failed sync's, or what a crafted or stale mark
file claims) keeps the bytes it cuts in ``.<stream>.jsonl.cut-<generation>``. They are evidence a
person should look at: ``flows check`` lists each (``stream_cut_kept``: run, stream, path, size,
time), ``--repair`` leaves it (not repairable), and the store checks clean once the person has
deleted it.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import memory
from journal import FileJournal, JournalUnwritable, RunState
from tests._helpers.failpoints import armed
from tests.flows.helpers import flows

STREAM = "notes"


def _store_with_a_kept_cut(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, Path]:
    """A store whose journal holds a run whose stream's failed sync was cut into a kept file (the
    real path: the refused append's line is cut by the next append's locked open)."""
    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store:
        journal_root = Path(store.journal_location)
    jr = FileJournal(journal_root)
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, STREAM, {"text": "kept"}, key="a")
    with armed(monkeypatch, "linelog.before_fsync=EIO:once"), pytest.raises(JournalUnwritable):
        jr.append(lease, STREAM, {"text": "refused"}, key="b")
    jr.append(lease, STREAM, {"text": "retried"}, key="b")
    jr.finish(lease, RunState.DONE)
    path = jr.stream_path(info.run_id, STREAM)
    jr.close()
    (kept,) = path.parent.glob(f".{path.name}.cut-*")
    return db, info.run_id, kept


def test_check_lists_a_kept_cut_with_its_run_stream_size_and_time_and_repair_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, run_id, kept = _store_with_a_kept_cut(tmp_path, monkeypatch)
    size = kept.stat().st_size
    assert size > 0
    jr = FileJournal(kept.parents[3])
    (listed,) = jr.kept_cuts(run_id)
    assert (listed.run_id, listed.stream, listed.path, listed.size) == (run_id, STREAM, kept, size)
    assert jr.stream_listing(run_id) == ([STREAM], [listed]) and jr.streams(run_id) == [STREAM]
    jr.close()
    with memory.MemoryStore(db) as store:
        problems = memory.check_store(store)
        (found,) = [p for p in problems if p.kind == "stream_cut_kept"]
        assert found.path == str(kept) and found.repairable is False
        assert run_id in found.message and STREAM in found.message and f"{size:,} byte" in found.message
        shown = found.as_json()
        assert (shown["runId"], shown["stream"], shown["size"]) == (run_id, STREAM, size)
        assert shown["modifiedMs"] == kept.stat().st_mtime_ns // 1_000_000
        assert shown["generation"] == int(kept.name.rsplit("-", 1)[1])
        memory.repair_store(store, problems)
        assert kept.exists() and kept.stat().st_size == size  # evidence kept until a person says
        assert [p.kind for p in memory.check_store(store)] == ["stream_cut_kept"]
        kept.unlink()
        assert memory.check_store(store) == []


def test_flows_check_json_and_repair_through_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, run_id, kept = _store_with_a_kept_cut(tmp_path, monkeypatch)
    checked = flows(db, "check", "--json")
    assert checked.returncode == 1, checked.stderr
    out = orjson.loads(checked.stdout)
    (found,) = [p for p in out["problems"] if p["kind"] == "stream_cut_kept"]
    assert (found["path"], found["runId"], found["stream"]) == (str(kept), run_id, STREAM)
    assert found["size"] == kept.stat().st_size and found["repairable"] is False
    repaired = flows(db, "check", "--repair", "--json")
    assert repaired.returncode == 1 and kept.exists()
    assert [p["kind"] for p in orjson.loads(repaired.stdout)["remaining"]] == ["stream_cut_kept"]
    human = flows(db, "check")
    assert human.returncode == 1 and f"stream_cut_kept: {kept}" in human.stdout
    kept.unlink()
    assert flows(db, "check").returncode == 0


def test_a_planted_thing_with_a_kept_cuts_name_is_listed_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, _, kept = _store_with_a_kept_cut(tmp_path, monkeypatch)
    kept.unlink()
    target = tmp_path / "elsewhere"
    target.write_bytes(b"x" * 100)
    kept.symlink_to(target)
    with memory.MemoryStore(db) as store:
        (found,) = [p for p in memory.check_store(store) if p.kind == "stream_cut_kept"]
        assert found.path == str(kept) and found.as_json()["size"] == kept.lstat().st_size
        memory.repair_store(store, memory.check_store(store))
    assert kept.is_symlink() and target.read_bytes() == b"x" * 100
