"""``python -m benchmarks.why_ab --old DIR [--rounds R] [--findings N] [--dir DISK]``: the CPU of a
warm ``recall``, a warm keyword ``why`` and a warm hybrid ``why`` (the default embedder), this tree
against another checkout of the project (``--old``, e.g. ``git archive lead | tar -x -C /tmp/old``).

One store of ``N`` synthetic findings (``benchmarks.reads.build_dataset``: a tenth unsynced) is built
once and its vectors derived; then rounds alternate between the two trees, each a fresh process that
opens the store, warms each read, and times a block of each (``resource.getrusage``, user + system
µs per call). Prints each tree's median per read and the median of the per-round ratios (new / old).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks._common import REPO

_WORKER = r"""
import json, resource, sys
import memory
from benchmarks._common import TAGS
from benchmarks.reads import SUBJECTS

db, calls = sys.argv[1], int(sys.argv[2])

def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return (r.ru_utime + r.ru_stime) * 1e6

def per_call(fn, n):
    for i in range(3):
        fn(i)
    t0 = cpu()
    for i in range(n):
        fn(i)
    return (cpu() - t0) / n

out = {}
with memory.MemoryStore(db) as store:
    out["recall"] = per_call(lambda i: store.recall(tag=TAGS[i % len(TAGS)], limit=10), calls * 20)
    out["why_keyword"] = per_call(lambda i: store.why(SUBJECTS[i % len(SUBJECTS)]), calls * 4)
with memory.MemoryStore(db, embedder=memory.default_embedder()) as store:
    out["why_hybrid"] = per_call(lambda i: store.why(SUBJECTS[i % len(SUBJECTS)], mode="hybrid"), calls)
print(json.dumps(out))
"""


def _run(tree: Path, db: Path, calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run(
        [sys.executable, "-c", _WORKER, str(db), str(calls)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    got: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--old", type=Path, required=True, help="the other checkout's folder")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--findings", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=20, help="hybrid whys a round (recalls: 20x)")
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    import memory
    from benchmarks.reads import build_dataset

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        db = Path(tmp) / "history.db"
        build_dataset(db, args.findings - args.findings // 10, args.findings // 10)
        with memory.MemoryStore(db, embedder=memory.default_embedder()) as store:
            store.derive_vectors()
        rows: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
        for r in range(args.rounds):
            order = [("old", args.old), ("new", REPO)] if r % 2 == 0 else [("new", REPO), ("old", args.old)]
            for name, tree in order:
                rows[name].append(_run(tree, db, args.calls))
    for read in rows["new"][0]:
        old = [x[read] for x in rows["old"]]
        new = [x[read] for x in rows["new"]]
        ratios = [n / o for n, o in zip(new, old, strict=True)]
        print(
            f"{read:12} old {statistics.median(old):9.1f} µs  new {statistics.median(new):9.1f} µs  "
            f"new/old {statistics.median(ratios):.3f} (rounds: {', '.join(f'{x:.2f}' for x in ratios)})"
        )


if __name__ == "__main__":
    main()
