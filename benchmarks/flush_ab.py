"""``python -m benchmarks.flush_ab [--blocks B] [--per-block K] [--dir DISK]``: what a learn's one
device flush costs as a ``syncfs`` of the file system against an fsync of the journal stream's log,
measured in one process.

A learn stages its file without fsync and appends its record; the record holds the file's bytes, so
the append's own sync need only make the record durable (an fsync of the log: what ``learn`` does).
The alternative makes the unsynced stage durable with the record (``sync_filesystem=True``: a
``syncfs``, the design before). Blocks of ``K`` learns alternate the two on one store and one root
run, so both see the same disk at the same minutes (a shared machine's disk speed drifts by several
times between two runs of the whole benchmark; paired blocks cancel that drift). Prints each kind's
median rate and the median of the per-pair ratios.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

import memory
from benchmarks._common import paired_parser, print_paired
from journal import JournalBackend, RunState


class _SyncingFilesystem:
    """A journal whose appends sync the whole file system (every other call passes through)."""

    def __init__(self, backend: JournalBackend) -> None:
        self._backend = backend

    def append(self, *args: Any, **kwargs: Any) -> Any:
        return self._backend.append(*args, **kwargs, sync_filesystem=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


def main(argv: list[str] | None = None) -> int:
    """Run the paired blocks and print the figures."""
    ap = paired_parser("flush_ab", __doc__, blocks=20, per_block=150)
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="flows-flush-ab-", dir=args.dir)
    rates: dict[str, list[float]] = {"syncfs per learn": [], "log fsync per learn": []}
    try:
        with memory.MemoryStore(os.path.join(base, "history.db")) as store:
            jr = store.open_journal()
            _, lease = jr.begin("flush-ab", "bench", {})
            roots = {
                "syncfs per learn": memory.RootRun(_SyncingFilesystem(jr), lease, "flush-ab", "bench"),  # type: ignore[arg-type]
                "log fsync per learn": memory.RootRun(jr, lease, "flush-ab", "bench"),
            }
            store.learn({"text": "warm-up"}, roots["log fsync per learn"])
            n = 0
            for block in range(args.blocks):
                kind = list(roots)[block % 2]
                texts = [f"finding {i}" for i in range(n, n + args.per_block)]
                n += args.per_block
                t0 = time.perf_counter()
                for text in texts:
                    store.learn({"text": text}, roots[kind])
                rates[kind].append(args.per_block / (time.perf_counter() - t0))
            store.flush()
            jr.finish(lease, RunState.DONE)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print_paired(rates, "fsync / syncfs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
