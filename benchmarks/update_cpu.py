"""What an update costs beyond a learn, counted: ``python -m benchmarks.update_cpu KIND [N] [--dir DIR]``.

``KIND`` ``learn`` or ``update``: a fresh store under DIR (default: the system's temporary folder),
50 memories learned and 200 updates and 200 learns made untimed (so the update's folders, turns and
noted versions are warm), then N (default 2,000) operations of KIND: learns of distinct findings, or
updates round-robin over the 50 memories; the background unlinks of the files an update set aside
are waited for. Prints the CPU per operation (``resource.getrusage``: user + system, every thread).
The N operations lie between an ``lstat`` of ``/update-cpu-start`` and one of ``/update-cpu-end``
(both missing), so an ``strace -f`` of the process can be cut to them; for instructions, run it
under ``valgrind --tool=callgrind`` at two sizes and divide the difference by the difference of N.

``KIND`` ``floor``: the raw system calls of each, no library code (``benchmarks/_worker.py``'s
``oneflush`` and ``oneflush_update``), in alternating blocks of 300 (``--blocks``, default 12) on
DIR: the rate and the CPU per operation of each, and the median of per-pair rate ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import tempfile
import time


def _cpu_us() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1e6


def _mark(name: str) -> None:
    with contextlib.suppress(OSError):
        os.lstat(f"/update-cpu-{name}")


def _ops(kind: str, n: int, base: str) -> float:
    import memory
    from journal import RunState
    from memory._reaper import REAPER

    with memory.MemoryStore(os.path.join(base, "history.db")) as store:
        jr = store.open_journal()
        _, lease = jr.begin("update-cpu", "bench", {})
        root = memory.RootRun(jr, lease, "update-cpu", "bench")
        tags = ["bench"]
        ids = [store.learn({"text": f"memory {i} first", "tags": tags}, root).memory_id for i in range(50)]
        for i in range(200):
            store.update(ids[i % 50], {"text": f"memory {i % 50} warm {i}", "tags": tags}, root)
            store.learn({"text": f"warm finding {i}", "tags": tags}, root)
        REAPER.drain()
        _mark("start")
        c0 = _cpu_us()
        for i in range(n):
            if kind == "learn":
                store.learn({"text": f"engine finding {i}", "tags": ["bench"]}, root)
            else:
                store.update(ids[i % 50], {"text": f"memory {i % 50} version {i}", "tags": ["bench"]}, root)
        REAPER.drain()
        took = (_cpu_us() - c0) / n
        _mark("end")
        store.flush()
        jr.finish(lease, RunState.DONE)
    return took


def _floor(base: str, blocks: int) -> None:
    from benchmarks._worker import _raw, _raw_update

    k = 300
    runs = {
        "learn": _raw({"dir": f"{base}/l/compacted", "journal": f"{base}/l.jsonl", "who": "w"}, "oneflush"),
        "update": _raw_update({"dir": f"{base}/u/compacted", "journal": f"{base}/u.jsonl", "who": "w"}),
    }
    rates: dict[str, list[float]] = {"learn": [], "update": []}
    cpu: dict[str, list[float]] = {"learn": [], "update": []}
    for b in range(blocks):
        kind = ("learn", "update")[b % 2]
        c0, t0 = _cpu_us(), time.perf_counter()
        runs[kind](k, b * k)
        rates[kind].append(k / (time.perf_counter() - t0))
        cpu[kind].append((_cpu_us() - c0) / k)
    pairs = [u / learn for u, learn in zip(rates["update"], rates["learn"], strict=False)]
    for kind in ("learn", "update"):
        print(
            f"raw {kind}: median {statistics.median(rates[kind]):.0f}/s, "
            f"CPU {statistics.median(cpu[kind]):.1f} µs per operation"
        )
    each = " ".join(f"{p:.2f}" for p in pairs)
    print(f"raw update / raw learn rate: median {statistics.median(pairs):.2f}  ({each})")


def main(argv: list[str] | None = None) -> int:
    """Run ``KIND`` and print its figures."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.update_cpu", description=__doc__)
    parser.add_argument("kind", choices=("learn", "update", "floor"))
    parser.add_argument("n", nargs="?", type=int, default=2000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--blocks", type=int, default=12)
    args = parser.parse_args(argv)
    base = tempfile.mkdtemp(prefix="update-cpu-", dir=args.dir)
    try:
        if args.kind == "floor":
            _floor(base, args.blocks)
        else:
            print(f"{args.kind}: CPU {_ops(args.kind, args.n, base):.0f} µs per operation")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
