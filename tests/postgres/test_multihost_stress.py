"""Three hosts (separate ``<db-dir>``s), two processes each, sharing one PostgreSQL journal: every
process learns, updates, forgets, forgets by filter and erases overlapping memories of one scope at
random, and processes are SIGKILLed at random instants and started again. After recovery on each
host (``catch_up``, ``sync``, ``check`` and its repair) every host agrees:

- one live version per memory id, the same on every host;
- nothing forgotten (by a forget or a forget by filter) is live anywhere;
- nothing acknowledged is lost: each answered learn or update is live, or the journal retires it
  (forgotten, superseded, erased), and no answered update is told ``lost`` in a history;
- nothing erased survives: no byte of any version of an erased memory is in the journal's table or
  in any file under any host's folder (the history DB and its log, learned and retired files, the
  caches, stages and quarantine).

``python -m tests.postgres.test_multihost_stress --seconds 300`` runs a longer soak against
``$FLOWS_TEST_PG`` and prints what it judged.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import memory
from memory._finding import finding_id, validate

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ("a", "b", "c")
PER_HOST = 2
SCOPE = "stress"
USERS = ("ann", "bob", "cy")
# what a process may be refused with while others race it: a version retired meanwhile, a memory
# erased, an erase whose commits are in runs still running (the record stands, the rest is left)
REFUSALS = {"memory_finding_retired", "memory_finding_unknown", "journal_lease_held"}

_WORKER = r"""
import random, sys, time
import journal, memory
dsn, db, name, salt = sys.argv[1:5]
mids = sys.argv[5].split(",")
rng = random.Random(salt)
OPS = ["learn", "update", "forget", "forget_where", "erase", "read"]
store = memory.MemoryStore(db, journal=dsn)
print("ready", flush=True)
until = float(sys.stdin.readline())

def out(*parts):
    print(*parts, flush=True)

def finding(token, user):
    return {"text": f"fact {token}", "source": "stress", "metadata": {"user": user}}

def pick():
    if rng.random() < 0.5:
        live = store.recall(scope="stress", limit=None)
        if live:
            return rng.choice(live).memory_id
    return rng.choice(mids)

n = 0
with store.session(scope="stress", flow=name) as s:
    while time.time() < until:
        n += 1
        op = rng.choices(OPS, [3, 6, 2, 1, 1, 2])[0]
        token = f"z{rng.getrandbits(48):012x}"
        user = rng.choice(["ann", "bob", "cy"])
        try:
            if op == "learn":
                out("try", "learn", token, user)
                got = s.learn(finding(token, user))
                mids.append(got.memory_id)
                out("acked", "learn", got.key, got.memory_id, token)
            elif op == "update":
                mid = pick()
                out("try", "update", token, user, mid)
                got = s.update(mid, finding(token, user))
                out("acked", "update", got.key, got.memory_id, token)
            elif op == "forget":
                live = store.recall(scope="stress", limit=None)
                if live:
                    e = rng.choice(live)
                    got = s.forget(e.key, reason="stress forget")
                    out("acked", "forget", e.key, e.memory_id, "by" if got.by else "-")
            elif op == "forget_where":
                got = s.forget_where(reason="stress filter", scope="stress", meta={"user": user})
                out("acked", "forget_where", *got.keys)
            elif op == "erase":
                mid = pick()
                out("try", "erase", mid)
                s.erase(mid, reason="stress erase")
                out("acked", "erase", mid)
            else:
                store.recall(scope="stress", limit=None)
        except (memory.FlowsMemoryError, journal.JournalError) as exc:
            out("refused", op, exc.code, str(exc).replace(chr(10), " ")[:200])
store.close()
out("done")
"""


@dataclass
class Tally:
    """What the processes printed: what they tried and what they were answered."""

    tokens: dict[str, str] = field(default_factory=dict)  # token -> the memory id it was written to
    acked: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (memory id, how)
    forgotten: set[str] = field(default_factory=set)  # keys answered as forgotten
    erased: set[str] = field(default_factory=set)  # memory ids answered as erased
    refused: list[str] = field(default_factory=list)  # refusals not in REFUSALS
    kills: int = 0
    ops: int = 0

    def take(self, out: str) -> None:
        for line in out.splitlines():
            parts = line.split(" ")
            if parts[0] == "try" and parts[1] == "learn" and len(parts) == 4:
                self.tokens[parts[2]] = finding_id(SCOPE, validate(_finding(parts[2], parts[3]), "stress"))
            elif parts[0] == "try" and parts[1] == "update" and len(parts) == 5:
                self.tokens[parts[2]] = parts[4]
            elif parts[:2] in (["acked", "learn"], ["acked", "update"]) and len(parts) == 5:
                self.acked[parts[2]] = (parts[3], parts[1])
                self.ops += 1
            elif parts[:2] == ["acked", "forget"] and len(parts) == 5:
                if parts[4] == "-":
                    self.forgotten.add(parts[2])
                self.ops += 1
            elif parts[:2] == ["acked", "forget_where"]:
                self.forgotten.update(parts[2:])
                self.ops += 1
            elif parts[:2] == ["acked", "erase"] and len(parts) == 3:
                self.erased.add(parts[2])
                self.ops += 1
            elif parts[0] == "refused" and (len(parts) < 3 or parts[2] not in REFUSALS):
                self.refused.append(line)


def _finding(token: str, user: str) -> dict[str, object]:
    """What a worker learns for ``token`` (as ``finding`` in ``_WORKER``)."""
    return {"text": f"fact {token}", "source": "stress", "metadata": {"user": user}}


def _start(dsn: str, db: Path, name: str, salt: str, mids: list[str]) -> subprocess.Popen[str]:
    """A worker process, once it has opened its store (it then waits for the time to stop at)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("FLOWS_FAILPOINTS", None)
    argv = [sys.executable, "-c", _WORKER, dsn, str(db), name, salt, ",".join(mids)]
    proc = subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def _go(proc: subprocess.Popen[str], until: float) -> None:
    assert proc.stdin is not None
    proc.stdin.write(f"{until!r}\n")
    proc.stdin.close()
    proc.stdin = None  # so that ``communicate`` does not flush it


def _drive(dsn: str, dbs: dict[str, Path], mids: list[str], seconds: float, rng: random.Random) -> Tally:
    """Run ``PER_HOST`` processes per host for ``seconds``, killing one at random every second or
    two and starting another in its place; returns what they all printed."""
    tally = Tally()
    until = 0.0
    procs: dict[str, tuple[subprocess.Popen[str], Path]] = {}
    made = 0

    def spawn(host: str) -> None:
        nonlocal made
        made += 1
        name = f"{host}{made}"
        procs[name] = (_start(dsn, dbs[host], name, f"{rng.getrandbits(64)}", mids), dbs[host])
        if until:
            _go(procs[name][0], until)

    def reap(name: str, killed: bool) -> None:
        proc, _ = procs.pop(name)
        out, err = proc.communicate(timeout=300)
        tally.take(out)
        if not killed:
            assert proc.returncode == 0, f"{name} failed:\n{err[-3000:]}"
            assert out.rstrip().endswith("done"), f"{name} stopped early:\n{err[-3000:]}"

    for host in HOSTS:
        for _ in range(PER_HOST):
            spawn(host)
    until = time.time() + seconds
    for proc, _ in procs.values():
        _go(proc, until)
    while time.time() < until - 1.5:
        time.sleep(rng.uniform(0.8, 2.0))
        name = rng.choice(sorted(procs))
        proc, db = procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            tally.kills += 1
        reap(name, killed=True)
        spawn(next(h for h in HOSTS if dbs[h] == db))
    for name in sorted(procs):
        reap(name, killed=False)
    return tally


def _recover(dsn: str, db: Path) -> None:
    """What an operator does on a host after the crashes: catch up, sync, check and repair."""
    with memory.MemoryStore(db, journal=dsn) as store:
        store.catch_up()
        store.sync()
        problems = memory.check_store(store, sweep_age_s=0)
        memory.repair_store(store, problems, sweep_age_s=0)
        store.sync()


def _erased_in_journal(dsn: str) -> set[str]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("select payload from journal_records where stream = 'memory-erase'").fetchall()
    return {json.loads(p)["memory"] for (p,) in rows}


def _journal_text(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return "\n".join(p for (p,) in conn.execute("select payload from journal_records").fetchall())


def _files_bytes(folder: Path) -> list[tuple[Path, bytes]]:
    return [(p, p.read_bytes()) for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()]


def judge(dsn: str, dbs: dict[str, Path], tally: Tally) -> dict[str, int]:
    """Recover every host, then check what the module's docstring promises; returns counts."""
    assert tally.refused == [], "\n".join(tally.refused[:20])
    for db in dbs.values():
        _recover(dsn, db)
    erased = _erased_in_journal(dsn)
    assert tally.erased <= erased
    views: dict[str, dict[str, str]] = {}
    for host, db in dbs.items():
        with memory.MemoryStore(db, journal=dsn) as store:
            assert memory.check_store(store, sweep_age_s=0) == [], host
            by_memory: dict[str, list[str]] = defaultdict(list)
            for e in store.recall(scope=SCOPE, limit=None):
                by_memory[e.memory_id].append(e.key)
            assert {m: ks for m, ks in by_memory.items() if len(ks) > 1} == {}, host
            views[host] = {m: ks[0] for m, ks in by_memory.items()}
            live = set(views[host].values())
            assert live & tally.forgotten == set(), host
            assert set(views[host]) & erased == set(), host
            assert [k for k in tally.forgotten if store.get(k) is not None] == [], host
    first = views[HOSTS[0]]
    for host in HOSTS[1:]:
        assert views[host] == first, f"hosts {HOSTS[0]} and {host} disagree"
    live = set(first.values())
    with memory.MemoryStore(dbs[HOSTS[0]], journal=dsn) as store:
        for key, (mid, _) in sorted(tally.acked.items()):
            if mid in erased or key in live:
                continue
            kinds = {e.kind for e in store.history(key) if e.key == key}
            assert "lost" not in kinds and "learned" in kinds, (key, kinds)
            assert kinds & {"forgotten", "superseded"}, (key, kinds)
    gone = sorted(t for t, mid in tally.tokens.items() if mid in erased)
    text = _journal_text(dsn)
    assert [t for t in gone if t in text] == []
    for db in dbs.values():
        for path, data in _files_bytes(db.parent):
            assert [t for t in gone if t.encode() in data] == [], path
    return {
        "ops": tally.ops,
        "kills": tally.kills,
        "live": len(live),
        "erased": len(erased),
        "forgotten": len(tally.forgotten),
        "tokens_gone": len(gone),
    }


def run(dsn: str, folder: Path, seconds: float, rng: random.Random) -> dict[str, int]:
    dbs = {host: folder / host / "history.db" for host in HOSTS}
    with memory.MemoryStore(dbs["a"], journal=dsn) as a, a.session(scope=SCOPE, flow="setup") as s:
        mids = [s.learn(_finding(f"z{n:012x}", USERS[n % 3])).memory_id for n in range(8)]
    for host in HOSTS[1:]:
        with memory.MemoryStore(dbs[host], journal=dsn) as store:
            store.catch_up()
    tally = _drive(dsn, dbs, mids, seconds, rng)
    return judge(dsn, dbs, tally)


@pytest.mark.slow
def test_three_hosts_racing_and_killed_agree_after_recovery(tmp_path: Path, postgres_dsn: str) -> None:
    rng = random.Random()
    counts = run(postgres_dsn, tmp_path, 15.0, rng)
    print(counts)
    assert counts["ops"] > 0 and counts["kills"] > 0


def main() -> None:
    from tests.pg_fixtures import admin_connection, server_dsn, with_schema

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    for n in range(args.rounds):
        schema = f"flows_soak_{os.getpid()}_{n}"
        with admin_connection() as conn:
            conn.execute(f'create schema "{schema}"')
        try:
            with tempfile.TemporaryDirectory() as folder:
                print(run(with_schema(server_dsn(), schema), Path(folder), args.seconds, random.Random()))
        finally:
            with admin_connection() as conn:
                conn.execute(f'drop schema "{schema}" cascade')


if __name__ == "__main__":
    main()
