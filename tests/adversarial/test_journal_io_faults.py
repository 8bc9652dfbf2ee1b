"""I/O faults for one of several concurrent callers of the journal's group commit.

The promise: an append that returned is in the stream for good; one that raised is not reported as
written (after the next locked open it is not in the stream at all); a caller only loses its own
line; once a sync over some bytes failed, every caller whose line lay in them fails, whatever a
later sync says; one caller's bad payload fails that caller alone. Every fault surfaces as the
journal's documented code.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

import journal
import staging
from journal import JournalUnwritable, LineLog, Record, RecordCodec
from tests._helpers.failpoints import armed
from tests.conftest import ROOT


def _rec(seq: int, tag: str) -> Record:
    return Record("r", "s", seq, f"id{seq}", f"k{seq}", seq, {"tag": tag})


def _log(path: Path) -> LineLog[Record]:
    return LineLog(path, RecordCodec("r", "s"), sequence=lambda r: r.seq)


def _tags(records: Any) -> list[str]:
    return [r.payload["tag"] for r in records]


def _recovered(location: Path, run_id: str, lease: journal.Lease) -> list[str]:
    """The stream as a fresh process finds it after a locked open (an append, then a read)."""
    other = journal.FileJournal(location)
    try:
        other.append(lease, "s", {"tag": "after"})
        return _tags(other.read(run_id, "s"))
    finally:
        other.close()


def _race(calls: list[Callable[[], Any]], *, stagger_s: float = 0.005) -> list[Any]:
    """Run each call in its own thread (the first a little ahead); return result or exception."""
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for i, t in enumerate(threads):
        t.start()
        if i == 0:
            time.sleep(stagger_s)
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    return results


# -- one sync over several callers' bytes fails -------------------------------------------------


def test_a_failed_sync_fails_every_writer_whose_line_it_covered_though_a_later_sync_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.jsonl"
    first = _log(path)
    with first.locked():
        first.recover()
        first.append(_rec(1, "acked"))
    a, b = _log(path), _log(path)  # two processes' views: their own descriptors, caches and marks
    with a.locked():
        a.recover()
        end_a = a.write([_rec(2, "a")])
    with b.locked():
        b.recover()
        end_b = b.write([_rec(3, "b")])
    with armed(monkeypatch, "linelog.before_fsync=EIO:once"):
        with pytest.raises(JournalUnwritable) as failed:
            a.sync_to(end_a)  # this fsync covered b's line too
        with pytest.raises(JournalUnwritable) as refused:
            b.sync_to(end_b)  # its own fsync would now succeed: that proves nothing about b's line
    assert failed.value.code == refused.value.code == "journal_unwritable"
    assert refused.value.path == path
    reader = _log(path)
    assert _tags(reader.read()) == ["acked"]  # lock-free readers never see the doubtful lines
    with reader.locked():
        assert _tags(reader.recover()) == ["acked"]  # the next locked open cut them
        reader.append(_rec(2, "next"))
    assert _tags(_log(path).read()) == ["acked", "next"]


def test_a_caller_whose_line_was_cut_after_a_failed_sync_fails_though_later_bytes_sit_where_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.jsonl"
    writer = _log(path)
    with writer.locked():
        writer.recover()
        writer.append(_rec(1, "acked"))
        end = writer.write([_rec(2, "lost")])
        gen = writer.generation
    with armed(monkeypatch, "linelog.before_fsync=EIO:once"), pytest.raises(JournalUnwritable):
        _log(path).sync_to(os.path.getsize(path))  # another caller's sync fails over our line
    other = _log(path)
    with other.locked():
        other.recover()  # cuts our line ...
        other.append(_rec(2, "someone else's, at our offset"))  # ... and a new line ends past it
    assert os.path.getsize(path) >= end
    with pytest.raises(JournalUnwritable, match="cut"):
        writer.sync_to(end, generation=gen)  # the marks cover ``end`` now, but not our bytes


def _line_tags(data: bytes) -> set[str]:
    tags = set()
    for line in data.split(b"\n"):
        with contextlib.suppress(journal.LineDamaged):
            tags.add(RecordCodec("x", "s").decode(line).payload["tag"])
    return tags


def test_every_thread_whose_line_a_failed_shared_sync_covered_raises_and_no_other_loses_its_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Several threads batched behind a slow writer; the fsync of their batch fails (EIO). Which
    lines that fsync covered is read from the file at the moment it fails."""
    real_fsync = os.fsync
    failures = 0
    for attempt in range(6):
        jr = journal.FileJournal(tmp_path / f"j{attempt}")
        info, lease = jr.begin("f", "s", {})
        jr.append(lease, "s", {"tag": "acked"})
        stream = jr.stream_path(info.run_id, "s")
        ino = stream.stat().st_ino
        state = {"calls": 0, "doomed": set()}

        def fsync(fd: int, stream: Path = stream, ino: int = ino, state: dict[str, Any] = state) -> None:
            if os.fstat(fd).st_ino == ino:
                state["calls"] += 1
                if state["calls"] == 2:  # the second sync of the stream: the batch behind the first
                    mark = LineLog(stream, RecordCodec("x", "s")).watermark() or 0
                    size = os.fstat(fd).st_size
                    state["doomed"] = _line_tags(os.pread(fd, size - mark, mark))
                    raise OSError(errno.EIO, "injected write-back failure")
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        # The first writer is slow, so the others batch behind it; the second waits for its sync.
        with armed(monkeypatch, "linelog.before_append=sleep40:nth1,linelog.before_append=sleep30:nth2"):
            results = _race(
                [
                    lambda t=t, jr=jr, lease=lease: jr.append(lease, "s", {"tag": t})
                    for t in ("t0", "t1", "t2", "t3")
                ]
            )
        monkeypatch.setattr(os, "fsync", real_fsync)
        returned = {r.payload["tag"] for r in results if isinstance(r, Record)}
        raised = {
            t for t, r in zip(("t0", "t1", "t2", "t3"), results, strict=True) if not isinstance(r, Record)
        }
        assert all(isinstance(r, Record | JournalUnwritable) for r in results), results
        assert returned.isdisjoint(state["doomed"]), (returned, state["doomed"])
        stream_tags = _recovered(tmp_path / f"j{attempt}", info.run_id, lease)
        assert returned | {"acked", "after"} <= set(stream_tags)  # nobody else's record was cut
        assert raised.isdisjoint(stream_tags)  # nothing that raised stays recorded
        assert [r.seq for r in jr.read(info.run_id, "s")] == list(range(1, len(stream_tags) + 1))
        failures += len(raised)
        jr.close()
    assert failures > 0  # the fault fired and cost someone their append


@pytest.mark.parametrize("name", ["linelog.before_append", "linelog.before_fsync"])
@pytest.mark.parametrize("sync_filesystem", [False, True], ids=["fsync", "syncfs"])
def test_threads_batched_while_one_write_or_sync_fails_keep_exactly_the_acknowledged_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, sync_filesystem: bool
) -> None:
    if sync_filesystem and not staging.HAVE_SYNCFS:
        pytest.skip("syncfs is Linux's")
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    tags = [f"w{w}-{i}" for w in range(6) for i in range(4)]

    def writer(w: int) -> list[Any]:
        out: list[Any] = []
        for i in range(4):
            try:
                out.append(jr.append(lease, "s", {"tag": f"w{w}-{i}"}, sync_filesystem=sync_filesystem))
            except JournalUnwritable as exc:
                out.append(exc)
        return out

    plan = f"linelog.before_append=sleep5,{name}=EIO:nth3,{name}=EIO:nth6"
    with armed(monkeypatch, plan):  # slow writes batch the threads; two passes fail
        results = [r for rs in _race([lambda w=w: writer(w) for w in range(6)]) for r in rs]
    outcome = dict(zip(tags, results, strict=True))
    returned = {t for t, r in outcome.items() if isinstance(r, Record)}
    raised = {t for t, r in outcome.items() if isinstance(r, JournalUnwritable)}
    assert returned | raised == set(tags) and raised  # every call ended one way or the other
    stream_tags = _recovered(tmp_path / "j", info.run_id, lease)
    assert returned | {"after"} <= set(stream_tags)
    assert len(stream_tags) == len(set(stream_tags))  # nothing doubled
    if not sync_filesystem:
        assert raised.isdisjoint(stream_tags)  # a failed plain sync's lines are cut
    # With syncfs, a caller refused after a failed file-system sync may leave its line: when a later
    # sync made the line durable as bytes, it stays, unacknowledged (the journal's documented rule:
    # the sync it asked for proves nothing about its other files). Which interleaving the threads
    # take decides whether that happens; nothing acknowledged is ever cut either way.
    assert [r.seq for r in jr.read(info.run_id, "s")] == list(range(1, len(stream_tags) + 1))


def test_a_failed_filesystem_sync_is_a_failed_sync_for_every_caller_it_covered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not staging.HAVE_SYNCFS:
        pytest.skip("syncfs is Linux's")  # the plain-fsync variant above covers other platforms
    path = tmp_path / "s.jsonl"
    a, b = _log(path), _log(path)
    with a.locked():
        a.recover()
        a.append(_rec(1, "acked"))
        end_a = a.write([_rec(2, "a")])
    with b.locked():
        b.recover()
        end_b = b.write([_rec(3, "b")])
    with armed(monkeypatch, "linelog.before_fsync=EIO:once"):
        with pytest.raises(JournalUnwritable):
            a.sync_to(end_a, filesystem=True)
        with pytest.raises(JournalUnwritable):
            b.sync_to(end_b, filesystem=True)
        with pytest.raises(JournalUnwritable):
            b.sync_to(end_b)  # nor does a plain fsync stand in for the failed syncfs
    with b.locked():
        assert _tags(b.recover()) == ["acked"]


def test_a_failed_filesystem_sync_fails_every_filesystem_waiter_it_covered_though_fsync_had_covered_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A caller that asks for a file-system sync wants the files it wrote before appending made
    durable too; once a syncfs failed, a later one proves nothing about those files."""
    if not staging.HAVE_SYNCFS:
        pytest.skip("syncfs is Linux's")
    path = tmp_path / "s.jsonl"
    w1, w2, plain = _log(path), _log(path), _log(path)
    with w1.locked():
        w1.recover()
        end_1 = w1.write([_rec(1, "w1")])
    with w2.locked():
        w2.recover()
        end_2 = w2.write([_rec(2, "w2")])
    plain.sync_to(end_2)  # a plain fsync covers both lines: the log's bytes are durable
    with armed(monkeypatch, "linelog.before_fsync=EIO:once"):
        with pytest.raises(JournalUnwritable):
            w1.sync_to(end_1, filesystem=True)
        with pytest.raises(JournalUnwritable, match="file-system sync"):
            w2.sync_to(end_2, filesystem=True)  # its own syncfs would succeed now
        _log(path).sync_to(end_2)  # a caller that needed only its line is answered
    with _log(path).locked() as log:
        assert _tags(log.recover()) == ["w1", "w2"]  # durable lines are never cut
        end_3 = log.write([_rec(3, "after")])
        gen = log.generation
    _log(path).sync_to(end_3, filesystem=True, generation=gen)  # a new caller is answered again


_CHILD = """
import sys, orjson, journal
loc, run_id, epoch, who, n = sys.argv[1:6]
jr = journal.FileJournal(loc)
lease = journal.Lease(run_id, int(epoch))
for i in range(int(n)):
    tag = f"{who}-{i}"
    try:
        jr.append(lease, "s", {"tag": tag}, key=tag)
        ok = True
    except journal.JournalUnwritable as exc:
        assert exc.code == "journal_unwritable", exc.code
        ok = False
    print(orjson.dumps({"tag": tag, "ok": ok}).decode(), flush=True)
"""


@pytest.mark.slow
def test_processes_appending_while_one_of_them_fails_its_syncs_lose_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FLOWS_FAILPOINTS", None)
    procs = []
    for who in range(4):
        plan = "linelog.before_fsync=EIO:nth3,linelog.before_fsync=EIO:nth7" if who == 0 else ""
        child_env = {**env, "FLOWS_FAILPOINTS": plan}
        argv = [
            sys.executable,
            "-c",
            _CHILD,
            str(tmp_path / "j"),
            info.run_id,
            str(lease.epoch),
            f"p{who}",
            "12",
        ]
        procs.append(subprocess.Popen(argv, env=child_env, stdout=subprocess.PIPE, text=True))
    outcomes: dict[str, bool] = {}
    for p in procs:
        out, _ = p.communicate(timeout=120)
        assert p.returncode == 0
        for line in out.splitlines():
            row = orjson.loads(line)
            outcomes[row["tag"]] = row["ok"]
    assert len(outcomes) == 48
    assert not all(outcomes.values())  # the faults fired
    stream_tags = _recovered(tmp_path / "j", info.run_id, lease)
    assert {t for t, ok in outcomes.items() if ok} <= set(stream_tags)
    assert {t for t, ok in outcomes.items() if not ok}.isdisjoint(stream_tags)
    assert [r.seq for r in jr.read(info.run_id, "s")] == list(range(1, len(stream_tags) + 1))


# -- one caller's bad payload in a batch -------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [{"x": object()}, {"lone": "\ud800"}, {"big": 2**64}, {1: "non-string key"}, ["not", "a", "mapping"]],
    ids=["object", "lone-surrogate", "beyond-64-bits", "int-key", "list"],
)
def test_a_bad_payload_batched_with_good_ones_fails_only_its_own_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: Any
) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    with armed(monkeypatch, "linelog.before_append=sleep50:nth1"):  # the others queue up
        results = _race(
            [
                lambda: jr.append(lease, "s", {"tag": "first"}),
                lambda: jr.append(lease, "s", {"tag": "good-1"}, key="g1"),
                lambda: jr.append(lease, "s", bad, key="bad"),
                lambda: jr.append(lease, "s", {"tag": "good-2"}),
            ]
        )
    assert isinstance(results[2], journal.JournalPayloadInvalid)
    assert results[2].code == "journal_payload_invalid"
    assert isinstance(results[2], TypeError)  # as before, for callers that caught that
    assert [type(r) for r in (results[0], results[1], results[3])] == [Record] * 3
    assert sorted(_tags(jr.read(info.run_id, "s"))) == ["first", "good-1", "good-2"]
    assert jr.find(info.run_id, "s", "bad") is None


def test_a_key_with_a_lone_surrogate_fails_its_own_call_not_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    with armed(monkeypatch, "linelog.before_append=sleep50:nth1"):
        results = _race(
            [
                lambda: jr.append(lease, "s", {"tag": "first"}),
                lambda: jr.append(lease, "s", {"tag": "bad"}, key="k\ud800"),
                lambda: jr.append(lease, "s", {"tag": "good"}, key="ok"),
            ]
        )
    assert isinstance(results[1], journal.JournalNameInvalid)
    assert sorted(_tags(jr.read(info.run_id, "s"))) == ["first", "good"]


# -- every errno at every failpoint is the documented code ---------------------------------------

_ERRNOS = ("ENOSPC", "EROFS", "EACCES", "EIO")
_LINELOG_POINTS = (
    "linelog.before_append",
    "linelog.before_fsync",
    "linelog.before_mark",
    "linelog.after_append",
)
# Where the line was already durable when the fault hit, it may stay (a retry with its key finds it).
_DURABLE_BEFORE = {"linelog.before_mark", "linelog.after_append"}


@pytest.mark.parametrize("name", _LINELOG_POINTS)
@pytest.mark.parametrize("fault", _ERRNOS)
def test_a_fault_at_each_append_failpoint_is_journal_unwritable_and_the_next_append_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, fault: str
) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    jr.append(lease, "s", {"tag": "acked"})
    with armed(monkeypatch, f"{name}={fault}:once"), pytest.raises(JournalUnwritable) as err:
        jr.append(lease, "s", {"tag": "faulted"}, key="faulted")
    assert (err.value.code, err.value.run_id, err.value.stream) == ("journal_unwritable", info.run_id, "s")
    assert err.value.path is not None
    assert os.strerror(getattr(errno, fault)) in str(err.value)
    again = jr.append(lease, "s", {"tag": "retried"}, key="faulted")
    tags = _tags(jr.read(info.run_id, "s"))
    if name in _DURABLE_BEFORE:
        assert tags == ["acked", "faulted"] and again.payload["tag"] == "faulted"
    else:
        assert tags == ["acked", "retried"] and again.payload["tag"] == "retried"


@pytest.mark.parametrize("name", _LINELOG_POINTS)
@pytest.mark.parametrize("fault", _ERRNOS)
def test_a_fault_at_each_failpoint_of_a_locked_append_is_journal_unwritable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, fault: str
) -> None:
    """The line log as the agent ledger uses it: ``locked()`` then ``append``."""
    path = tmp_path / "ledger.jsonl"
    with _log(path).locked() as log:
        log.append(_rec(1, "acked"))
    with (
        armed(monkeypatch, f"{name}={fault}"),
        pytest.raises(JournalUnwritable) as err,
        _log(path).locked() as log,
    ):
        log.append(_rec(2, "faulted"))
    assert err.value.code == "journal_unwritable"
    with _log(path).locked() as log:
        tags = _tags(log.recover())
    assert tags == (["acked", "faulted"] if name in _DURABLE_BEFORE else ["acked"])


@pytest.mark.parametrize("name", ["staging.before_fsync", "staging.before_rename", "staging.after_rename"])
@pytest.mark.parametrize("fault", _ERRNOS)
def test_a_fault_while_recording_a_run_is_journal_unwritable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, fault: str
) -> None:
    jr = journal.FileJournal(tmp_path / "j")
    info, lease = jr.begin("f", "s", {})
    with armed(monkeypatch, f"{name}={fault}"):
        with pytest.raises(JournalUnwritable) as begun:
            jr.begin("f", "s", {})
        with pytest.raises(JournalUnwritable) as finished:
            jr.finish(lease, journal.RunState.DONE)
    assert begun.value.code == finished.value.code == "journal_unwritable"
    assert finished.value.run_id == info.run_id
    if jr.run(info.run_id).state is not journal.RunState.DONE:  # else the rename had happened
        jr.finish(lease, journal.RunState.DONE)
    assert jr.run(info.run_id).state is journal.RunState.DONE


def test_a_cut_that_fails_keeps_the_log_poisoned_until_one_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.jsonl"
    log = _log(path)
    with log.locked():
        log.append(_rec(1, "acked"))
        end = log.write([_rec(2, "doubtful")])
    with armed(monkeypatch, "linelog.before_fsync=EIO:once"), pytest.raises(JournalUnwritable):
        _log(path).sync_to(end)
    real_truncate = os.ftruncate

    def broken(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "injected")

    monkeypatch.setattr(os, "ftruncate", broken)
    with pytest.raises(JournalUnwritable, match="cannot cut"), _log(path).locked() as other:
        other.append(_rec(2, "refused while the cut fails"))
    monkeypatch.setattr(os, "ftruncate", real_truncate)
    assert _tags(_log(path).read()) == ["acked"]  # the doubtful line is still hidden
    with _log(path).locked() as other:
        other.append(_rec(2, "after"))
    assert _tags(_log(path).read()) == ["acked", "after"]
