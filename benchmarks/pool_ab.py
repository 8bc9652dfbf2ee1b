"""``python -m benchmarks.pool_ab [--blocks B] [--per-block K] [--pool P] [--dir DISK]``: whether a
pool of hidden stage files created ahead of need would make a learn faster, measured in one process.

An experiment, not the engine: the stage a learn writes without fsync is taken from a pool of ``P``
empty hidden files (``.stage-…``, created, given their mode and held open ``P`` at a time when the
pool runs dry), so a learn's stage is a ``write`` and a ``close`` instead of an exclusive create,
a ``fchmod``, a ``write`` and a ``close``. Blocks of ``K`` learns alternate the engine's stage with the
pooled one on one store and one root run (the order stage, durable record, rename is the same).
Prints each kind's median rate and the median of the per-pair ratios.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import learn_blocks, paired_parser, print_paired
from memory._db import db_mode
from memory._publisher import Publisher
from staging import Staged, write_all


def main(argv: list[str] | None = None) -> int:
    """Run the paired blocks and print the figures."""
    ap = paired_parser("pool_ab", __doc__, blocks=24, per_block=200)
    ap.add_argument("--pool", type=int, default=64, help="files created at once when the pool is empty")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="flows-pool-ab-", dir=args.dir)
    engine_stage = Publisher.stage
    pooled = [False]
    pools: dict[Path, list[tuple[str, int]]] = {}

    def stage(self: Publisher, directory: Path, data: bytes, run_id: str | None, *, sync: bool = True) -> Any:
        if sync or not pooled[0] or not self.ready(directory):
            return engine_stage(self, directory, data, run_id, sync=sync)
        pool = pools.setdefault(directory, [])
        if not pool:
            mode, tag = db_mode(self.db_path), secrets.token_hex(6)
            for j in range(args.pool):
                path = f"{directory}/.stage-{tag}-{j}.pool"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
                os.fchmod(fd, mode)
                pool.append((path, fd))
            pool.reverse()
        path, fd = pool.pop()
        write_all(fd, data)
        os.close(fd)
        return Staged(where=path, size=len(data))

    kinds = ["stage per learn", "pooled stage"]

    def switch(kind: str) -> None:
        pooled[0] = kind == "pooled stage"

    Publisher.stage = stage  # type: ignore[method-assign]
    try:
        rates = learn_blocks(base, "pool-ab", kinds, args.blocks, args.per_block, switch=switch)
    finally:
        Publisher.stage = engine_stage  # type: ignore[method-assign]
        for pool in pools.values():
            for _, fd in pool:
                os.close(fd)
        shutil.rmtree(base, ignore_errors=True)
    print_paired(rates, "pooled / per learn")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
