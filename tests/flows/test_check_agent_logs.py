"""``flows check --sail`` judges an agent's ledger and activity log as it judges a journal stream.

Both are line logs of their own (``journal.LineLog``): a damaged line that is not a torn tail is
``ledger_corrupt`` / ``activity_corrupt`` naming the file and, in ``--json``, its ``line``; a torn
tail past the watermark is an append in flight or one that never returned, not a problem (the next
append cuts it). A cut of a poisoned end (a failed sync) keeps the bytes it took beside the log,
``.<log>.cut-<generation>``, as a stream's: the check lists each as ``stream_cut_kept`` (path,
size, time, generation, and which log), and ``--repair`` never removes one nor changes a log.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import orjson
import pytest

import memory
import memory.ledger as ml
from journal import JournalUnwritable, LineMarks
from memory.ledger import ActivityLog, Ledger, Skipped, TickStarted
from tests._helpers.failpoints import armed
from tests.flows.helpers import flows

LOGS = ("ledger", "activity")


def _append(sail: Path, log: str, n: int) -> None:
    if log == "ledger":
        with Ledger(sail).writer() as w:
            w.append(Skipped(ts=n, block=n, chain_id=1, reason=ml.balance_reason(1, 2)))
    else:
        ActivityLog(sail).append(TickStarted(ts=n, pid=n))


def _path(sail: Path, log: str) -> Path:
    return Ledger(sail).path if log == "ledger" else ActivityLog(sail).path


def _agent(tmp_path: Path, lines: int = 3) -> tuple[Path, Path]:
    """A store, and an agent whose ledger and activity log hold ``lines`` lines each."""
    db = tmp_path / "store" / "history.db"
    db.parent.mkdir()
    sail = tmp_path / "agent" / ".sail"
    for log in LOGS:
        for n in range(1, lines + 1):
            _append(sail, log, n)
    return db, sail


def _problems(db: Path, sail: Path, *, repair: bool = False) -> list[memory.Problem]:
    with memory.MemoryStore(db) as store:
        found = memory.check_store(store, sail_dirs=[sail])
        if repair:
            memory.repair_store(store, found)
            found = memory.check_store(store, sail_dirs=[sail])
    return found


@pytest.mark.parametrize("log", LOGS)
def test_a_kept_cut_of_an_agents_log_is_listed_as_a_streams_is_and_repair_keeps_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: str
) -> None:
    db, sail = _agent(tmp_path)
    with armed(monkeypatch, "linelog.before_fsync=EIO:once"), pytest.raises(JournalUnwritable):
        _append(sail, log, 9)
    path = _path(sail, log)
    (kept,) = path.parent.glob(f".{path.name}.cut-*")
    size = kept.stat().st_size
    assert size > 0
    _append(sail, log, 10)  # the log goes on; the kept bytes stay
    for repair in (False, True):
        (found,) = _problems(db, sail, repair=repair)
        shown = found.as_json()
        assert (found.kind, found.path, found.repairable) == ("stream_cut_kept", str(kept), False)
        assert (shown["log"], shown["logPath"], shown["size"]) == (log, str(path), size)
        assert (shown["runId"], shown["stream"]) == (None, None)
        assert shown["generation"] == int(kept.name.rsplit("-", 1)[1])
        assert shown["modifiedMs"] == kept.stat().st_mtime_ns // 1_000_000
        assert str(path) in found.message and f"{size:,} byte" in found.message
        assert kept.stat().st_size == size  # evidence kept until a person says
    kept.unlink()
    assert _problems(db, sail) == []


def test_flows_check_lists_both_logs_kept_cuts_and_repair_leaves_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, sail = _agent(tmp_path)
    for log in LOGS:
        with armed(monkeypatch, "linelog.before_fsync=EIO:once"), pytest.raises(JournalUnwritable):
            _append(sail, log, 9)
    kept = sorted(str(p) for log in LOGS for p in _path(sail, log).parent.glob(".*.cut-*"))
    assert len(kept) == 2
    for args in (("check", "--json"), ("check", "--repair", "--json")):
        done = flows(db, *args, "--sail", str(sail))
        assert done.returncode == 1, done.stderr
        out = orjson.loads(done.stdout)
        assert sorted(p["path"] for p in out["problems"] if p["kind"] == "stream_cut_kept") == kept
        assert [p["kind"] for p in out["remaining"]] == ["stream_cut_kept"] * 2
    human = flows(db, "check", "--sail", str(sail))
    assert human.returncode == 1 and all(f"stream_cut_kept: {k}" in human.stdout for k in kept)


def _damage(path: Path, line: int, with_: bytes, *, acknowledged: bool) -> bytes:
    """Put ``with_`` in place of line ``line`` (1-based; one past the last appends it); with
    ``acknowledged`` the durable mark covers the whole file after, else it stays where it was."""
    lines = path.read_bytes().splitlines(keepends=True)
    lines[line - 1 : line] = [with_]
    path.write_bytes(b"".join(lines))
    if acknowledged:
        lock = Path(f"{path}.lock")
        lock.write_bytes(replace(LineMarks.parse(lock.read_bytes()), plain=path.stat().st_size).pack())
    return path.read_bytes()


CASES = {
    # where, what, whether the mark covers it: (line, bytes, acknowledged)
    "middle, not JSON": (2, b"\x00\x00garbage\n", True),
    "middle, JSON off the schema": (2, b'{"ts":"x"}\n', True),
    "last, acknowledged, not JSON": (3, b"garbage\n", True),
    "appended past the mark, JSON off the schema": (4, b'{"ts":"x"}\n', False),
}


@pytest.mark.parametrize("log", LOGS)
@pytest.mark.parametrize("case", list(CASES))
def test_a_damaged_line_of_an_agents_log_is_reported_with_its_line_and_never_repaired(
    tmp_path: Path, log: str, case: str
) -> None:
    db, sail = _agent(tmp_path)
    line, data, acknowledged = CASES[case]
    path = _path(sail, log)
    damaged = _damage(path, line, data, acknowledged=acknowledged)
    for repair in (False, True):
        (found,) = _problems(db, sail, repair=repair)
        assert (found.kind, found.path, found.repairable) == (f"{log}_corrupt", str(path), False)
        assert found.as_json()["line"] == line and f"line {line}" in found.message
        assert path.read_bytes() == damaged
    assert not list(path.parent.glob(".*.cut-*"))


@pytest.mark.parametrize("log", LOGS)
def test_a_torn_tail_of_an_agents_log_is_no_problem_and_the_next_append_cuts_it_without_keeping(
    tmp_path: Path, log: str
) -> None:
    """Past the watermark a line without its end is an append that never returned, as in a stream:
    not reported, and cut (not kept: nothing in it was acknowledged) by the next append."""
    db, sail = _agent(tmp_path)
    path = _path(sail, log)
    good = path.read_bytes()
    with path.open("ab") as f:
        f.write(b'{"ts":99,"tor')
    assert _problems(db, sail) == []
    _append(sail, log, 4)
    assert path.read_bytes().startswith(good) and b'{"ts":99,"tor' not in path.read_bytes()
    assert not list(path.parent.glob(".*.cut-*")) and _problems(db, sail) == []
