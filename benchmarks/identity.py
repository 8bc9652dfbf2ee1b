"""Deleting by filter and erasing.

* How long one ``forget_where`` takes to retire every finding of a scope, and the rate, on a store of
  ``sizes.synced // 9`` findings in the history DB plus a tenth unsynced (10,000 in the quick and full
  runs): one journal record, then one retired file per key.
* How long one ``erase`` of one memory takes in a store whose journal holds ``sizes.erase_records``
  commits (1,000,000 in the full run, 100,000 in the quick one), nine tenths of them synced into the
  history DB, each a memory at another sixth of the DB's rows (old and new alike): the first erase
  of the store (which builds the journal's key index, one read of every run) and then the median
  of three more (the index brought up to date by a ``stat`` per stream).
  ``identity.erase_db_s`` is the history DB's share of one erase (its rows deleted with their bytes
  overwritten, the full-text index purged, the log truncated), timed on its own on the same store.

``python -m benchmarks --only identity``.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import TextIO

import memory
from benchmarks._common import Sheet, Sizes, say

NAMES = (
    "identity.forget_where_findings",
    "identity.forget_where_s",
    "identity.forget_where_per_s",
    "identity.erase_records",
    "identity.erase_first_s",
    "identity.erase_s",
    "identity.erase_db_s",
)


def bench_identity(base: Path, sizes: Sizes, sheet: Sheet, out: TextIO | None) -> None:
    """Retire a whole scope with one forget by filter; put ``identity.*`` figures on ``sheet``."""
    from benchmarks.reads import build_dataset

    total = max(100, (sizes.synced + sizes.unsynced) // 10)
    db = base / "identity" / "history.db"
    build_dataset(db, total - total // 10, total // 10)
    with memory.MemoryStore(db) as store, store.session(scope="bench", flow="bench") as session:
        t0 = time.perf_counter()
        done = session.forget_where(reason="the benchmark forgets everything of its scope")
        took = time.perf_counter() - t0
        assert len(done.keys) == total and store.recall(scope="bench", limit=1) == []
    say(out, f"identity: forgot {total} findings by filter in {took:.2f} s")
    sheet.put("identity.forget_where_findings", float(total), "findings one forget by filter retired")
    sheet.put("identity.forget_where_s", took, "one forget by filter of them all (s)")
    sheet.put("identity.forget_where_per_s", total / took, "findings retired per second by it")


def bench_erase(base: Path, sizes: Sizes, sheet: Sheet, out: TextIO | None) -> None:
    """Erase one memory at a time in a store of ``sizes.erase_records`` commits; put the
    ``identity.erase_*`` figures on ``sheet``."""
    import statistics

    from benchmarks.reads import build_dataset

    total = sizes.erase_records
    db = base / "erase" / "history.db"
    t0 = time.perf_counter()
    build_dataset(db, total - total // 10, total // 10)
    say(out, f"identity: built a store of {total} commits for the erase in {time.perf_counter() - t0:.0f} s")
    with sqlite3.connect(db) as conn:  # synced memories spread over the store, not only the newest
        rows = conn.execute("SELECT max(id) FROM findings").fetchone()[0]
        at = "SELECT key FROM findings WHERE id >= ? ORDER BY id LIMIT 1"
        chosen = [conn.execute(at, (rows * k // 6,)).fetchone()[0] for k in range(1, 6)]
    with memory.MemoryStore(db) as store, store.session(scope="bench", flow="eraser") as session:
        took = []
        for key in chosen[:4]:
            t0 = time.perf_counter()
            done = session.erase(key, reason="the benchmark erases one memory")
            took.append(time.perf_counter() - t0)
            assert done.rewritten == 1 and store.get(key) is None
        t0 = time.perf_counter()
        store.db.erase([chosen[4]])
        db_s = time.perf_counter() - t0
    warm = statistics.median(took[1:])
    say(out, f"identity: erase in {total} commits: first {took[0]:.2f} s, then {warm:.2f} s")
    sheet.put("identity.erase_records", float(total), "journal commits of the store erased in")
    sheet.put("identity.erase_first_s", took[0], "the store's first erase (builds the journal's key index)")
    sheet.put("identity.erase_s", warm, "one erase of one memory (s, median of 3)")
    sheet.put("identity.erase_db_s", db_s, "the history DB's share of one erase (s)")
