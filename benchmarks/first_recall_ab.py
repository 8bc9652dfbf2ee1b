"""``python -m benchmarks.first_recall_ab --old TREE --new TREE [--rounds N] [--base DIR]``: the first
recall of a fresh process from two source trees, side by side, against sqlite3's first query.

The figure is the cold section's ``cold.first_recall_ms`` (``benchmarks.cold``): a fresh interpreter
opens the store and makes its first ``recall(tag=, limit=10)``, timed inside the process after the
imports, over ``reads``' dataset (90,000 synced findings and 10,000 unsynced files by default) with
the unsynced files' index in place (``--own-datasets``: each tree reads a copy of its own, for two
trees whose files' index formats differ, which would otherwise rebuild each other's every round).
Each round runs, in a fresh process each and in alternating order, the old tree's read, the new
tree's and sqlite3's first query over the baseline, all with the round's tag; the tags cycle through
all 50 (about half of them put an unsynced finding among the ten, whose citation the read checks).
Each process reports its wall time and its CPU over the timed code: ``time.process_time_ns`` (the
kernel's exact count of the process's CPU time, user and system), not ``resource.getrusage``, whose
user and system split is sampled at the clock tick and adjusted so that neither goes back, which
makes its difference over a millisecond or two unreliable.

Prints each side's median wall time and CPU (and their 10th percentiles, steadier on a loaded
machine), each tree's ratio of medians against sqlite3 (the goal is ≤ 5), and the median of the
per-round ratios new / old. ``--base`` keeps the dataset between runs (built there when missing;
``reads/history.db`` and ``reads/baseline.db``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_MEMORY = r"""
import sys, time
from memory import MemoryStore  # the package imports its modules on first use: use it here
c0, t0 = time.process_time_ns(), time.perf_counter()
store = MemoryStore(sys.argv[1])
found = store.recall(tag=sys.argv[2], limit=10)
t1, c1 = time.perf_counter(), time.process_time_ns()
print((t1 - t0) * 1000, (c1 - c0) / 1000, len(found))
"""

_SQLITE = r"""
import sys, time
import sqlite3
c0, t0 = time.process_time_ns(), time.perf_counter()
conn = sqlite3.connect(sys.argv[1])
rows = conn.execute(
    "SELECT f.id, f.key, f.text, f.source, f.tags, f.learned_ms, f.run_id, f.record_id FROM t"
    " JOIN f ON f.id = t.f WHERE t.tag = ? ORDER BY t.learned_ms DESC LIMIT 10", (sys.argv[2],)
).fetchall()
t1, c1 = time.perf_counter(), time.process_time_ns()
print((t1 - t0) * 1000, (c1 - c0) / 1000, len(rows))
"""


def _build(base: Path, synced: int, unsynced: int) -> None:
    """``reads``' dataset and its SQLite baseline under ``base/reads``, and the files' index."""
    import memory
    from benchmarks.reads import _baseline, build_dataset

    db = base / "reads" / "history.db"
    build_dataset(db, synced, unsynced)
    with memory.MemoryStore(db) as store:
        store.recall(tag="tag0", limit=10)  # writes the files' index
        every = store.recall(limit=None)
    _baseline(every, base / "reads" / "baseline.db").close()


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    # in the tree's own folder: ``python -c`` puts the working folder first on ``sys.path``, so a
    # process started elsewhere could import another tree's packages than its PYTHONPATH names
    cwd = env.get("PYTHONPATH") or None
    out = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, check=True, timeout=300)
    ms, cpu, n = out.stdout.split()
    if int(n) != 10:
        raise RuntimeError(f"a fresh-process read returned {n} rows, not 10")
    return float(ms), float(cpu)


def _p10(values: list[float]) -> float:
    """The 10th percentile of ``values`` (within their range)."""
    return statistics.quantiles(values, n=10, method="inclusive")[0] if len(values) > 1 else values[0]


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and print the figures."""
    ap = argparse.ArgumentParser(prog="first_recall_ab", description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the old source tree (a checkout's root)")
    ap.add_argument("--new", required=True, help="the new source tree")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--base", help="where the dataset is (built there when missing); default: made anew")
    ap.add_argument("--synced", type=int, default=90_000)
    ap.add_argument("--unsynced", type=int, default=10_000)
    ap.add_argument("--own-datasets", action="store_true", help="each tree reads its own copy of the dataset")
    args = ap.parse_args(argv)
    base = Path(args.base) if args.base else Path(tempfile.mkdtemp(prefix="flows-first-ab-"))
    pycache = Path(tempfile.mkdtemp(prefix="flows-first-ab-pyc-"))
    db, baseline = base / "reads" / "history.db", base / "reads" / "baseline.db"
    try:
        if not baseline.exists():
            _build(base, args.synced, args.unsynced)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
        trees = {"old": args.old, "new": args.new}
        envs = {side: {**env, "PYTHONPATH": str(Path(tree).resolve())} for side, tree in trees.items()}
        dbs = {"old": db, "new": db}
        if args.own_datasets:  # the copy's index names other folders: the new tree's first read writes it
            copy = base / "reads-new"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(base / "reads", copy, symlinks=True)
            dbs["new"] = copy / "history.db"
            time.sleep(2.5)  # an index is written for folders settled 2 s (their ctime is the copy's)
        commands = {side: [sys.executable, "-c", _MEMORY, str(dbs[side])] for side in envs}
        sqlite_cmd = [sys.executable, "-c", _SQLITE, str(baseline)]
        for side, side_env in envs.items():  # compile once
            _run([*commands[side], "tag0"], side_env)
        _run([*sqlite_cmd, "tag0"], env)
        wall: dict[str, list[float]] = {"old": [], "new": [], "sqlite": []}
        cpu: dict[str, list[float]] = {"old": [], "new": [], "sqlite": []}
        for i in range(args.rounds):
            tag = f"tag{i % 50}"
            order = ("old", "new", "sqlite") if i % 2 == 0 else ("new", "old", "sqlite")
            for side in order:
                if side == "sqlite":
                    ms, us = _run([*sqlite_cmd, tag], env)
                else:
                    ms, us = _run([*commands[side], tag], envs[side])
                wall[side].append(ms)
                cpu[side].append(us)
    finally:
        shutil.rmtree(pycache, ignore_errors=True)
        if not args.base:
            shutil.rmtree(base, ignore_errors=True)
    med = {side: statistics.median(v) for side, v in wall.items()}
    med_cpu = {side: statistics.median(v) for side, v in cpu.items()}
    print(f"first recall, {args.rounds} rounds of fresh processes (wall ms inside the process; CPU µs)")
    for side in ("old", "new", "sqlite"):
        low, low_cpu = _p10(wall[side]), _p10(cpu[side])
        print(f"  {side:6} wall {med[side]:.3f} ms (p10 {low:.3f})", end="")
        print(f"   CPU {med_cpu[side]:.0f} µs (p10 {low_cpu:.0f})")
    for side in ("old", "new"):
        wall_ratio, cpu_ratio = med[side] / med["sqlite"], med_cpu[side] / med_cpu["sqlite"]
        print(f"  {side} / sqlite3: wall {wall_ratio:.2f}  CPU {cpu_ratio:.2f}")
    paired = [n / o for n, o in zip(wall["new"], wall["old"], strict=True)]
    paired_cpu = [n / o for n, o in zip(cpu["new"], cpu["old"], strict=True)]
    print(
        f"  new / old per round: wall median {statistics.median(paired):.3f}"
        f"  CPU median {statistics.median(paired_cpu):.3f}"
        f"  (new faster in {sum(p < 1 for p in paired)} of {len(paired)} rounds)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
