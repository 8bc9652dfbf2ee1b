"""Updates of one memory racing in other processes: the memory keeps one line of versions (one live
version, each version replaced at most once), every update by memory id is acknowledged, an erase
racing updates leaves no version and no byte of them, and an update killed after its commit that
lost to a forget never comes back (sync, check --repair)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import journal
import memory
from tests._helpers.failpoints import child_env, run_armed

UPDATER = r"""
import sys, memory
db, memory_id, who, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with memory.MemoryStore(db) as store, store.session(scope="s", flow=f"w{who}") as session:
    for i in range(n):
        try:
            print("ACK", session.update(memory_id, {"text": f"SECRET w{who} update {i}"}).key, flush=True)
        except memory.FlowsMemoryError as exc:
            print("ERR", exc.code, flush=True)
"""


def _updaters(db: Path, memory_id: str, procs: int, each: int) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", UPDATER, str(db), memory_id, str(w), str(each)],
            env=child_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        for w in range(procs)
    ]


def _one_line(store: memory.MemoryStore, memory_id: str) -> list[memory.Recalled]:
    """The memory's live versions, after checking that no version was replaced twice."""
    replaced = Counter(e.key for e in store.history(memory_id) if e.kind == "superseded")
    assert [k for k, n in replaced.items() if n > 1] == [], "a version replaced by two updates"
    return [e for e in store.recall(scope="s", limit=None) if e.memory_id == memory_id]


def test_racing_updates_in_processes_keep_one_live_version(tmp_path: Path) -> None:
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="prep") as session:
        memory_id = session.learn({"text": "the first version"}).key
    outs = [p.communicate(timeout=300)[0] for p in _updaters(db, memory_id, 6, 15)]
    lines = [line.split() for out in outs for line in out.splitlines()]
    assert [line for line in lines if line[0] != "ACK"] == []  # an update names the memory: none refused
    acked = {line[1] for line in lines}
    assert len(acked) == 90
    with memory.MemoryStore(db) as store:
        live = _one_line(store, memory_id)
        assert len(live) == 1 and live[0].key in acked
        store.sync()
    with memory.MemoryStore(db) as store:
        assert [e.key for e in _one_line(store, memory_id)] == [live[0].key]
        assert memory.check_store(store) == []


def test_an_erase_racing_updates_leaves_no_version_and_no_byte(tmp_path: Path) -> None:
    for attempt in range(6):
        db = tmp_path / str(attempt) / "history.db"
        db.parent.mkdir()
        with memory.MemoryStore(db) as store, store.session(scope="s", flow="prep") as session:
            memory_id = session.learn({"text": "SECRET base"}).key
        procs = _updaters(db, memory_id, 8, 6)
        assert procs[0].stdout is not None
        procs[0].stdout.readline()  # the updates are under way
        # a version in an updater's running root run: forgotten now, its record rewritten below
        with (
            memory.MemoryStore(db) as store,
            store.session(scope="s", flow="eraser") as session,
            contextlib.suppress(journal.JournalLeaseHeld),
        ):
            session.erase(memory_id, reason="the user asked")
        for p in procs:
            p.communicate(timeout=300)
        with memory.MemoryStore(db) as store:
            assert _one_line(store, memory_id) == []  # no update after the erase's forget lives
        with memory.MemoryStore(db) as store, store.session(scope="s", flow="eraser") as session:
            session.erase(memory_id, reason="the user asked")  # every run has ended: finished now
        with memory.MemoryStore(db) as store:
            assert _one_line(store, memory_id) == []
            assert memory.check_store(store) == []
        files = [p for p in db.parent.rglob("*") if p.is_file() and not p.is_symlink()]
        holding = [p for p in files if b"SECRET" in p.read_bytes()]
        assert holding == [], f"attempt {attempt}: erased text in {holding}"


KILLED_UPDATE = r"""
import sys, memory
db, memory_id = sys.argv[1], sys.argv[2]
with memory.MemoryStore(db) as store, store.session(scope="s", flow="updater") as session:
    print("OPEN", flush=True)
    print("ACK", session.update(memory_id, {"text": "version two"}).key, flush=True)
"""


def test_a_forget_that_waited_for_an_update_killed_after_its_commit_finds_the_updates_version(
    tmp_path: Path,
) -> None:
    """The updater reads the live version and, holding the scope's turn, is held up before it
    stages; a forget of the memory in another process waits for that turn. The updater commits and
    is killed right after the append. The update's commit is the first retirement of version one in
    the journal: the forget, taking the turn the updater died in, first finishes what the updater
    left (its version two published, version one's retired file), then finds version one superseded
    and says so (``by``). Before, the forget found no retired file, committed a second retirement
    of version one and published it first, so the committed update counted as lost to a forget
    that came after it: one version retired twice, by whichever file a crash let be first."""
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="prep") as session:
        memory_id = session.learn({"text": "version one"}).key
    failpoints = "memory.before_stage=sleep3000,memory.after_append=kill"
    updater = subprocess.Popen(
        [sys.executable, "-c", KILLED_UPDATE, str(db), memory_id],
        env=child_env(failpoints),
        stdout=subprocess.PIPE,
        text=True,
    )
    # its start-up (imports) takes a second or more on a busy machine: wait until it has opened
    assert updater.stdout is not None and updater.stdout.readline().strip() == "OPEN"
    time.sleep(1.0)  # it has read version one and waits, in the turn, before staging version two
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="forgetter") as session:
        forgotten = session.forget(memory_id, reason="the user asked")
    out, _ = updater.communicate(timeout=60)
    assert updater.returncode == -9 and "ACK" not in out
    assert forgotten.by is not None and forgotten.by != memory_id  # superseded by the update's version
    with memory.MemoryStore(db) as store:
        assert [r.key for r in store.recall(scope="s", limit=None)] == [forgotten.by]
        events = [(e.kind, e.key) for e in store.history(memory_id)]
        assert events == [("learned", memory_id), ("learned", forgotten.by), ("superseded", memory_id)]
        backend = store.open_journal()
        retirements = [r for run in backend.runs() for r in backend.read(run.run_id, memory.RETIRE_STREAM)]
        assert retirements == []  # version one is retired once: by the update's commit
        store.sync()
        assert [r.key for r in store.recall(scope="s", limit=None)] == [forgotten.by]
        assert memory.check_store(store) == []


def test_an_update_killed_after_its_commit_on_a_file_journal_leaves_one_live_version(tmp_path: Path) -> None:
    """The updater is killed right after its commit, before any file is published; a store's open,
    the resume of the killed run (its republish), an update on it and a sync leave one live version."""
    db = tmp_path / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="s", flow="prep") as session:
        memory_id = session.learn({"text": "version one"}).key
    out = run_armed("memory.after_append=kill", KILLED_UPDATE, str(db), memory_id)
    assert out.returncode == -9 and "ACK" not in out.stdout, out.stderr[-2000:]
    with memory.MemoryStore(db) as store:
        backend = store.open_journal()
        (killed,) = [r.run_id for r in backend.runs() if r.state is journal.RunState.INTERRUPTED]
        store.republish_run(backend, killed)  # what a resume of the killed run does first
        assert [e.text for e in store.recall(scope="s", limit=None)] == ["version two"]
        with store.session(scope="s", flow="after") as session:
            third = session.update(memory_id, {"text": "version three"}).key
        store.sync()
        assert [e.key for e in store.recall(scope="s", limit=None)] == [third]
        live = store.current(memory_id)
        assert live is not None and live.key == third
        assert memory.check_store(store) == []


REFRESHING_READER = r"""
import sys
from flows.langgraph import JournalStore
store = JournalStore(db=sys.argv[1], ttl={"refresh_on_read": True, "default_ttl": 60})
print("OPEN", flush=True)
print("READ", store.get(("users", "u1"), "k", refresh_ttl=True), flush=True)
"""


def test_a_langgraph_read_killed_while_refreshing_a_deleted_item_never_brings_it_back(tmp_path: Path) -> None:
    """A read that refreshes an item's TTL is an update of it: held up before it stages, it loses to
    a delete another process makes and is answered for, then is killed right after its commit. The
    item stays deleted for every store, after a fresh open, a sync and a repair."""
    from flows.langgraph import JournalStore

    db = tmp_path / "history.db"
    ns, ttl = ("users", "u1"), {"refresh_on_read": True, "default_ttl": 60}
    with JournalStore(db=str(db), ttl=ttl) as store:
        store.put(ns, "k", {"name": "alice", "secret": "s1"}, ttl=60)
    failpoints = "memory.before_stage=sleep3000,memory.after_append=kill"
    argv = [sys.executable, "-c", REFRESHING_READER, str(db)]
    reader = subprocess.Popen(argv, env=child_env(failpoints), stdout=subprocess.PIPE, text=True)
    assert reader.stdout is not None and reader.stdout.readline().strip() == "OPEN"
    time.sleep(1.0)  # it has read the item and waits before staging the refresh
    with JournalStore(db=str(db), ttl=ttl) as store:
        store.delete(ns, "k")
        assert store.get(ns, "k") is None
    out, _ = reader.communicate(timeout=60)
    assert reader.returncode == -9 and "READ" not in out
    with JournalStore(db=str(db), ttl=ttl) as store:
        assert store.get(ns, "k") is None
    with memory.MemoryStore(db) as mem:
        mem.sync()
        memory.repair_store(mem, memory.check_store(mem))
        assert memory.check_store(mem) == []
    with JournalStore(db=str(db), ttl=ttl) as store:
        assert store.get(ns, "k") is None
