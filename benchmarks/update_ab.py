"""``python -m benchmarks.update_ab [--blocks B] [--per-block K] [--dir DISK]``: what an update costs
against a learn, in CPU per operation and in rate, measured in one process.

Blocks of ``K`` learns of distinct findings and ``K`` updates (round-robin over ``K // 4`` memories
learned first, untimed) alternate on one store and one root run, so both see the same disk and the
same load (a shared machine's disk speed drifts by several times between two runs of the whole
benchmark; paired blocks cancel that drift). An update block ends when the background unlinks of the
old versions' files it set aside are done. CPU is ``resource.getrusage`` of the process (user +
system, the unlinking thread's included) over the block; its system part is printed too. Prints each
kind's median rate, the median of the per-pair rate ratios (update / learn) and of the per-pair CPU
ratios (learn CPU / update CPU): the figure to compare between two trees, each run on its own, on
tmpfs (``--dir /dev/shm``) where the device adds no noise.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import tempfile
import time

import memory
from benchmarks._common import paired_parser, print_paired
from journal import RunState


def _cpu_us() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1e6


def _sys_us() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_stime * 1e6


def main(argv: list[str] | None = None) -> int:
    """Run the paired blocks and print the figures."""
    from memory._reaper import REAPER

    ap = paired_parser("update_ab", __doc__, blocks=20, per_block=300)
    args = ap.parse_args(argv)
    k = args.per_block
    base = tempfile.mkdtemp(prefix="flows-update-ab-", dir=args.dir)
    rates: dict[str, list[float]] = {"learn": [], "update": []}
    cpu: dict[str, list[float]] = {"learn": [], "update": []}
    system: dict[str, list[float]] = {"learn": [], "update": []}
    try:
        with memory.MemoryStore(os.path.join(base, "history.db")) as store:
            jr = store.open_journal()
            _, lease = jr.begin("update-ab", "bench", {})
            root = memory.RootRun(jr, lease, "update-ab", "bench")
            ids = [
                store.learn({"text": f"memory {i} as first learned", "tags": ["bench"]}, root).memory_id
                for i in range(max(10, k // 4))
            ]
            n = 0
            for block in range(args.blocks):
                kind = ("learn", "update")[block % 2]
                c0, s0, t0 = _cpu_us(), _sys_us(), time.perf_counter()
                for i in range(n, n + k):
                    if kind == "learn":
                        store.learn({"text": f"engine finding {i}", "tags": ["bench"]}, root)
                    else:
                        m = i % len(ids)
                        store.update(ids[m], {"text": f"memory {m} version {i}", "tags": ["bench"]}, root)
                if kind == "update":
                    REAPER.drain()
                rates[kind].append(k / (time.perf_counter() - t0))
                cpu[kind].append((_cpu_us() - c0) / k)
                system[kind].append((_sys_us() - s0) / k)
                n += k
            store.flush()
            jr.finish(lease, RunState.DONE)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print_paired(rates, "update / learn")
    for kind, values in cpu.items():
        total, sys_part = statistics.median(values), statistics.median(system[kind])
        print(
            f"{kind} CPU: median {total:.0f} µs per operation "
            f"(system median {sys_part:.0f} µs, so user about {total - sys_part:.0f})"
        )
    pairs = [a / b for a, b in zip(cpu["learn"], cpu["update"], strict=False)]
    each = " ".join(f"{p:.2f}" for p in pairs)
    print(f"learn CPU / update CPU: median {statistics.median(pairs):.2f}  ({each})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
