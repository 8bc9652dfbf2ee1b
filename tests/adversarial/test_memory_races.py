"""Reads racing ``sync`` in other processes see one consistent state: every acknowledged finding
exactly once, nothing omitted, no spurious ``memory_unreachable`` for a file sync just dropped, and
``why`` never shows a finding twice. A learner, a syncer looping, and readers run as separate
processes for a bounded number of learns."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from tests.conftest import ROOT

LEARNS = 120
READERS = 2

WORKER = r"""
import glob, os, sys, time, orjson, memory, journal
role, db, acks, done = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
learns = int(sys.argv[5])
texts = [f"racing finding {i} common" for i in range(learns)]
possible = {memory.finding_id("race", memory.validate({"text": t}, "race")): t for t in texts}

def finished():
    return os.path.exists(done)

def syncs_done():
    try:
        with open(done + ".syncs", "rb") as f:
            return int(f.read() or b"0")
    except (OSError, ValueError):
        return 0

def wait_for(ready, what):
    deadline = time.monotonic() + 60
    while not ready():
        if time.monotonic() > deadline:
            sys.exit(f"gave up waiting for {what}")
        time.sleep(0.002)

if role == "learner":
    # the race is made, not hoped for: learning starts once the syncer and every reader run, and
    # every 30 learns waits for a sync to finish among them (a fast disk once learned all 120
    # before the other processes had started)
    wait_for(lambda: len(glob.glob(done + ".ready.*")) == int(sys.argv[6]), "the others to start")
    with memory.MemoryStore(db) as store:
        jr = store.open_journal()
        _, lease = jr.begin("race", "race", {})
        root = memory.RootRun(jr, lease, "race", "race")
        with open(acks, "ab") as out:
            for i, t in enumerate(texts):
                key = store.learn({"text": t}, root).id
                out.write(key.encode() + b"\n")  # acknowledged: every read from now on must see it
                out.flush()
                if i % 30 == 29:
                    seen = syncs_done()
                    wait_for(lambda: syncs_done() > seen, "a sync")
        jr.finish(lease, journal.RunState.DONE)
    open(done, "w").close()
    print(orjson.dumps({"role": role, "learned": learns}).decode())
elif role == "syncer":
    syncs = 0
    store = memory.MemoryStore(db)
    open(done + ".ready.syncer", "w").close()
    while syncs < 5000:
        last = finished()
        store.sync(materialize=False)
        syncs += 1
        with open(done + ".syncs", "wb") as f:
            f.write(str(syncs).encode())
        if last:
            break
    store.close()
    print(orjson.dumps({"role": role, "syncs": syncs}).decode())
else:
    reads, problems = 0, []
    store = memory.MemoryStore(db)
    open(done + f".ready.reader{os.getpid()}", "w").close()
    while reads < 20000 and not problems:
        last = finished()
        if reads % 7 == 6:  # now and then a fresh process's view: nothing cached
            store.close()
            store = memory.MemoryStore(db)
        with open(acks, "rb") as f:
            acked = {k for k in f.read().split(b"\n")[:-1]}
        acked = {k.decode() for k in acked}
        try:
            every = [e.key for e in store.recall(limit=None)]
            newest = [e.key for e in store.recall(limit=10)]
            why = [a.finding.key for a in store.why("common", limit=2 * learns)]
        except Exception as exc:
            problems.append(f"{type(exc).__name__}: {getattr(exc, 'code', '')}: {exc}")
            break
        for name, keys in (("recall", every), ("why", why)):
            if len(keys) != len(set(keys)):
                problems.append(f"{name} returned a finding twice")
            if not acked <= set(keys):
                problems.append(f"{name} omitted {len(acked - set(keys))} acknowledged finding(s)")
            if not set(keys) <= set(possible):
                problems.append(f"{name} returned a finding nobody learned")
        if not min(10, len(acked)) <= len(set(newest)) == len(newest) <= 10:
            problems.append(f"recall(limit=10) returned {newest} with {len(acked)} acknowledged")
        reads += 1
        if last:
            break
    store.close()
    print(orjson.dumps({"role": role, "reads": reads, "problems": problems}).decode())
"""


def test_readers_racing_sync_in_other_processes_see_every_finding_exactly_once(tmp_path: Path) -> None:
    db, acks, done = tmp_path / "store" / "history.db", tmp_path / "acks", tmp_path / "done"
    acks.write_bytes(b"")
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}

    def start(role: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", WORKER, role, *map(str, (db, acks, done, LEARNS, READERS + 1))],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    procs = [start("learner"), start("syncer"), *(start("reader") for _ in range(READERS))]
    reports = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
            reports.append(orjson.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if os.environ.get("FLOWS_ADV_TALLY"):  # figures for docs/RELIABILITY.md
        with open(os.environ["FLOWS_ADV_TALLY"], "ab") as tally:
            tally.write(orjson.dumps({"races": reports}) + b"\n")
    readers = [r for r in reports if r["role"] == "reader"]
    assert [r["problems"] for r in readers] == [[]] * READERS
    assert all(r["reads"] > 0 for r in readers)
    syncs = next(r["syncs"] for r in reports if r["role"] == "syncer")
    assert syncs > 1, "the syncer never raced the readers"


SETTLED = 300

SETTLED_WORKER = r"""
import os, sys, time, orjson, memory
role, db, keys_path, started, done = sys.argv[1:6]
keys = set(orjson.loads(open(keys_path, "rb").read()))
if role == "syncer":
    while len([n for n in os.listdir(os.path.dirname(started)) if n.startswith("started")]) < 2:
        time.sleep(0.001)
    with memory.MemoryStore(db) as store:
        report = store.sync(materialize=False)
    open(done, "w").close()
    print(orjson.dumps({"role": role, "ingested": report.ingested}).decode())
else:
    reads, problems = 0, []
    open(started + role, "w").close()
    while reads < 20000 and not problems:
        last = os.path.exists(done)
        try:
            with memory.MemoryStore(db) as store:  # a fresh view each time: the index, not a cache
                every = [e.key for e in store.recall(limit=None)]
                newest = [e.key for e in store.recall(limit=10)]
                probe = sorted(keys)[reads % len(keys)]
                got = store.get(probe)
        except Exception as exc:
            problems.append(f"{type(exc).__name__}: {getattr(exc, 'code', '')}: {exc}")
            break
        if len(every) != len(set(every)) or set(every) != keys:
            problems.append(f"recall: {len(every)} answers, {len(set(every) ^ keys)} off")
        if len(newest) != 10 or not set(newest) <= keys:
            problems.append(f"recall(limit=10) returned {newest}")
        if got is None or got.key != probe:
            problems.append(f"get({probe}) returned {got}")
        reads += 1
        if last:
            break
    print(orjson.dumps({"role": role, "reads": reads, "problems": problems}).decode())
"""


def test_fresh_readers_of_a_settled_folders_index_racing_sync_see_every_finding_exactly_once(
    tmp_path: Path,
) -> None:
    """Readers that start from a settled folder's files' index (so they look only at the files
    they return) while a sync in another process ingests and drops every file."""
    import time

    import memory
    from memory._filecache import CACHE_DIR, FileCache

    db = tmp_path / "store" / "history.db"
    with memory.MemoryStore(db) as store, store.session(scope="race", flow="race") as s:
        keys = [s.learn({"text": f"settled finding {i}", "tags": ["t"]}).id for i in range(SETTLED)]
    time.sleep(2.2)  # older than the index's racy window: the next read stamps it
    with memory.MemoryStore(db) as store:
        assert len(store.recall(limit=None)) == SETTLED
    index = FileCache(db.parent / CACHE_DIR, db.parent / "flows-memory")._open(memory.learned_dir(db, "race"))
    assert index is not None and index.header["stamp"] is not None
    keys_path = tmp_path / "keys.json"
    keys_path.write_bytes(orjson.dumps(keys))
    started, done = tmp_path / "sig" / "started", tmp_path / "sig" / "done"
    started.parent.mkdir()
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SETTLED_WORKER, role, str(db), str(keys_path), str(started), str(done)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for role in ("reader-a", "reader-b", "syncer")
    ]
    reports = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            assert proc.returncode == 0, err
            reports.append(orjson.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    readers = [r for r in reports if r["role"] != "syncer"]
    assert [r["problems"] for r in readers] == [[], []]
    assert all(r["reads"] > 1 for r in readers)
    assert next(r["ingested"] for r in reports if r["role"] == "syncer") == SETTLED
    assert not any(memory.learned_dir(db, "race").iterdir())
