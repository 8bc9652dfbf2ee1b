"""Deleting by filter: how long one ``forget_where`` takes to retire every finding of a scope, and
the rate, on a store of ``sizes.synced // 9`` findings in the history DB plus a tenth unsynced (10,000 in
the quick and full runs): one journal record, then one retired file per key.
``python -m benchmarks --only identity``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TextIO

import memory
from benchmarks._common import Sheet, Sizes, say

NAMES = ("identity.forget_where_findings", "identity.forget_where_s", "identity.forget_where_per_s")


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
