"""The cost curve: learn and recall with 1,000, 10,000, ... findings already in the store.

Each store's history DB is filled by writing its rows directly (one transaction of plain inserts,
its full-text triggers included), which is how a store of a million findings can be built in a
benchmark run; the findings are synthetic, each row keyed by its content hash as a read checks.
Then, in rounds that visit every size in turn, a session learns ``per_round``
findings into each store (the file journal, one writer), and ``recall(tag=, limit=10)`` is timed
warm. ``scale.learn_large_vs_small`` is the per-round ratio of the largest store's learn rate to the
1,000-finding store's; the largest size is ``--scale-findings``.
"""

from __future__ import annotations

import random
import sqlite3
import statistics
import time
from pathlib import Path
from typing import TextIO

import memory
from benchmarks._common import TAGS, WORDS, Sheet, median_ms, say

SMALL = 1_000


def fill(db: Path, n: int, scope: str = "bench") -> float:
    """Write ``n`` synthetic finding rows into a new history DB at ``db``; return the seconds it took."""
    t0 = time.perf_counter()
    hdb = memory.HistoryDB(db)
    hdb.upsert([], 0)  # created and migrated by the engine itself
    hdb.close()
    conn = sqlite3.connect(db, isolation_level=None)  # then rows written directly, in bulk
    rng = random.Random(11)
    conn.execute("BEGIN")
    batch: list[tuple[object, ...]] = []
    tag_rows: list[tuple[str, int, int]] = []
    for i in range(1, n + 1):
        tags = sorted(rng.sample(TAGS, 2))
        ms = 1_600_000_000_000 + i * 1_000
        text = f"finding {i}: " + " ".join(rng.sample(WORDS, 6))
        tags_json = f'["{tags[0]}","{tags[1]}"]'
        key = memory.finding_id(scope, memory.Finding(text, f"source{i % 20}", tuple(tags), None, None))
        row = (i, key, scope, "bench", text, f"source{i % 20}", tags_json, ms)
        batch.append((*row, "20260101T000000-bench00000", memory.STREAM, f"r{i}", ms))
        tag_rows += [(t, ms, i) for t in tags]
        if len(batch) == 20_000 or i == n:
            conn.executemany(
                "INSERT INTO findings (id, key, scope, flow, text, source, tags, learned_ms, run_id, stream,"
                " record_id, synced_ms) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                batch,
            )
            conn.executemany("INSERT INTO finding_tags (tag, learned_ms, finding) VALUES (?,?,?)", tag_rows)
            batch, tag_rows = [], []
    conn.execute("COMMIT")
    conn.close()
    return time.perf_counter() - t0


def _recall_ms(store: memory.MemoryStore) -> float:
    tags = iter(TAGS * 10)
    return median_ms(lambda: store.recall(tag=next(tags), limit=10), 100)


def bench_scale(
    base: Path, *, largest: int, rounds: int, per_round: int, sheet: Sheet, out: TextIO | None
) -> None:
    """Fill a store per size, then learn and recall in each, size by size in every round."""
    sizes = sorted({SMALL, *(s for s in (10_000, 100_000, 1_000_000) if s < largest), largest})
    stores: dict[int, memory.MemoryStore] = {}
    for n in sizes:
        db = base / "scale" / f"n{n}" / "history.db"
        db.parent.mkdir(parents=True)
        seconds = fill(db, n)
        say(out, f"scale: {n:,} findings written in {seconds:.1f} s")
        stores[n] = memory.MemoryStore(db)
    rates: dict[int, list[float]] = {n: [] for n in sizes}
    sessions = {n: stores[n].session(scope="bench", flow="scale") for n in sizes}
    try:
        for n in sizes:
            sessions[n].learn({"text": "warm", "tags": ["warm"]})  # the root run begins here
        for r in range(rounds):
            order = sizes[r % len(sizes) :] + sizes[: r % len(sizes)]  # no size always goes first
            for n in order if r % 2 == 0 else reversed(order):
                t0 = time.perf_counter()
                for i in range(per_round):
                    sessions[n].learn({"text": f"scale finding {r}-{i}", "tags": ["scale"]})
                rates[n].append(per_round / (time.perf_counter() - t0))
        for n in sizes:
            sheet.put(
                f"scale.recall_{n}_ms", _recall_ms(stores[n]), f"recall(tag=, limit=10), warm, {n:,} findings"
            )
            sheet.put(
                f"scale.learn_{n}_per_s", statistics.median(rates[n]), f"learn, {n:,} findings in the DB"
            )
            sheet.rounds[f"scale.learn_{n}_per_s"] = [round(x, 1) for x in rates[n]]
    finally:
        for n in sizes:
            sessions[n].close()
            stores[n].close()
    sheet.meta["scale_sizes"] = sizes
    paired = [big / small for big, small in zip(rates[largest], rates[SMALL], strict=True)]
    sheet.ratios["ratio.learn_large_vs_small"] = statistics.median(paired)
    sheet.meta["scale_largest"] = largest
