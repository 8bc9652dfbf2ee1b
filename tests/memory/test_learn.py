"""learn: journal first, then the file; citation, identity, convergence, resume, fail closed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

import journal
import memory
from tests._helpers.failpoints import child_env
from tests.memory.conftest import Clock, Failpoints, learned_files, stages

FINDING = {"text": "the cache is cold at dawn", "tags": ["cache", "ops"]}


class ObservedJournal:
    """The real journal backend, with a hook that runs just before each append reaches it.

    It observes (or, for a race, interleaves) the real journal; it never fakes an answer.
    """

    def __init__(
        self, inner: journal.JournalBackend, before_append: Callable[[str, str | None], None]
    ) -> None:
        self._inner = inner
        self._before_append = before_append

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def append(
        self,
        lease: journal.Lease,
        stream: str,
        payload: Mapping[str, Any],
        *,
        key: str | None = None,
        **how: Any,
    ) -> journal.Record:
        self._before_append(stream, key)
        return self._inner.append(lease, stream, payload, key=key, **how)


def _records(root: memory.RootRun) -> list[journal.Record]:
    return list(root.journal.read(root.run_id, memory.STREAM))


def _final(db: Path, scope: str, finding: object, source: str = "probe") -> Path:
    fid = memory.finding_id(scope, memory.validate(finding, default_source=source))
    return memory.learned_dir(db, scope) / f"{fid}.json"


# -- order and citation ------------------------------------------------------------


def test_the_append_happens_while_the_file_is_only_staged_and_the_file_then_cites_the_commit(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    final = _final(db, "scope-a", FINDING)
    seen: list[tuple[str, bool, list[str]]] = []

    def check(stream: str, key: str | None) -> None:
        seen.append((stream, final.exists(), stages(final.parent)))

    observed = memory.RootRun(ObservedJournal(root.journal, check), root.lease, "probe", "scope-a")  # type: ignore[arg-type]
    learned = store.learn(FINDING, observed)

    assert len(seen) == 1
    stream, published_at_append, staged_at_append = seen[0]
    assert (stream, published_at_append) == (memory.STREAM, False)
    assert len(staged_at_append) == 1  # the file was staged before the commit
    [record] = _records(root)
    assert learned.citation == memory.Citation(root.run_id, memory.STREAM, record.id)
    assert learned.path == final
    assert final.read_bytes() == memory.render(record)
    cited = orjson.loads(final.read_bytes())["journal"]
    assert cited == {"runId": root.run_id, "stream": "memory-learn", "id": record.id}
    assert record.key == learned.id == final.stem
    assert stages(final.parent) == []


def test_the_published_file_is_a_pure_function_of_its_record(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    learned = store.learn(FINDING, root)
    [record] = _records(root)
    assert memory.render(record) == memory.render(record) == learned.path.read_bytes()
    body = orjson.loads(learned.path.read_bytes())
    assert body == {
        "id": learned.id,
        "scope": "scope-a",
        "flow": "probe",
        "text": FINDING["text"],
        "source": "probe",
        "tags": ["cache", "ops"],
        "learnedMs": learned.learned_ms,
        "journal": {"runId": root.run_id, "stream": "memory-learn", "id": record.id},
    }
    assert record.payload["learnedMs"] == learned.learned_ms


# -- identity, placement and mode --------------------------------------------------------


def test_equal_findings_hash_equal_and_a_relearn_replaces_the_one_file(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    first = store.learn({"text": "t", "source": "s", "tags": ["a", "b"]}, root)
    second = store.learn({"tags": ["a", "b"], "source": "s", "text": "t"}, root)
    assert first == second
    assert len(_records(root)) == 1
    other_scope = memory.finding_id("scope-b", memory.Finding("t", "s", ("a", "b")))
    assert other_scope != first.id
    assert learned_files(db) == [first.path]


def test_source_defaults_to_the_flow_name(store: memory.MemoryStore, root: memory.RootRun) -> None:
    learned = store.learn({"text": "no source given"}, root)
    assert orjson.loads(learned.path.read_bytes())["source"] == "probe"


def test_files_stay_out_of_the_source_tree_and_live_under_the_db_folder(
    store: memory.MemoryStore, root: memory.RootRun, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source_tree = tmp_path / "checkout"
    source_tree.mkdir()
    (source_tree / "probe.py").write_text("# the flow's source\n")
    monkeypatch.chdir(source_tree)

    learned = store.learn(FINDING, root)

    assert sorted(p.name for p in source_tree.rglob("*")) == ["probe.py"]
    expected_dir = db.parent / "flows-memory" / memory.scope_hash("scope-a") / ".trajectories" / "compacted"
    assert learned.path == expected_dir / f"{learned.id}.json"
    assert learned.path.is_file()


@pytest.mark.parametrize("db_mode", [0o640, 0o644, 0o600])
def test_the_file_takes_the_mode_of_the_db_whatever_the_umask(
    store: memory.MemoryStore, root: memory.RootRun, db: Path, db_mode: int
) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(b"")
    os.chmod(db, db_mode)
    old = os.umask(0o077)
    try:
        learned = store.learn(FINDING, root)
    finally:
        os.umask(old)
    assert learned.path.stat().st_mode & 0o777 == db_mode


def test_without_a_db_the_file_is_private(store: memory.MemoryStore, root: memory.RootRun, db: Path) -> None:
    learned = store.learn(FINDING, root)
    assert learned.path.stat().st_mode & 0o777 == 0o600
    assert not db.exists()


def test_learn_only_stats_the_db_and_never_opens_it(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    db.write_bytes(b"not a sqlite database")  # opening it as SQLite would fail
    os.chmod(db, 0o640)
    learned = store.learn(FINDING, root)
    assert db.read_bytes() == b"not a sqlite database"
    assert sorted(p.name for p in db.parent.iterdir()) == ["flows-journal", "flows-memory", "history.db"]
    assert learned.path.stat().st_mode & 0o777 == 0o640


# -- convergence ------------------------------------------------------------------------


def test_an_attempt_that_loses_the_race_publishes_the_winners_commit(root: memory.RootRun, db: Path) -> None:
    winner_store = memory.MemoryStore(db, clock=Clock(start=1_000))
    loser_store = memory.MemoryStore(db, clock=Clock(start=9_000))
    won: list[memory.Learned] = []

    def the_other_attempt_commits_first(stream: str, key: str | None) -> None:
        if not won:  # between the loser's stage and its append, the winner learns the same finding
            won.append(winner_store.learn(FINDING, root))

    loser_root = memory.RootRun(
        ObservedJournal(root.journal, the_other_attempt_commits_first),  # type: ignore[arg-type]
        root.lease,
        "probe",
        "scope-a",
    )
    try:
        lost = loser_store.learn(FINDING, loser_root)
    finally:
        winner_store.close()
        loser_store.close()

    [record] = _records(root)
    assert lost.citation == won[0].citation
    assert lost.learned_ms == won[0].learned_ms == record.payload["learnedMs"] == 2_000
    assert lost.path.read_bytes() == memory.render(record)
    assert stages(lost.path.parent) == []


def test_eight_threads_learning_one_finding_leave_one_record_and_its_bytes(
    root: memory.RootRun, db: Path
) -> None:
    stores = [memory.MemoryStore(db, clock=Clock(start=1_000 * (i + 1))) for i in range(8)]
    barrier = threading.Barrier(len(stores))
    results: list[memory.Learned] = []
    errors: list[BaseException] = []

    def attempt(s: memory.MemoryStore) -> None:
        try:
            barrier.wait()
            results.append(s.learn(FINDING, root))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=attempt, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for s in stores:
        s.close()

    assert errors == []
    [record] = _records(root)
    assert {r.citation.id for r in results} == {record.id}
    assert {r.learned_ms for r in results} == {record.payload["learnedMs"]}
    assert results[0].path.read_bytes() == memory.render(record)
    assert stages(results[0].path.parent) == []


def test_eight_threads_learning_at_once_share_two_fsyncs_of_the_stream_made_by_one_thread(
    store: memory.MemoryStore, root: memory.RootRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight threads of one store learn eight findings at once, the stream's first fsync held until
    every learn's line is written: the eight learns cost two fsyncs of the stream (a quarter of one
    a learn), both made by the thread that made the first, which synced again for the seven that
    waited behind it; every learn returns with its record durable and its file in place."""
    store.learn({"text": "the stream is made", "tags": ["t"]}, root)
    stream = str(root.journal.stream_path(root.run_id, memory.STREAM))
    fsyncs: list[int] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}") == stream:
            fsyncs.append(threading.get_ident())
            for _ in range(6000 if len(fsyncs) == 1 else 0):  # the first: until all 8 lines are in
                with open(stream, "rb") as fh:
                    if fh.read().count(b"\n") >= 9:
                        break
                time.sleep(0.01)
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    learned: list[memory.Learned] = []

    def learn(i: int) -> None:
        learned.append(store.learn({"text": f"finding {i}", "tags": ["t"]}, root))

    threads = [threading.Thread(target=learn, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    monkeypatch.undo()
    assert len(learned) == 8
    assert len(fsyncs) == 2 and len(set(fsyncs)) == 1, fsyncs
    log = journal.LineLog(stream, journal.RecordCodec(root.run_id, memory.STREAM))
    assert log.watermark() == os.path.getsize(stream)
    by_id = {r.id: r for r in _records(root)}
    for one in learned:
        assert one.path.read_bytes() == memory.render(by_id[one.citation.id])


_LEARNER = """
import json, os, sys, time
import journal, memory
db, run_id, epoch, start, go = sys.argv[1:6]
store = memory.MemoryStore(db, clock=lambda: int(start))
root = memory.RootRun(store.open_journal(), journal.Lease(run_id, int(epoch)), "probe", "scope-a")
while not os.path.exists(go):
    time.sleep(0.001)
learned = store.learn({"text": "the cache is cold at dawn", "tags": ["cache", "ops"]}, root)
print(json.dumps({"record": learned.citation.id, "ms": learned.learned_ms}))
store.close()
"""


@pytest.mark.slow
def test_processes_learning_one_finding_converge_on_the_first_commit(
    root: memory.RootRun, db: Path, tmp_path: Path
) -> None:
    go = tmp_path / "go"
    env = child_env(drop=("FLOWS_FAILPOINTS",))
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                _LEARNER,
                str(db),
                root.run_id,
                str(root.lease.epoch),
                str(1_000 * (i + 1)),
                str(go),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    time.sleep(0.5)  # let the children import and wait at the start line
    go.write_bytes(b"")
    outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), [err for _, err in outs]

    [record] = _records(root)
    answers = [json.loads(out) for out, _ in outs]
    assert {a["record"] for a in answers} == {record.id}
    assert {a["ms"] for a in answers} == {record.payload["learnedMs"]}
    final = _final(db, "scope-a", FINDING)
    assert final.read_bytes() == memory.render(record)
    assert stages(final.parent) == []


# -- resume -----------------------------------------------------------------------------


def test_a_resumed_run_republishes_a_lost_file_byte_identical_without_a_second_record(
    db: Path,
) -> None:
    with memory.MemoryStore(db, clock=Clock(start=1_000)) as first:
        jr = first.open_journal()
        info, lease = jr.begin("probe", "scope-a", {})
        learned = first.learn(FINDING, memory.RootRun(jr, lease, "probe", "scope-a"))
        original = learned.path.read_bytes()
        jr.release(lease)  # the process "dies" holding nothing: the run reads interrupted
    learned.path.unlink()

    with memory.MemoryStore(db, clock=Clock(start=50_000)) as second:  # a fresh process, a later clock
        jr = second.open_journal()
        assert jr.run(info.run_id).state is journal.RunState.INTERRUPTED
        resumed = memory.RootRun(jr, jr.acquire(info.run_id), "probe", "scope-a")
        again = second.learn(FINDING, resumed)
        assert again == learned
        assert learned.path.read_bytes() == original
        assert len(list(jr.read(info.run_id, memory.STREAM))) == 1
        # and a resumed re-learn with the file still present changes nothing either
        assert second.learn(FINDING, resumed) == learned
        assert learned.path.read_bytes() == original
        assert len(list(jr.read(info.run_id, memory.STREAM))) == 1


# -- failing closed ---------------------------------------------------------------------


def test_without_a_root_run_learn_is_unjournaled_and_writes_nothing(
    store: memory.MemoryStore, db: Path
) -> None:
    with pytest.raises(memory.Unjournaled) as caught:
        store.learn(FINDING, None)
    assert caught.value.code == "memory_unjournaled"
    assert not db.parent.exists()


def test_a_flow_whose_header_turns_script_memory_off_is_refused(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    off = memory.RootRun(root.journal, root.lease, "probe", "scope-a", script=False)
    with pytest.raises(memory.UnsupportedHeader) as caught:
        store.learn(FINDING, off)
    assert caught.value.code == "unsupported_header"
    assert caught.value.run_id == root.run_id
    assert _records(root) == []
    assert not (db.parent / "flows-memory").exists()


@pytest.mark.parametrize(
    ("finding", "complaint"),
    [
        ("just text", "JSON object"),
        (["text"], "JSON object"),
        ({}, "`text`"),
        ({"text": ""}, "`text`"),
        ({"text": "   "}, "`text`"),
        ({"text": 3}, "`text`"),
        ({"text": "t", "source": ""}, "`source`"),
        ({"text": "t", "source": None}, "`source`"),
        ({"text": "t", "tags": "cache"}, "`tags`"),
        ({"text": "t", "tags": ["ok", ""]}, "`tags`"),
        ({"text": "t", "tags": [1]}, "`tags`"),
        ({"text": "t", "why": "extra"}, "unexpected: why"),
    ],
)
def test_a_malformed_finding_is_invalid_and_nothing_is_staged_or_journaled(
    store: memory.MemoryStore, root: memory.RootRun, db: Path, finding: object, complaint: str
) -> None:
    with pytest.raises(memory.FindingInvalid) as caught:
        store.learn(finding, root)
    assert caught.value.code == "memory_finding_invalid"
    assert complaint in caught.value.message
    assert _records(root) == []
    assert not (db.parent / "flows-memory").exists()


def test_a_stale_lease_fails_the_learn_with_the_journals_own_error_and_publishes_nothing(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    jr = root.journal
    jr.release(root.lease)
    newer = jr.acquire(root.run_id)  # another driver took the run over: root.lease is stale
    with pytest.raises(journal.JournalLeaseLost) as caught:
        store.learn(FINDING, root)
    assert type(caught.value) is journal.JournalLeaseLost
    assert caught.value.code == "journal_lease_lost"
    assert (caught.value.expected, caught.value.got) == (newer.epoch, root.lease.epoch)
    final = _final(db, "scope-a", FINDING)
    assert not final.exists()
    assert stages(final.parent) == []
    assert _records(root) == []


def test_a_journal_write_failure_passes_through_unchanged_and_publishes_nothing(
    store: memory.MemoryStore, root: memory.RootRun, db: Path, failpoints: Failpoints
) -> None:
    failpoints.set("linelog.before_fsync=EIO")
    with pytest.raises(journal.JournalUnwritable) as caught:
        store.learn(FINDING, root)
    assert type(caught.value) is journal.JournalUnwritable
    assert caught.value.code == "journal_unwritable"
    assert not isinstance(caught.value, memory.FlowsMemoryError)
    final = _final(db, "scope-a", FINDING)
    assert not final.exists()
    assert stages(final.parent) == []
    failpoints.set("")
    assert _records(root) == []  # the failed line was cut back
    assert store.learn(FINDING, root).path.read_bytes() == memory.render(_records(root)[0])


def _damage_the_last_line(path: Path) -> bytes:
    """Append a copy of the last line with one payload byte changed: a complete line that fails its
    checksum, which the log must refuse (not skip, not treat as torn). Returns the good bytes."""
    good = path.read_bytes()
    last = good.rstrip(b"\n").rsplit(b"\n", 1)[-1]
    forged = last.replace(b'"seq":1', b'"seq":2').replace(b"cold", b"COLD")
    with open(path, "ab") as fh:
        fh.write(forged + b"\n")
    return good


def test_a_failed_stream_read_fails_the_learn_and_is_retried_not_cached(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    store.learn(FINDING, root)
    assert isinstance(root.journal, journal.FileJournal)
    stream = root.journal.stream_path(root.run_id, memory.STREAM)
    good = _damage_the_last_line(stream)
    other = {"text": "a second finding"}

    for _ in range(2):  # the same objects, twice: each read goes to the file again
        with pytest.raises(journal.JournalCorrupt) as caught:
            store.learn(other, root)
        assert caught.value.code == "journal_corrupt"
        assert caught.value.path == stream
    final = _final(db, "scope-a", other)
    assert not final.exists()
    assert stages(final.parent) == []

    with open(stream, "r+b") as fh:  # repaired in place: the same file, the same inode
        fh.truncate(len(good))
    learned = store.learn(other, root)
    records = _records(root)
    assert [r.seq for r in records] == [1, 2]
    assert learned.path.read_bytes() == memory.render(records[1])


def test_a_staging_failure_is_unwritable_and_journals_nothing(
    store: memory.MemoryStore, root: memory.RootRun, db: Path, failpoints: Failpoints
) -> None:
    failpoints.set("staging.before_fsync=ENOSPC")
    with pytest.raises(memory.Unwritable) as caught:
        store.learn(FINDING, root)
    assert caught.value.code == "memory_unwritable"
    assert caught.value.run_id == root.run_id
    assert _records(root) == []
    final = _final(db, "scope-a", FINDING)
    assert not final.exists()
    assert stages(final.parent) == []


def test_an_unusable_memory_folder_is_unwritable_and_journals_nothing(
    store: memory.MemoryStore, root: memory.RootRun, db: Path
) -> None:
    db.parent.mkdir(parents=True, exist_ok=True)
    (db.parent / "flows-memory").write_bytes(b"a file where the folder should be")
    with pytest.raises(memory.Unwritable) as caught:
        store.learn(FINDING, root)
    assert caught.value.code == "memory_unwritable"
    assert _records(root) == []


def test_a_publish_failure_is_unwritable_and_a_retry_publishes_the_commit(
    store: memory.MemoryStore, root: memory.RootRun, db: Path, failpoints: Failpoints
) -> None:
    failpoints.set("staging.before_rename=EIO")
    with pytest.raises(memory.Unwritable) as caught:
        store.learn(FINDING, root)
    assert caught.value.code == "memory_unwritable"
    final = _final(db, "scope-a", FINDING)
    assert caught.value.path == final
    assert not final.exists()
    assert stages(final.parent) == []
    [record] = _records(root)  # the commit stands; the retry publishes it without a second one
    failpoints.set("")
    store.learn(FINDING, root)
    assert final.read_bytes() == memory.render(record)
    assert len(_records(root)) == 1


# -- async -------------------------------------------------------------------------------------


def test_async_learns_run_on_the_stores_own_few_threads(
    store: memory.MemoryStore, root: memory.RootRun
) -> None:
    import asyncio

    threads: set[str] = set()

    def note(stream: str, key: str | None) -> None:
        threads.add(threading.current_thread().name)

    observed = memory.RootRun(ObservedJournal(root.journal, note), root.lease, "probe", "scope-a")  # type: ignore[arg-type]

    async def main() -> list[memory.Learned]:
        return await asyncio.gather(*(store.alearn({"text": f"finding {i}"}, observed) for i in range(40)))

    learned = asyncio.run(main())
    assert len({x.id for x in learned}) == 40
    assert len(_records(root)) == 40
    assert threading.current_thread().name not in threads
    assert all(name.startswith("flows-memory") for name in threads)
    assert len(threads) <= 8
