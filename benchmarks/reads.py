"""Reads over 100,000 findings (90% synced into the history DB, 10% unsynced learned files).

* ``recall(tag=, limit=10)`` warm, and its first (cold) call that parses every unsynced file, against
  an indexed SQLite query over the same findings (a plain table plus a (tag, time) index);
* ``why(subject)`` against an SQLite FTS5 query over the same texts and tags (bm25, limit 10);
* the peers' filtered read of the same findings (newest 10 with a tag), in the peers' venv;
* the peak resident memory of a fresh process that opens the store and recalls (and asks why).
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import orjson

import journal
import memory
from benchmarks._common import (
    PEERS_HINT,
    REPO,
    TAGS,
    VENV_PYTHON,
    WORDS,
    Sheet,
    Sizes,
    WorkerError,
    median_ms,
    peer_worker,
    say,
)

SUBJECTS = ["why is the cache cold", "deploy rollback canary", "lease token drift", "gas nonce"]


def _synthetic(rng: random.Random, i: int) -> tuple[memory.Finding, int]:
    text = f"finding {i}: " + " ".join(rng.sample(WORDS, 6))
    tags = tuple(sorted(rng.sample(TAGS, 2)))
    return memory.Finding(text=text, source=f"source{i % 20}", tags=tags), 1_600_000_000_000 + i * 1_000


def build_dataset(db: Path, synced: int, unsynced: int, scope: str = "bench") -> None:
    """``synced`` rows in the history DB (bulk upserts) and ``unsynced`` learned files (rendered),
    every tenth finding in time unsynced, so files and rows interleave. Every finding is committed
    in the file journal beside the DB (runs of ``_RUN_SIZE``), as learn would have, so reads can
    check each file's citation; the stream files are written whole, not appended one by one, then
    opened once under their lock, which records the watermark learn's appends would have left."""
    rng = random.Random(7)
    entries: list[memory.Recalled] = []
    directory = memory.learned_dir(db, scope)
    directory.mkdir(parents=True)
    hdb = memory.HistoryDB(db)
    jr = journal.FileJournal(db.parent / "flows-journal")
    lines: list[bytes] = []
    run_id = ""
    every = max(1, (synced + unsynced) // max(1, unsynced))
    for i in range(synced + unsynced):
        if i % _RUN_SIZE == 0:
            _write_stream(jr, run_id, lines)
            run_id, lines = jr.begin("bench", scope, {})[0].run_id, []
        finding, ms = _synthetic(rng, i)
        fid = memory.finding_id(scope, finding)
        payload = {"id": fid, "scope": scope, "flow": "bench", "finding": finding.as_json(), "learnedMs": ms}
        rid = journal.record_id(run_id, memory.STREAM, fid)
        record = journal.Record(run_id, memory.STREAM, len(lines) + 1, rid, fid, ms, payload)
        lines.append(journal.RecordCodec(run_id, memory.STREAM).encode(record) + b"\n")
        data = memory.render(record)
        if i % every == every - 1 and unsynced:
            (directory / f"{fid}.json").write_bytes(data)
            unsynced -= 1
            continue
        entries.append(memory.parse_learned(directory / f"{fid}.json", data))
        if len(entries) == 5_000:
            hdb.upsert(entries, ms)
            entries = []
    _write_stream(jr, run_id, lines)
    jr.close()
    if entries:
        hdb.upsert(entries, 0)
    hdb.close()


_RUN_SIZE = 1_000  # findings per root run of the read dataset


def _write_stream(jr: journal.FileJournal, run_id: str, lines: list[bytes]) -> None:
    if run_id:
        path = jr.stream_path(run_id, memory.STREAM)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"".join(lines))
        # A locked open records the watermark (how far a sync reached), as learn's appends leave
        # it: a stream written whole without one would be a log no append ever acknowledged.
        log = journal.LineLog(path, journal.RecordCodec(run_id, memory.STREAM), sequence=lambda r: r.seq)
        with log.locked():
            log.recover()


def _baseline(every: list[memory.Recalled], path: Path) -> Any:
    """A plain SQLite copy of every finding with a (tag, time) index and an FTS5 index."""
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE f (id INTEGER PRIMARY KEY, key TEXT, text TEXT, source TEXT, tags TEXT,"
        " learned_ms INTEGER, run_id TEXT, record_id TEXT)"
    )
    conn.execute("CREATE TABLE t (tag TEXT, learned_ms INTEGER, f INTEGER, PRIMARY KEY (tag, learned_ms, f))")
    conn.execute("CREATE VIRTUAL TABLE fts USING fts5(text, tags, source, content='f', content_rowid='id')")
    conn.execute("BEGIN")
    for e in every:
        row = (e.key, e.text, e.source, " ".join(e.tags), e.learned_ms, e.citation.run_id, e.citation.id)
        rid = conn.execute(
            "INSERT INTO f (key, text, source, tags, learned_ms, run_id, record_id) VALUES (?,?,?,?,?,?,?)",
            row,
        ).lastrowid
        conn.executemany("INSERT INTO t VALUES (?,?,?)", [(tag, e.learned_ms, rid) for tag in e.tags])
        conn.execute(
            "INSERT INTO fts (rowid, text, tags, source) VALUES (?,?,?,?)", (rid, e.text, row[3], e.source)
        )
    conn.execute("COMMIT")
    return conn


_TAG_SQL = (
    "SELECT f.id, f.key, f.text, f.source, f.tags, f.learned_ms, f.run_id, f.record_id FROM t"
    " JOIN f ON f.id = t.f WHERE t.tag = ? ORDER BY t.learned_ms DESC LIMIT 10"
)
_FTS_SQL = (
    "SELECT f.id, f.key, f.text, f.source, f.tags, f.learned_ms, f.run_id, f.record_id FROM fts"
    " JOIN f ON f.id = fts.rowid WHERE fts MATCH ? ORDER BY bm25(fts) LIMIT 10"
)


def _fts_query(subject: str) -> str:
    return " OR ".join(memory._search.subject_words(subject))


_RSS = r"""
import resource, sys, time
import memory
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
store = memory.MemoryStore(sys.argv[1])
for i in range(200):
    store.recall(tag=f"tag{i % 50}", limit=10)
for s in ["why is the cache cold", "deploy rollback canary", "lease token drift", "gas nonce"] * 5:
    store.why(s)
store.close()
print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def bench_reads(base: Path, sizes: Sizes, sheet: Sheet, out: TextIO | None, peers: bool = True) -> None:
    """Build the dataset, time recall / why and their baselines, the peers' reads, and the RSS."""
    db = base / "reads" / "history.db"
    t0 = time.perf_counter()
    build_dataset(db, sizes.synced, sizes.unsynced)
    total = sizes.synced + sizes.unsynced
    say(
        out,
        f"reads: {total:,} findings ({sizes.synced:,} synced, {sizes.unsynced:,} files)"
        f" built in {time.perf_counter() - t0:.1f} s",
    )
    sheet.meta["read_findings"] = total

    # Memory first, in a fresh process, before anything else warms the page cache for it.
    proc = subprocess.run(
        [sys.executable, "-c", _RSS, str(db)], capture_output=True, text=True, cwd=REPO, check=True
    )
    before, peak = (int(x) for x in proc.stdout.split())
    sheet.put(
        "read.recall_rss_mb", peak / 1024, "peak RSS of a process that opens the store, recalls and asks why"
    )
    sheet.put("read.import_rss_mb", before / 1024, "RSS of the same process after `import memory` only")

    store = memory.MemoryStore(db)
    t0 = time.perf_counter()
    first = store.recall(tag=TAGS[7], limit=10)
    sheet.put(
        "read.recall_cold_ms",
        (time.perf_counter() - t0) * 1000,
        "first recall in this process (from the files' index the RSS process wrote)",
    )
    time.sleep(0.1)  # past the racy window of the directory listing
    every = store.recall(limit=None)
    conn = _baseline(every, base / "reads" / "baseline.db")
    del every

    tags = iter(TAGS * (sizes.read_calls // len(TAGS) + 2))
    sheet.put(
        "read.recall_ms",
        median_ms(lambda: store.recall(tag=next(tags), limit=10), sizes.read_calls),
        "recall(tag=, limit=10), warm",
    )
    tags = iter(TAGS * (sizes.read_calls // len(TAGS) + 2))
    sheet.put(
        "read.sqlite_tag_ms",
        median_ms(lambda: conn.execute(_TAG_SQL, (next(tags),)).fetchall(), sizes.read_calls),
        "indexed SQLite: newest 10 with a tag",
    )
    expected = [row[1] for row in conn.execute(_TAG_SQL, (TAGS[7],)).fetchall()]
    assert [e.key for e in first] == expected, "recall disagrees with SQLite"

    calls = max(5, sizes.read_calls // 5)
    subjects = iter(SUBJECTS * calls)
    sheet.put("read.why_ms", median_ms(lambda: store.why(next(subjects)), calls), "why(subject), limit 10")
    subjects = iter(SUBJECTS * calls)
    sheet.put(
        "read.sqlite_fts_ms",
        median_ms(lambda: conn.execute(_FTS_SQL, (_fts_query(next(subjects)),)).fetchall(), calls),
        "SQLite FTS5 over text, tags, source: bm25, limit 10",
    )
    store.close()
    conn.close()

    dataset = base / "reads" / "dataset.jsonl"
    with dataset.open("wb") as f:
        for e in sorted(memory.MemoryStore(db).recall(limit=None), key=lambda e: e.learned_ms):
            f.write(
                orjson.dumps(
                    {
                        "key": e.key,
                        "text": e.text,
                        "source": e.source,
                        "tags": list(e.tags),
                        "learnedMs": e.learned_ms,
                    }
                )
                + b"\n"
            )
    _peer_reads(base=base, dataset=dataset, expected=expected, sizes=sizes, sheet=sheet, out=out, peers=peers)


def _peer_reads(
    *,
    base: Path,
    dataset: Path,
    expected: list[str],
    sizes: Sizes,
    sheet: Sheet,
    out: TextIO | None,
    peers: bool,
) -> None:
    names = {"eventsourcing-read": "read.eventsourcing_tag_ms", "langgraph-read": "read.langgraph_tag_ms"}
    notes = {
        "eventsourcing-read": "eventsourcing: notification log paged back from its end, decoded, filtered",
        "langgraph-read": "LangGraph SqliteStore.search(filter=tag), newest by updated_at",
    }
    sheet.skip(
        "read.dbos_tag_ms", "DBOS keeps workflow checkpoints, with no query over step outputs by content"
    )
    for kind, name in names.items():
        if not peers:
            sheet.skip(name, "peers not asked for (--no-peers)")
            continue
        if not VENV_PYTHON.exists():
            sheet.skip(name, PEERS_HINT)
            continue
        t0 = time.perf_counter()
        worker = peer_worker(
            kind, {"path": str(base / "reads" / f"{kind}.db"), "dataset": str(dataset), "tags": TAGS}
        )
        try:
            worker.wait_ready()
            reply = (
                worker.receive()
                if worker.send({"op": "run", "n": sizes.read_calls, "start": 0}) is None
                else {}
            )
        except WorkerError as exc:
            sheet.skip(name, str(exc))
            continue
        finally:
            worker.close()
        sheet.put(name, reply["median_ms"], notes[kind])
        if reply["first"] != expected:
            sheet.notes[name] += " (its answer differed from SQLite's)"
        say(out, f"  {kind}: loaded and read in {time.perf_counter() - t0:.1f} s")
