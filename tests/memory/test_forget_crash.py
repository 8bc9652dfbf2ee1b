"""A forget killed (SIGKILL) at every failpoint it reaches, on every journal backend; and a forget and
a learn of one finding racing in separate processes.

After a kill the journal either holds the forget or not. If not, the finding is untouched. If it
does, the next ``sync`` (or ``flows check --repair``) finishes it: from then on no read, in any
process, returns the finding, no learned file of it is left, and ``flows check`` is clean.
"""

from __future__ import annotations

import contextlib
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import memory
from tests._helpers.failpoints import child_env
from tests.conftest import run_python
from tests.pg_fixtures import _drop, admin_connection, server_dsn, with_schema
from tests.reliability.failpoints import failpoint_names

_FORGET = r"""
import sys
import memory
from staging import _failpoints

db, location, key = sys.argv[1:4]
with memory.MemoryStore(db, journal=location) as store, store.session(scope="desk", flow="forgetter") as s:
    forgotten = s.forget(key, reason="killed on the way")
    print("acknowledged", forgotten.citation.id, flush=True)
print("fired", ",".join(sorted(_failpoints._fired)), flush=True)
"""

TEXTS = ("the swap fee is 0.3 percent", "the pool is deep", "gas is cheap at noon")


def _setup(db: Path, location: str) -> list[str]:
    """Three findings: the first two synced into the DB, the third an unsynced file."""
    with memory.MemoryStore(db, journal=location) as store:
        with store.session(scope="desk") as s:
            keys = [s.learn({"text": t, "tags": ["fees"]}).key for t in TEXTS[:2]]
        store.sync()
        with store.session(scope="desk") as s:
            keys.append(s.learn({"text": TEXTS[2], "tags": ["fees"]}).key)
    return keys


def _forget_in_child(db: Path, location: str, key: str, plan: str) -> subprocess.CompletedProcess[str]:
    return run_python(_FORGET, str(db), location, key, env={"FLOWS_FAILPOINTS": plan}, timeout=60)


def _journaled(store: memory.MemoryStore, key: str) -> bool:
    jr = store.open_journal()
    return any(r.payload["id"] == key for run in jr.runs() for r in jr.read(run.run_id, memory.RETIRE_STREAM))


def _shows(store: memory.MemoryStore, key: str) -> bool:
    with memory.MemoryStore(store.db_path, journal=store.journal_location) as fresh:
        seen = [
            key in {e.key for e in store.recall(limit=None)},
            key in {a.finding.key for a in store.why("swap fee pool gas", limit=50)},
            store.get(key) is not None,
            key in {e.key for e in fresh.recall(limit=None)},
        ]
    assert len(set(seen)) == 1, seen  # every read agrees
    return seen[0]


def _reached(tmp_path: Path, location: str, target: int) -> list[str]:
    db = tmp_path / "probe" / "history.db"
    key = _setup(db, location)[target]
    names = failpoint_names()
    result = _forget_in_child(db, location, key, ",".join(f"{n}=sleep0" for n in names))
    assert result.returncode == 0, result.stderr
    fired = result.stdout.split("fired ")[1].strip().split(",")
    return [n for n in fired if n]


@pytest.mark.slow
@pytest.mark.parametrize("target", [0, 2], ids=["synced", "unsynced"])
def test_a_forget_killed_at_every_failpoint_is_all_or_nothing_and_sync_finishes_it(
    tmp_path: Path, journal_location: str, backend_name: str, target: int
) -> None:
    names = _reached(tmp_path, journal_location, target)
    assert "memory.after_append" in names and "staging.after_rename" in names
    if backend_name == "file":
        assert {"linelog.before_fsync", "linelog.after_append"} <= set(names)
    journaled_cases = 0
    for n, name in enumerate(names):
        with _fresh_journal(backend_name, tmp_path / f"case{n}") as location:
            journaled_cases += _kill_one(tmp_path / f"case{n}" / "history.db", location, name, target)
    assert journaled_cases > 0
    if backend_name == "file":  # the file journal's own failpoints land before the commit too
        assert journaled_cases < len(names)


def _kill_one(db: Path, location: str, name: str, target: int) -> bool:
    """Kill a forget at ``name``, judge what it left, recover with ``sync``; True when it was journaled."""
    keys = _setup(db, location)
    key = keys[target]
    result = _forget_in_child(db, location, key, f"{name}=kill")
    assert result.returncode == -signal.SIGKILL, (name, result.stdout, result.stderr)
    assert "acknowledged" not in result.stdout

    with memory.MemoryStore(db, journal=location) as store:
        journaled = _journaled(store, key)
        if not journaled:
            assert _shows(store, key), name
        problems = memory.check_store(store)
        assert {p.kind for p in problems} <= {"retirement_unpublished", "learned_forgotten"}, name
        assert journaled or not problems, name
        # Either recovery finishes it: `flows check --repair`, then `flows sync`.
        memory.repair_store(store, problems)
        for _ in ("after repair", "after sync"):
            assert _shows(store, key) is not journaled, name
            assert not journaled or not (memory.learned_dir(db, "desk") / f"{key}.json").exists(), name
            assert memory.check_store(store) == [], name
            assert all(_shows(store, k) for k in keys if k != key), name
            store.sync()
        # The user tries again: one forget in the history, whatever the kill left.
        with store.session(scope="desk") as s:
            s.forget(key, reason="again")
        assert not _shows(store, key)
        assert [e.kind for e in store.history(key)].count("forgotten") == 1, name
    return journaled


@contextlib.contextmanager
def _fresh_journal(backend_name: str, base: Path) -> Iterator[str]:
    """An empty journal of ``backend_name`` for one case: a folder, or a private PostgreSQL schema
    created for it and dropped after."""
    if backend_name == "file":
        yield str(base / "journal")
        return
    from psycopg import sql

    schema = f"flows_test_forget_{secrets.token_hex(6)}"
    with admin_connection() as conn:
        conn.execute(sql.SQL("create schema {}").format(sql.Identifier(schema)))
    try:
        yield with_schema(server_dsn(), schema)
    finally:
        _drop(schema)


_LEARN_OR_FORGET = r"""
import sys, time
import memory

db, location, role, key, start = sys.argv[1:6]
finding = {"text": "the swap fee is 0.3 percent", "tags": ["fees"]}
while time.time() < float(start):
    pass
with memory.MemoryStore(db, journal=location) as store, store.session(scope="desk", flow=role) as s:
    try:
        if role == "forget":
            s.forget(key, reason="race")
        else:
            s.learn(finding)
        print("ok")
    except memory.FindingRetired:
        print("retired")
"""


@pytest.mark.slow
def test_concurrent_forgets_and_learns_of_one_finding_leave_it_forgotten_everywhere(
    tmp_path: Path, backend_name: str
) -> None:
    for attempt in range(3):
        with _fresh_journal(backend_name, tmp_path / f"race{attempt}") as location:
            _race(tmp_path / f"race{attempt}" / "history.db", location)


def _race(db: Path, location: str) -> None:
    """Two forgets and four learns of one finding, started together."""
    with memory.MemoryStore(db, journal=location) as store, store.session(scope="desk") as s:
        key = s.learn({"text": "the swap fee is 0.3 percent", "tags": ["fees"]}).key
    start = str(time.time() + 1.5)
    roles = ["forget", "learn", "learn", "forget", "learn", "learn"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _LEARN_OR_FORGET, str(db), location, role, key, start],
            env=child_env(""),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in roles
    ]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert all(o.strip() in ("ok", "retired") for o, _ in outs), outs
    assert all(o.strip() == "ok" for (o, _), r in zip(outs, roles, strict=True) if r == "forget")
    with memory.MemoryStore(db, journal=location) as store:
        assert not _shows(store, key)
        assert not (memory.learned_dir(db, "desk") / f"{key}.json").exists()
        assert memory.check_store(store) == []
        store.sync()
        assert not _shows(store, key)
        assert memory.check_store(store) == []
