"""``python -m benchmarks.pool_ab [--blocks B] [--per-block K] [--pool P] [--background] [--dir DISK]``:
whether a pool of hidden stage files created ahead of need would make a learn faster, measured in one
process.

An experiment, not the engine: the stage a learn writes without fsync is taken from a pool of empty
hidden files (``.stage-…``, created in the scope folder, given their mode and held open), so a
learn's stage is a ``write`` and a ``close`` instead of an exclusive create, a ``fchmod``, a
``write`` and a ``close``. Without ``--background`` the learn's own thread creates ``P`` files at a
time when the pool runs dry; with it, a thread of its own keeps ``P`` files ready, woken each time
one is taken, so its creates run while the learn waits in its journal's fsync (the calls release
the GIL). Blocks of ``K`` learns alternate the engine's stage with the pooled one on one store and
one root run (the order stage, durable record, rename is the same), in the order AB BA AB …
Prints each kind's median rate and CPU per learn (``getrusage`` of the process: the filling
thread's creates included) and the median of the per-pair ratios.
"""

from __future__ import annotations

import os
import resource
import secrets
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from benchmarks._common import paired_parser, print_paired
from memory._db import db_mode
from memory._publisher import Publisher
from staging import OpenDir, Staged, write_all

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class _Pool:
    """Empty hidden files in one folder (held open as ``at``), made ahead of need."""

    def __init__(self, at: OpenDir, mode: int, size: int, background: bool) -> None:
        self.at, self.mode, self.size = at, mode, size
        self.tag = secrets.token_hex(6)
        self.made = 0
        self.ready: list[tuple[str, int]] = []
        self.mutex = threading.Lock()
        self.wanted = threading.Event()
        self.stopping = False
        self.misses = 0
        self.thread = threading.Thread(target=self._fill_ahead, daemon=True) if background else None
        if self.thread is not None:
            self.wanted.set()
            self.thread.start()

    def _make(self) -> None:
        self.made += 1
        name = f".stage-{self.tag}-{self.made:x}.pool"
        fd = os.open(name, _FLAGS, self.mode, dir_fd=self.at.fd)
        os.fchmod(fd, self.mode)
        with self.mutex:
            self.ready.append((name, fd))

    def _fill_ahead(self) -> None:
        while not self.stopping:
            self.wanted.wait()
            self.wanted.clear()
            while not self.stopping and len(self.ready) < self.size:
                self._make()

    def take(self) -> tuple[str, int] | None:
        if self.thread is None and not self.ready:
            for _ in range(self.size):
                self._make()
        with self.mutex:
            got = self.ready.pop(0) if self.ready else None
        if self.thread is not None:
            self.wanted.set()
        self.misses += got is None
        return got

    def close(self) -> None:
        self.stopping = True
        self.wanted.set()
        if self.thread is not None:
            self.thread.join()
        for name, fd in self.ready:
            os.close(fd)
            os.unlink(name, dir_fd=self.at.fd)


def main(argv: list[str] | None = None) -> int:
    """Run the paired blocks and print the figures."""
    ap = paired_parser("pool_ab", __doc__, blocks=24, per_block=200)
    ap.add_argument("--pool", type=int, default=64, help="files made at once (own thread) or kept ready")
    ap.add_argument("--background", action="store_true", help="a thread of its own keeps the pool full")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="flows-pool-ab-", dir=args.dir)
    engine_stage = Publisher.stage
    pooled = [False]
    pools: dict[Path, _Pool] = {}

    def stage(
        self: Publisher,
        directory: Path,
        data: bytes,
        run_id: str | None,
        *,
        sync: bool = True,
        mode: int | None = None,
    ) -> Any:
        if sync or not pooled[0] or not self.ready(directory):
            return engine_stage(self, directory, data, run_id, sync=sync, mode=mode)
        at = self.held_or_missing(directory)
        pool = pools.get(directory)
        if pool is None:
            pool = pools[directory] = _Pool(at, db_mode(self.db_path), args.pool, args.background)
        got = pool.take()
        if got is None:  # the filling thread is behind: the engine's own stage
            return engine_stage(self, directory, data, run_id, sync=sync, mode=mode)
        name, fd = got
        write_all(fd, data)
        os.close(fd)
        return Staged(where=os.path.join(directory, name), size=len(data), at=at)

    kinds = ["stage per learn", "pooled stage"]
    rates: dict[str, list[float]] = {kind: [] for kind in kinds}
    cpu: dict[str, list[float]] = {kind: [] for kind in kinds}
    Publisher.stage = stage  # type: ignore[method-assign]
    try:
        import memory
        from journal import RunState

        with memory.MemoryStore(os.path.join(base, "history.db")) as store:
            jr = store.open_journal()
            _, lease = jr.begin("pool-ab", "bench", {})
            root = memory.RootRun(jr, lease, "pool-ab", "bench")
            store.learn({"text": "warm-up"}, root)
            for block in range(args.blocks):
                kind = kinds[(block + block // 2) % 2]  # AB BA AB …: neither kind always goes first
                pooled[0] = kind == "pooled stage"
                store.flush()
                texts = [f"finding {i}" for i in range(block * args.per_block, (block + 1) * args.per_block)]
                r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
                for text in texts:
                    store.learn({"text": text, "tags": ["bench"]}, root)
                took, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
                rates[kind].append(args.per_block / took)
                used = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
                cpu[kind].append(used / args.per_block * 1e6)
            store.flush()
            jr.finish(lease, RunState.DONE)
    finally:
        Publisher.stage = engine_stage  # type: ignore[method-assign]
        misses = sum(pool.misses for pool in pools.values())
        for pool in pools.values():
            pool.close()
        shutil.rmtree(base, ignore_errors=True)
    print_paired(rates, "pooled / per learn")
    for kind in kinds:
        print(f"{kind}: CPU per learn, median of blocks {statistics.median(cpu[kind]):.0f} µs")
    if args.background:
        print(f"learns that found the pool empty: {misses}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
