"""``python -m benchmarks.names_ab [--threads N] [--blocks B] [--per-block K] [--dir DISK]``: what
leaving a learn's rename unsynced is worth, measured in one process.

Blocks of ``K`` learns alternate between the old cost (the folder fsync'd after every learn's
rename, as a learn did before names were made durable in groups: ``NAMES_WAIT_S`` set to 0) and the
present one (the name made durable later), on one store and one root run, so both see the same disk
at the same minutes. A shared machine's disk speed drifts by several times between two runs of the
whole benchmark; paired blocks cancel that drift. Prints each kind's median rate and the median of
the per-pair ratios.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import memory
import memory._publisher as publisher
from benchmarks._common import paired_parser, print_paired
from journal import RunState


def main(argv: list[str] | None = None) -> int:
    """Run the paired blocks and print the figures."""
    ap = paired_parser("names_ab", __doc__, blocks=24, per_block=150)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="flows-names-ab-", dir=args.dir)
    wait = publisher.NAMES_WAIT_S
    rates: dict[str, list[float]] = {"fsync after each rename": [], "names in groups": []}
    try:
        with memory.MemoryStore(os.path.join(base, "history.db")) as store:
            jr = store.open_journal()
            _, lease = jr.begin("names-ab", "bench", {})
            root = memory.RootRun(jr, lease, "names-ab", "bench")
            store.learn({"text": "warm-up"}, root)
            pool = ThreadPoolExecutor(args.threads) if args.threads > 1 else None
            n = 0
            for block in range(args.blocks):
                kind = "fsync after each rename" if block % 2 == 0 else "names in groups"
                publisher.NAMES_WAIT_S = 0.0 if block % 2 == 0 else wait
                texts = [f"finding {i}" for i in range(n, n + args.per_block)]
                n += args.per_block
                t0 = time.perf_counter()
                if pool is None:
                    for text in texts:
                        store.learn({"text": text}, root)
                else:
                    list(pool.map(lambda text: store.learn({"text": text}, root), texts))
                rates[kind].append(args.per_block / (time.perf_counter() - t0))
            if pool is not None:
                pool.shutdown()
            store.flush()
            jr.finish(lease, RunState.DONE)
    finally:
        publisher.NAMES_WAIT_S = wait
        shutil.rmtree(base, ignore_errors=True)
    print_paired(rates, "groups / each")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
