"""Findings-memory benchmark: learn against the journal-first floor and SQLite; recall and why at scale.

Run ``python -m benchmarks.learn_bench`` (about two minutes) or ``--quick`` (under 30 s, smaller
numbers, for a smoke run). Everything happens under a temporary directory on the file system of
``--dir`` (default: the system temp dir), which should be the disk flows really use.

Learn, one writer, full durability; three loops run side by side, rounds interleaved so drift in the
machine's state hits them alike:

* ``floor``: the journal-first sequence done raw, no library code: stage (exclusive create, write,
  fsync), append one line to a journal file under an exclusive portalocker lock and fsync it,
  ``os.replace`` and fsync the directory.
* ``learn``: ``MemoryStore.learn`` of distinct findings on one root run (file journal).
* ``sqlite``: a plain ``sqlite3`` loop, one insert per transaction, WAL, ``synchronous=FULL``.

Reads over 100,000 findings (90,000 synced into the history DB, 10,000 unsynced learned files):
``recall(tag=, limit=10)`` warm, against an indexed SQLite query over the same 100,000 rows, and
``why(subject)``. Medians of many calls are printed with the targets.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import portalocker

import journal
import memory

_WORDS = [
    "cache",
    "cold",
    "warm",
    "deploy",
    "latency",
    "queue",
    "retry",
    "timeout",
    "shard",
    "replica",
    "index",
    "vacuum",
    "lock",
    "lease",
    "token",
    "batch",
    "stream",
    "backlog",
    "spike",
    "drift",
    "budget",
    "quota",
    "alert",
    "pager",
    "rollback",
    "canary",
    "region",
    "zone",
    "disk",
    "memory",
    "socket",
    "thread",
    "worker",
    "cron",
    "tick",
    "swap",
    "router",
    "gas",
    "nonce",
    "block",
    "chain",
    "receipt",
]
_TAGS = [f"tag{i}" for i in range(50)]


# -- learn: floor, engine, sqlite ---------------------------------------------------------------


def _floor_round(directory: Path, journal_fd: int, n: int, start: int) -> float:
    """The raw journal-first sequence, ``n`` times; returns operations per second."""
    t0 = time.perf_counter()
    for i in range(start, start + n):
        data = orjson.dumps({"id": i, "text": f"raw finding {i}", "tags": ["bench"]}) + b"\n"
        stage_path = directory / f".stage-{i}.json"
        fd = os.open(stage_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.write(fd, data)
        os.fsync(fd)
        os.close(fd)
        portalocker.lock(journal_fd, portalocker.LockFlags.EXCLUSIVE)
        try:
            os.write(journal_fd, data)
            os.fsync(journal_fd)
        finally:
            portalocker.unlock(journal_fd)
        os.replace(stage_path, directory / f"{i}.json")
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(dfd)
        os.close(dfd)
    return n / (time.perf_counter() - t0)


def _learn_round(store: memory.MemoryStore, root: memory.RootRun, n: int, start: int) -> float:
    t0 = time.perf_counter()
    for i in range(start, start + n):
        store.learn({"text": f"engine finding {i}", "tags": ["bench"]}, root)
    return n / (time.perf_counter() - t0)


def _sqlite_round(conn: sqlite3.Connection, n: int, start: int) -> float:
    t0 = time.perf_counter()
    for i in range(start, start + n):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO f (k, body) VALUES (?, ?)", (i, f"sqlite finding {i}"))
        conn.execute("COMMIT")
    return n / (time.perf_counter() - t0)


def bench_learn(base: Path, rounds: int, per_round: int) -> dict[str, float]:
    """Interleave ``rounds`` of the three loops; print and return the median rates."""
    floor_dir = base / "floor" / "compacted"
    floor_dir.mkdir(parents=True)
    journal_fd = os.open(base / "floor" / "journal.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    store = memory.MemoryStore(base / "engine" / "history.db")
    jr = store.open_journal()
    _, lease = jr.begin("bench", "bench", {})
    root = memory.RootRun(jr, lease, "bench", "bench")

    conn = sqlite3.connect(base / "sqlite.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE f (id INTEGER PRIMARY KEY, k INTEGER UNIQUE, body TEXT)")

    loops: dict[str, Callable[[int], float]] = {
        "floor": lambda s: _floor_round(floor_dir, journal_fd, per_round, s),
        "learn": lambda s: _learn_round(store, root, per_round, s),
        "sqlite": lambda s: _sqlite_round(conn, per_round, s),
    }
    for run in loops.values():  # warm-up: create files, load modules, fill caches
        run(10**9)
    rates: dict[str, list[float]] = {name: [] for name in loops}
    for r in range(rounds):
        order = list(loops)
        if r % 2:
            order.reverse()
        for name in order:
            rates[name].append(loops[name](r * per_round))
    os.close(journal_fd)
    conn.close()
    store.close()

    med = {name: statistics.median(v) for name, v in rates.items()}
    print(f"learn, one writer, full durability ({rounds} interleaved rounds of {per_round}):")
    for name in loops:
        print(
            f"  {name:<7} median {med[name]:8.0f}/s   (rounds: {', '.join(f'{x:.0f}' for x in rates[name])})"
        )
    ratio = med["learn"] / med["floor"]
    print(f"  learn / floor  = {ratio:.3f}   (target >= 0.85: {'met' if ratio >= 0.85 else 'MISSED'})")
    print(f"  learn / sqlite = {med['learn'] / med['sqlite']:.3f}   (for the record)")
    return med


# -- reads at scale ---------------------------------------------------------------------------


def _synthetic(rng: random.Random, i: int, scope: str) -> tuple[memory.Finding, int]:
    words = rng.sample(_WORDS, 6)
    text = f"finding {i}: " + " ".join(words)
    tags = tuple(sorted(rng.sample(_TAGS, 2)))
    return memory.Finding(text=text, source=f"source{i % 20}", tags=tags), 1_600_000_000_000 + i * 1_000


def build_dataset(db: Path, synced: int, unsynced: int, scope: str = "bench") -> None:
    """``synced`` rows in the history DB (bulk upserts) and ``unsynced`` learned files (rendered)."""
    rng = random.Random(7)
    run_id = "20260101T000000-bench00000"
    entries: list[memory.Recalled] = []
    directory = memory.learned_dir(db, scope)
    directory.mkdir(parents=True)
    hdb = memory.HistoryDB(db)
    for i in range(synced + unsynced):
        finding, ms = _synthetic(rng, i, scope)
        fid = memory.finding_id(scope, finding)
        payload = {"id": fid, "scope": scope, "flow": "bench", "finding": finding.as_json(), "learnedMs": ms}
        record = journal.Record(
            run_id, memory.STREAM, i + 1, journal.record_id(run_id, memory.STREAM, fid), fid, ms, payload
        )
        data = memory.render(record)
        if i % 10 == 9 and unsynced:  # every tenth finding stays unsynced, spread over time
            (directory / f"{fid}.json").write_bytes(data)
            unsynced -= 1
            continue
        entries.append(memory.parse_learned(directory / f"{fid}.json", data))
        if len(entries) == 5_000:
            hdb.upsert(entries, ms)
            entries = []
    if entries:
        hdb.upsert(entries, 0)
    hdb.close()


def _baseline_db(db: Path, path: Path) -> sqlite3.Connection:
    """A plain SQLite copy of every finding (DB rows and files) with a (tag, time) index."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE f (id INTEGER PRIMARY KEY, key TEXT, text TEXT, source TEXT, tags TEXT,"
        " learned_ms INTEGER, run_id TEXT, record_id TEXT)"
    )
    conn.execute("CREATE TABLE t (tag TEXT, learned_ms INTEGER, f INTEGER, PRIMARY KEY (tag, learned_ms, f))")
    with memory.MemoryStore(db) as store:
        every = store.recall(limit=None)
    conn.execute("BEGIN")
    for e in every:
        rid = conn.execute(
            "INSERT INTO f (key, text, source, tags, learned_ms, run_id, record_id) VALUES (?,?,?,?,?,?,?)",
            (
                e.key,
                e.text,
                e.source,
                orjson.dumps(list(e.tags)).decode(),
                e.learned_ms,
                e.citation.run_id,
                e.citation.id,
            ),
        ).lastrowid
        conn.executemany("INSERT INTO t VALUES (?,?,?)", [(tag, e.learned_ms, rid) for tag in e.tags])
    conn.execute("COMMIT")
    return conn


def _median_ms(fn: Callable[[], object], calls: int) -> float:
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def bench_reads(base: Path, synced: int, unsynced: int, calls: int) -> dict[str, float]:
    """Build the dataset, then time recall, the SQLite baseline, and why; print and return medians."""
    db = base / "reads" / "history.db"
    t0 = time.perf_counter()
    build_dataset(db, synced, unsynced)
    built = time.perf_counter() - t0
    base_conn = _baseline_db(db, base / "baseline.db")
    total = synced + unsynced
    print(
        f"\nreads over {total:,} findings ({synced:,} synced, {unsynced:,} unsynced files;"
        f" built in {built:.1f}s):"
    )

    store = memory.MemoryStore(db)
    t0 = time.perf_counter()
    first = store.recall(tag="tag7", limit=10)
    cold = (time.perf_counter() - t0) * 1000
    time.sleep(0.1)  # past the racy window of the directory listing
    store.recall(tag="tag7", limit=10)
    tags = iter(_TAGS * (calls // len(_TAGS) + 1))
    recall_ms = _median_ms(lambda: store.recall(tag=next(tags), limit=10), calls)
    sql = (
        "SELECT f.id, f.key, f.text, f.source, f.tags, f.learned_ms, f.run_id, f.record_id FROM t"
        " JOIN f ON f.id = t.f WHERE t.tag = ? ORDER BY t.learned_ms DESC LIMIT 10"
    )
    tags = iter(_TAGS * (calls // len(_TAGS) + 1))
    sqlite_ms = _median_ms(lambda: base_conn.execute(sql, (next(tags),)).fetchall(), calls)
    baseline_first = base_conn.execute(sql, ("tag7",)).fetchall()
    assert [e.key for e in first] == [row[1] for row in baseline_first], "recall disagrees with SQLite"
    subjects = iter(
        ["why is the cache cold", "deploy rollback canary", "lease token drift", "gas nonce"] * calls
    )
    why_ms = _median_ms(lambda: store.why(next(subjects)), max(10, calls // 5))
    store.close()
    base_conn.close()

    print(f"  recall(tag=, limit=10) first call (parses every file): {cold:8.2f} ms")
    print(
        f"  recall(tag=, limit=10) warm median:  {recall_ms:8.3f} ms   (target < 5 ms: "
        f"{'met' if recall_ms < 5 else 'MISSED'})"
    )
    print(
        f"  indexed SQLite query, same rows:     {sqlite_ms:8.3f} ms   recall / sqlite = "
        f"{recall_ms / sqlite_ms:.2f} (target <= 3: {'met' if recall_ms <= 3 * sqlite_ms else 'MISSED'})"
    )
    print(
        f"  why(subject) median:                 {why_ms:8.3f} ms   (target < 20 ms: "
        f"{'met' if why_ms < 20 else 'MISSED'})"
    )
    return {"recall_ms": recall_ms, "sqlite_ms": sqlite_ms, "why_ms": why_ms, "cold_ms": cold}


def main(argv: list[str] | None = None) -> None:
    """Parse arguments and run both benchmarks."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.learn_bench", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--quick", action="store_true", help="small numbers, under 30 s")
    parser.add_argument("--dir", default=None, help="where to make the temporary directory")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="flows-bench-", dir=args.dir))
    try:
        if args.quick:
            bench_learn(base, rounds=3, per_round=200)
            bench_reads(base, synced=9_000, unsynced=1_000, calls=100)
        else:
            bench_learn(base, rounds=7, per_round=1_000)
            bench_reads(base, synced=90_000, unsynced=10_000, calls=500)
    finally:
        if args.keep:
            print(f"\nkept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
