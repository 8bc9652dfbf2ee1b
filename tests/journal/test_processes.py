"""Journal behaviour across processes: idempotent keys, strict sequence, leases dying with their holder."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import journal
from journal import RunState
from tests.conftest import ROOT

_APPENDER = """
import sys, journal
loc, run_id, epoch, key_mode, n, who = sys.argv[1:7]
jr = journal.open_journal(loc)
lease = journal.Lease(run_id, int(epoch))
for i in range(int(n)):
    key = "same" if key_mode == "same" else f"{who}-{i}"
    jr.append(lease, "s", {"who": who, "i": i}, key=key)
jr.close()
"""

_HOLDER = """
import sys, time, journal
jr = journal.open_journal(sys.argv[1])
info, lease = jr.begin("f", "s", {})
print(info.run_id, flush=True)
time.sleep(600)
"""


def _spawn(code: str, *args: str, output: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    stdout = subprocess.PIPE if output else subprocess.DEVNULL
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=stdout, text=True)


@pytest.mark.slow
def test_eight_processes_appending_one_key_leave_one_record(
    jr: journal.JournalBackend, journal_location: str
) -> None:
    info, lease = jr.begin("f", "s", {})
    procs = [
        _spawn(_APPENDER, journal_location, info.run_id, str(lease.epoch), "same", "5", str(w))
        for w in range(8)
    ]
    assert [p.wait(60) for p in procs] == [0] * 8
    records = list(jr.read(info.run_id, "s"))
    assert len(records) == 1
    assert records[0].key == "same"


@pytest.mark.slow
def test_eight_processes_appending_distinct_keys_leave_every_record_in_strict_sequence(
    jr: journal.JournalBackend, journal_location: str
) -> None:
    info, lease = jr.begin("f", "s", {})
    procs = [
        _spawn(_APPENDER, journal_location, info.run_id, str(lease.epoch), "distinct", "25", str(w))
        for w in range(8)
    ]
    assert [p.wait(120) for p in procs] == [0] * 8
    records = list(jr.read(info.run_id, "s"))
    assert [r.seq for r in records] == list(range(1, 201))
    assert sorted(r.key or "" for r in records) == sorted(f"{w}-{i}" for w in range(8) for i in range(25))
    for w in range(8):  # each writer's own records keep their order
        mine = [r.payload["i"] for r in records if r.payload["who"] == str(w)]
        assert mine == list(range(25))
    if isinstance(jr, journal.FileJournal):
        raw = jr.stream_path(info.run_id, "s").read_bytes()
        assert raw.count(b"\n") == 200  # no interleaved lines


def test_a_sigkilled_holder_frees_the_lease_at_once_and_stale_epochs_are_refused(
    jr: journal.JournalBackend, journal_location: str
) -> None:
    holder = _spawn(_HOLDER, journal_location, output=True)
    try:
        assert holder.stdout is not None
        run_id = holder.stdout.readline().strip()
        assert jr.run(run_id).state == RunState.RUNNING
        with pytest.raises(journal.JournalLeaseHeld):
            jr.acquire(run_id)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        assert holder.stdout is not None
        holder.stdout.close()
    deadline = time.monotonic() + 5
    while jr.run(run_id).state != RunState.INTERRUPTED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert jr.run(run_id).state == RunState.INTERRUPTED
    lease = jr.acquire(run_id)
    assert lease.epoch == 2
    with pytest.raises(journal.JournalLeaseLost):
        jr.append(journal.Lease(run_id, 1), "s", {"late": True})
    assert list(jr.read(run_id, "s")) == []


def test_file_runs_live_in_their_own_directories(tmp_path: Path) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "memory-learn", {"x": 1})
    run_dir = tmp_path / "j" / "runs" / info.run_id
    assert sorted(p.name for p in run_dir.iterdir()) == ["lease.lock", "run.json", "run.lock", "streams"]
    assert (run_dir / "run.json").stat().st_mode & 0o777 == 0o600
    jr.close()
