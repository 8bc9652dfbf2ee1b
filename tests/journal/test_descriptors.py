"""A journal or a log dropped without ``close()`` gives back every descriptor and lock it held.

A long-lived process (a server, an agent loop, a test suite) that opens journals on error paths
must not run out of descriptors, and a lease must not outlive the object that held it.
"""

from __future__ import annotations

import contextlib
import gc
import os
from pathlib import Path

import journal
from journal import FileJournal, LineLog, RecordCodec


def _open_fds() -> set[str]:
    """The process's open descriptors, after collecting whatever earlier tests dropped."""
    gc.collect()
    return set(os.listdir("/proc/self/fd"))


def _populated(root: Path) -> tuple[str, journal.Lease]:
    jr = FileJournal(root)
    info, lease = jr.begin("flow", "scope", {})
    jr.append(lease, "s", {"n": 1}, key="k")
    jr.release(lease)
    jr.close()
    return info.run_id, lease


def test_a_dropped_journal_closes_its_streams_leases_and_pinned_run_files(tmp_path: Path) -> None:
    run_id, _ = _populated(tmp_path)
    before = _open_fds()
    for _ in range(20):
        jr = FileJournal(tmp_path)
        lease = jr.acquire(run_id)  # a lease lock, a pinned run.json, a kept log and its mark
        jr.append(lease, "s", {"n": 2})
        jr.read(run_id, "s")
        del jr
    assert _open_fds() <= before
    # the last dropped holder's lease lock went with it: another journal can take the run over
    FileJournal(tmp_path).acquire(run_id)


def test_a_journal_whose_operation_failed_and_was_dropped_leaks_nothing(tmp_path: Path) -> None:
    _, lease = _populated(tmp_path)
    stream = next((tmp_path / "runs").iterdir()) / "streams" / "s.jsonl"
    stream.write_bytes(b"not a record\n" + stream.read_bytes())  # damage before the last line
    before = _open_fds()
    for _ in range(20):
        with contextlib.suppress(journal.JournalError):
            FileJournal(tmp_path).append(lease, "s", {"n": 3})
    assert _open_fds() <= before


def test_a_dropped_keep_open_log_closes_its_descriptors(tmp_path: Path) -> None:
    before = _open_fds()
    for _ in range(20):
        log = LineLog(tmp_path / "log.jsonl", RecordCodec("r", "s"), keep_open=True)
        with log.locked():
            log.read()
        del log
    assert _open_fds() <= before


def test_making_a_journal_or_a_log_registers_no_finalizer(tmp_path: Path) -> None:
    """Their descriptors close with a small holder's ``__del__`` (only the journal or the log
    refers to it): making one costs no ``weakref.finalize`` (the first one a process makes costs
    tens of microseconds, paid by a fresh process's first read)."""
    import weakref

    registry = weakref.finalize._registry  # type: ignore[attr-defined]
    before = len(registry)
    jr = FileJournal(tmp_path / "j")
    log = LineLog(tmp_path / "log.jsonl", RecordCodec("r", "s"), keep_open=True)
    assert len(registry) == before
    jr.close()
    log.close()


def test_a_journal_and_a_log_still_holding_descriptors_at_exit_leave_quietly(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import ROOT

    code = (
        "import sys, journal\n"
        "jr = journal.FileJournal(sys.argv[1])\n"
        "info, lease = jr.begin('flow', 'scope', {})\n"
        "jr.append(lease, 's', {'n': 1})\n"
        "jr.read(info.run_id, 's')\n"
        "log = journal.LineLog(sys.argv[1] + '/log.jsonl', journal.RecordCodec('r', 's'), keep_open=True)\n"
        "with log.locked():\n"
        "    log.read()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "j")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_one_long_lived_journal_keeps_no_descriptor_of_runs_it_ended_or_let_go(tmp_path: Path) -> None:
    # A server's one journal object appends to a new root run for each session (or scope): the
    # streams of every run it had ended kept their log and mark open, two descriptors each, until
    # the process ran out and every read and write failed.
    jr = FileJournal(tmp_path)
    try:
        for n in range(5):  # what the first runs open for good: the journal's own folders
            _, lease = jr.begin("flow", f"warm-{n}", {})
            jr.append(lease, "s", {"n": n})
            jr.finish(lease, journal.RunState.DONE)
        before = _open_fds()
        for n in range(100):
            _, lease = jr.begin("flow", f"scope-{n}", {})
            jr.append(lease, "learned", {"n": n})
            jr.append(lease, "forgot", {"n": n})
            if n % 2:
                jr.finish(lease, journal.RunState.DONE)
            else:
                jr.release(lease)  # let go: it reads interrupted
        grown = _open_fds() - before
        assert len(grown) <= 2, sorted(os.readlink(f"/proc/self/fd/{fd}") for fd in grown)
    finally:
        jr.close()

