"""CPU of one learn, alone: ``python -m benchmarks.learn_cpu [N] [--profile] [--dir DIR]``.

Begins a root run in a fresh store under DIR (default: the system's temporary folder), learns 20
findings untimed, then N (default 2,000) distinct findings as ``benchmarks/_worker.py``'s ``learn``
does, and prints the user and system CPU per learn (``resource.getrusage``). With ``--profile`` it
runs them under cProfile instead and prints Python calls per learn and the top functions by own
time. Syscalls per learn: run it under ``strace -f -c`` at two sizes and divide the difference.
A/B: run it from two checkouts alternately (``PYTHONPATH=<checkout>``), several rounds.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.learn_cpu")
    parser.add_argument("n", nargs="?", type=int, default=2000)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--dir", default=None)
    args = parser.parse_args(argv)

    import journal
    import memory

    base = tempfile.mkdtemp(prefix="learn-cpu-", dir=args.dir)
    try:
        store = memory.MemoryStore(os.path.join(base, "history.db"), journal=os.path.join(base, "journal"))
        jr = store.open_journal()
        _, lease = jr.begin("bench", "bench", {})
        root = memory.RootRun(jr, journal.Lease(lease.run_id, lease.epoch), "bench", "bench")
        for i in range(20):
            store.learn({"text": f"warm-up finding {i}", "tags": ["bench"]}, root)

        def run() -> None:
            for i in range(args.n):
                store.learn({"text": f"engine finding {i}", "tags": ["bench"]}, root)

        if args.profile:
            import cProfile
            import pstats

            profile = cProfile.Profile()
            profile.runcall(run)
            stats = pstats.Stats(profile)
            calls = sum(v[1] for v in stats.stats.values())  # type: ignore[attr-defined]
            print(f"Python calls per learn: {calls / args.n:.1f}")
            stats.sort_stats("tottime").print_stats(30)
        else:
            before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
            run()
            took, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
            user = (after.ru_utime - before.ru_utime) / args.n * 1e6
            system = (after.ru_stime - before.ru_stime) / args.n * 1e6
            print(
                f"learn CPU: user {user:.1f} + system {system:.1f} = {user + system:.1f} us; "
                f"wall {took / args.n * 1e6:.1f} us ({args.n} learns)"
            )
        store.close()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
