"""Two hosts (separate ``<db-dir>``s) updating one memory through one PostgreSQL journal.

A host's update by memory id builds on the version another host wrote, synced here or not; updates
racing on both hosts take turns through the journal, so every one is answered, each answered
version is the live one or was superseded by a later one, and both hosts agree on the live version.
A forget racing them never leaves an answered update hidden behind a retirement that came later.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import memory
from tests._helpers.hosts import host, host_db, two_hosts

ROOT = Path(__file__).resolve().parents[2]


def test_an_update_on_b_builds_on_the_version_a_wrote_without_a_sync(
    tmp_path: Path, postgres_dsn: str
) -> None:
    a, b = two_hosts(tmp_path, postgres_dsn)
    with a.session(scope="team") as s:
        mid = s.learn({"text": "the meeting is on monday"}).memory_id
    b.materialize()
    with a.session(scope="team") as s:
        second = s.update(mid, {"text": "the meeting is on tuesday"})
    # B has not synced: it still reads the memory as one memory, at A's version, from its commit
    # (a read writes nothing: not even a read-only store fails)
    files = sorted(p.name for p in (tmp_path / "b").rglob("*.json"))
    now = b.current(mid)
    assert now is not None and now.key == second.key and now.text == "the meeting is on tuesday"
    assert sorted(p.name for p in (tmp_path / "b").rglob("*.json")) == files
    with host(tmp_path, "b", postgres_dsn, read_only=True) as ro:
        seen = ro.current(mid)
        assert seen is not None and seen.key == second.key
    with b.session(scope="team") as s:
        third = s.update(mid, {"text": "the meeting is on wednesday"})
    assert third.memory_id == mid
    for store in (a, b):
        live = store.current(mid)
        assert live is not None and live.key == third.key
        kinds = [(e.kind, e.key) for e in store.history(mid) if e.kind != "learned"]
        assert ("superseded", second.key) in kinds
        store.sync()
        assert [e.key for e in store.recall(scope="team")] == [third.key]
        assert memory.check_store(store) == []
    a.close()
    b.close()


_UPDATER = """
import sys
import memory
dsn, db, mid, name, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
store = memory.MemoryStore(db, journal=dsn)
print("ready", flush=True)
sys.stdin.readline()
with store.session(scope="race", flow=name) as s:
    for i in range(n):
        try:
            print("acked", s.update(mid, {"text": f"{name} wrote version {i}"}).key, flush=True)
        except memory.FlowsMemoryError as exc:
            print("refused", exc.code, str(exc).replace(chr(10), " ")[:300], flush=True)
store.close()
"""


def _start(script: str, *args: str) -> subprocess.Popen[str]:
    """A helper process, once it has opened its store (it then waits for a line on stdin)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _go(procs: list[subprocess.Popen[str]]) -> None:
    """Let every process of ``procs`` go at once."""
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()


def _finish(proc: subprocess.Popen[str]) -> str:
    """What ``proc`` printed, once it has exited 0."""
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.stdout.close()
    assert proc.wait(120) == 0
    return out


@pytest.mark.slow
def test_updates_racing_on_two_hosts_are_all_answered_and_agree(tmp_path: Path, postgres_dsn: str) -> None:
    dbs = {name: tmp_path / name / "history.db" for name in ("a", "b")}
    with memory.MemoryStore(dbs["a"], journal=postgres_dsn) as a, a.session(scope="race") as s:
        mid = s.learn({"text": "version zero"}).memory_id
    with memory.MemoryStore(dbs["b"], journal=postgres_dsn) as b:
        b.materialize()
    procs = [
        _start(_UPDATER, postgres_dsn, str(db), mid, f"{name}{w}", "12")
        for name, db in dbs.items()
        for w in range(2)
    ]
    _go(procs)
    outs = [_finish(p) for p in procs]
    lines = [line.split(" ", 2) for out in outs for line in out.splitlines()]
    assert [line for line in lines if line[0] != "acked"] == []
    acked = {line[1] for line in lines}
    assert len(acked) == 12 * len(procs)
    live = set()
    for db in dbs.values():
        with memory.MemoryStore(db, journal=postgres_dsn) as store:
            store.sync()
            now = store.current(mid)
            assert now is not None and now.key in acked
            live.add(now.key)
            assert [e.key for e in store.recall(scope="race")] == [now.key]
            kinds: dict[str, set[str]] = {}
            for e in store.history(mid):
                kinds.setdefault(e.key, set()).add(e.kind)
            # every answered version is the live one or was superseded by a later one: none lost
            assert [k for k in acked if k != now.key and "superseded" not in kinds.get(k, set())] == []
            assert memory.check_store(store) == []
    assert len(live) == 1


_FORGETTER = """
import sys, time
import memory
dsn, db, mid, delay = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
store = memory.MemoryStore(db, journal=dsn)
print("ready", flush=True)
sys.stdin.readline()
time.sleep(delay)
with store.session(scope="race", flow="forgetter") as s:
    now = store.current(mid)
    assert now is not None, "the memory has a live version on some host all along"
    done = s.forget(now.key, reason="forgotten in the race")
    print(now.key, done.reason if done.reason is not None else "superseded", flush=True)
store.close()
"""


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.02, 0.05, 0.1])
def test_a_forget_racing_updates_on_another_host_retires_a_version_at_most_once(
    tmp_path: Path, postgres_dsn: str, delay: float
) -> None:
    a_db, b_db = host_db(tmp_path, "a"), host_db(tmp_path, "b")
    with memory.MemoryStore(a_db, journal=postgres_dsn) as a, a.session(scope="race") as s:
        mid = s.learn({"text": "version zero"}).memory_id
    with memory.MemoryStore(b_db, journal=postgres_dsn) as b:
        b.materialize()
    updater = _start(_UPDATER, postgres_dsn, str(a_db), mid, "a", "30")
    forgetter = _start(_FORGETTER, postgres_dsn, str(b_db), mid, str(delay))
    _go([updater, forgetter])
    updates = [line.split(" ", 2) for line in _finish(updater).splitlines()]
    key, answer = _finish(forgetter).strip().split(" ", 1)
    acked = [line[1] for line in updates if line[0] == "acked"]
    with memory.MemoryStore(a_db, journal=postgres_dsn) as store:
        store.sync()
        kinds: dict[str, list[str]] = {}
        for e in store.history(mid):
            kinds.setdefault(e.key, []).append(e.kind)
        # one retirement per version, whoever made it: never forgotten and superseded both
        assert [k for k, seen in kinds.items() if {"forgotten", "superseded"} <= set(seen)] == []
        retired_as = "forgotten" if answer == "forgotten in the race" else "superseded"
        assert retired_as in kinds[key]
        now = store.current(mid)
        if retired_as == "forgotten":  # the forget stood: nothing was built on that version after it
            assert now is None
            assert (acked[-1] if acked else mid) == key
            assert [line[0] for line in updates] == ["acked"] * len(acked) + ["refused"] * (30 - len(acked))
        else:  # superseded first: the forget answered with that, and the updates all went on
            assert [line for line in updates if line[0] != "acked"] == []
            assert now is not None and now.key == acked[-1]
        assert memory.check_store(store) == []


def test_catch_up_publishes_what_other_hosts_committed_since_and_nothing_retired(
    tmp_path: Path, postgres_dsn: str
) -> None:
    a, b = two_hosts(tmp_path, postgres_dsn)
    with a.session(scope="team") as s:
        kept = s.learn({"text": "the build runs at night"})
        gone = s.learn({"text": "the old wiki is at /wiki"})
        s.forget(gone.key, reason="moved")
    assert b.recall(scope="team") == []  # learns reach another host when it catches up (or syncs)
    # the first one is a whole materialize: the live finding's file, and the forgotten one's retired
    # file (never its learned file)
    assert b.catch_up() == 2
    assert [e.key for e in b.recall(scope="team")] == [kept.key]
    assert b.catch_up() == 0
    with a.session(scope="team") as s:
        newer = s.update(kept.memory_id, {"text": "the build runs at dawn"})
        fresh = s.learn({"text": "standup is at ten"})
        forgotten = s.learn({"text": "lunch is at one"})
        s.forget(forgotten.key, reason="wrong")
    assert b.catch_up() == 2  # only the records after the last look: the new version and one learn
    assert sorted(e.key for e in b.recall(scope="team")) == sorted([newer.key, fresh.key])
    with host(tmp_path, "b", postgres_dsn, read_only=True) as ro:
        assert ro.catch_up() == 0  # a read-only store writes nothing
    with host(tmp_path, "c", str(tmp_path / "j")) as one:
        assert one.catch_up() == 0  # a file journal is one host's
    b.sync()
    assert sorted(e.key for e in b.recall(scope="team")) == sorted([newer.key, fresh.key])
    assert memory.check_store(b) == []
    a.close()
    b.close()


def test_catch_up_starts_where_the_last_process_of_the_store_stopped(
    tmp_path: Path, postgres_dsn: str
) -> None:
    a = host(tmp_path, "a", postgres_dsn)
    with a.session(scope="team") as s:
        first = s.learn({"text": "the office opens at eight"})
    with host(tmp_path, "b", postgres_dsn) as b:
        assert b.catch_up() == 1  # a whole materialize, once
    kept = tmp_path / "b" / "flows-cache" / "caught-up.json"
    assert kept.is_file()
    with a.session(scope="team") as s:
        second = s.learn({"text": "the office closes at six"})
    (tmp_path / "b" / "flows-memory").rename(tmp_path / "b" / "moved-aside")  # what it published
    with host(tmp_path, "b", postgres_dsn) as b:  # another process: only what is new is read
        assert b.catch_up() == 1
        assert [e.key for e in b.recall(scope="team")] == [second.key]
    kept.write_bytes(b"{not json")  # damaged (or lost): derived, so the next one reads it all again
    with host(tmp_path, "b", postgres_dsn) as b:
        assert b.catch_up() == 1  # the first one's file was moved aside: it is published again
        assert sorted(e.key for e in b.recall(scope="team")) == sorted([first.key, second.key])
    a.close()
