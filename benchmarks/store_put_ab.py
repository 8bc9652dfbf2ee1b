"""``python -m benchmarks.store_put_ab --trees OLD NEW [--what new|update] [--rounds R] [--puts N]
[--dir DISK]``: ``JournalStore.put`` of two source trees (two checkouts of this repository, e.g. the
parent commit's ``git archive`` and the work tree) measured in turn, each round a fresh process of
each (the order alternating), so both see the same machine and disk at the same minutes.

Each process puts 500 items (as ``--only langgraph`` does), then ``--puts`` more, timed: with
``--what new`` distinct new keys (the benchmark's puts), with ``--what update`` 50 keys put over
and over (every put an update, so retirements pile up as a store whose items change makes them).
It prints, per tree, the median CPU per put (user + system, ``getrusage``) and rate, and the median
of the per-round ratios new / old. ``--worker TREE`` is the child's own entry (one measure, as JSON).

``--in-process`` (no ``--trees``): one process of this tree, blocks of ``--puts`` taking turns
between the code before this round's put cuts (a sync parses and checks this process's own files
again; a write's look-up filters every name of its folder in Python) and after, so both share one
process's warm state and the same minutes; ``--rounds`` pairs of blocks.

``--in-process-sync``: likewise, blocks of new keys taking turns between the sync every
``sync_every`` writes run on the caller's thread (the code before) and on the store's sync thread
(``BackgroundSync``); it also prints the caller's thread's own CPU a put (``time.thread_time``),
and a block's CPU includes its last sync (waited for after the clock stops).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _worker(what: str, puts: int, base: str) -> dict[str, float]:
    from flows.langgraph import JournalStore

    ns = ("bench", "items")
    with JournalStore(db=f"{base}/history.db", journal=f"{base}/journal") as store:
        n = 0

        def put(count: int) -> None:
            nonlocal n
            for _ in range(count):
                key = f"k{n}" if what == "new" else f"k{n % 50}"
                store.put(ns, key, {"tag": f"t{n % 10}", "text": f"finding {n} about fees and swaps"})
                n += 1

        put(500)
        c0, t0 = _cpu_s(), time.perf_counter()
        put(puts)
        t1, c1 = time.perf_counter(), _cpu_s()
    return {"cpu_us": (c1 - c0) / puts * 1e6, "rate": puts / (t1 - t0)}


class _Forgetful(set[str]):
    """A look-up's set of names that are no learned file, which keeps none (the code before)."""

    def add(self, name: str) -> None:
        pass


def _in_process(what: str, puts: int, rounds: int, base: str) -> dict[str, list[dict[str, float]]]:
    """Blocks of ``puts`` in one store, before and after taking turns (see the module's doc)."""
    import memory._learn as learn
    from flows.langgraph import JournalStore

    seed = getattr(learn, "published_own")  # noqa: B009 (not exported: this benchmark's switch)
    ns = ("bench", "items")
    got: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    with JournalStore(db=f"{base}/history.db", journal=f"{base}/journal") as store:
        n = 0

        def put(count: int) -> None:
            nonlocal n
            for _ in range(count):
                key = f"k{n}" if what == "new" else f"k{n % 50}"
                store.put(ns, key, {"tag": f"t{n % 10}", "text": f"finding {n} about fees and swaps"})
                n += 1

        def switch(kind: str) -> None:
            setattr(learn, "published_own", (lambda *args: None) if kind == "old" else seed)  # noqa: B010
            lookup = store._lookup
            for files in lookup._scopes.values() if lookup is not None else ():
                files.other = _Forgetful() if kind == "old" else set()

        put(500)
        for r in range(rounds):
            for kind in ("old", "new") if r % 2 == 0 else ("new", "old"):
                switch(kind)
                c0, t0 = _cpu_s(), time.perf_counter()
                put(puts)
                t1, c1 = time.perf_counter(), _cpu_s()
                got[kind].append({"cpu_us": (c1 - c0) / puts * 1e6, "rate": puts / (t1 - t0)})
        setattr(learn, "published_own", seed)  # noqa: B010
    return got


class _Inline:
    """The store's sync run in the write that asks for it (the code before ``BackgroundSync``)."""

    def __init__(self, sync: Any) -> None:
        self.ask = sync

    def raise_failure(self) -> None:
        pass


def _in_process_sync(puts: int, rounds: int, base: str) -> dict[str, list[dict[str, float]]]:
    """Blocks of ``puts`` new keys in one store, the sync inline and on its thread taking turns."""
    from flows.langgraph import JournalStore

    ns = ("bench", "items")
    got: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    with JournalStore(db=f"{base}/history.db", journal=f"{base}/journal") as store:
        background = store._background
        inline = _Inline(lambda: store.memory.sync(materialize=False))
        n = 0

        def put(count: int) -> None:
            nonlocal n
            for _ in range(count):
                store.put(ns, f"k{n}", {"tag": f"t{n % 10}", "text": f"finding {n} about fees and swaps"})
                n += 1

        put(500)
        for r in range(rounds):
            for kind in ("old", "new") if r % 2 == 0 else ("new", "old"):
                background.wait()  # the last block's sync done, outside the timing
                store._background = inline if kind == "old" else background  # type: ignore[assignment]
                c0, m0, t0 = _cpu_s(), time.thread_time(), time.perf_counter()
                put(puts)
                t1 = time.perf_counter()
                background.wait()  # the process's CPU counts the block's syncs whole
                c1, m1 = _cpu_s(), time.thread_time()
                cpu, caller = (c1 - c0) / puts * 1e6, (m1 - m0) / puts * 1e6
                got[kind].append({"cpu_us": cpu, "rate": puts / (t1 - t0), "caller_us": caller})
        store._background = background
    return got


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the figures (or, with ``--worker``, one measure)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.store_put_ab", description=__doc__)
    ap.add_argument("--trees", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--what", choices=["new", "update"], default="new")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--puts", type=int, default=1600)
    ap.add_argument("--dir", default=None, help="a directory on the disk to measure (default: temp)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--in-process", action="store_true", help="before and after in one process")
    ap.add_argument("--in-process-sync", action="store_true", help="the sync inline, then on its thread")
    args = ap.parse_args(argv)
    if args.in_process_sync:
        base = tempfile.mkdtemp(prefix="flows-store-put-", dir=args.dir)
        try:
            _report(_in_process_sync(args.puts, args.rounds, base))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return 0
    if args.in_process:
        base = tempfile.mkdtemp(prefix="flows-store-put-", dir=args.dir)
        try:
            _report(_in_process(args.what, args.puts, args.rounds, base))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return 0
    if args.worker:
        base = tempfile.mkdtemp(prefix="flows-store-put-", dir=args.dir)
        try:
            print(json.dumps(_worker(args.what, args.puts, base)))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        return 0
    if not args.trees:
        ap.error("--trees OLD NEW is required")
    old, new = (os.path.abspath(t) for t in args.trees)
    got: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for kind in ("old", "new") if r % 2 == 0 else ("new", "old"):
            tree = old if kind == "old" else new
            cmd = [sys.executable, "-m", "benchmarks.store_put_ab", "--worker", "--what", args.what]
            cmd += ["--puts", str(args.puts)] + (["--dir", args.dir] if args.dir else [])
            env = {**os.environ, "PYTHONPATH": tree}
            out = subprocess.run(cmd, cwd=tree, env=env, check=True, capture_output=True, text=True).stdout
            got[kind].append(json.loads(out.strip().splitlines()[-1]))
    _report(got)
    return 0


def _report(got: dict[str, list[dict[str, float]]]) -> None:
    for kind, runs in got.items():
        cpu = [x["cpu_us"] for x in runs]
        rate = [x["rate"] for x in runs]
        each = " ".join(f"{c:.0f}" for c in cpu)
        caller = [x["caller_us"] for x in runs if "caller_us" in x]
        mine = f"; the caller's thread {statistics.median(caller):.0f} µs" if caller else ""
        print(
            f"{kind:>4}: CPU median {statistics.median(cpu):6.0f} µs a put ({each}){mine}; "
            f"median {statistics.median(rate):5.0f} puts/s"
        )
    for label, key in (("CPU", "cpu_us"), ("caller's CPU", "caller_us"), ("rate", "rate")):
        if any(key not in x for x in got["old"]):
            continue
        pairs = [b[key] / a[key] for a, b in zip(got["old"], got["new"], strict=True)]
        each = " ".join(f"{p:.2f}" for p in pairs)
        print(f"new / old {label}: median {statistics.median(pairs):.2f} ({each})")


if __name__ == "__main__":
    raise SystemExit(main())
