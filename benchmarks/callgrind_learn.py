"""Instructions per learn, counted by callgrind: ``python benchmarks/callgrind_learn.py [options]``.

CPU time on this shared machine swings with the load; the instructions a process runs do not. This
driver runs a learn loop under ``valgrind --tool=callgrind`` with ``PYTHONHASHSEED=0`` and counts
only the timed part: the program calls ``os.getsid`` just before it and ``os.getpgid`` just after
it, and callgrind is told ``--zero-before=getsid --dump-before=getpgid``, so the interpreter's
start, the imports, the store's open and the warm-up are not in the figure (every thread is: the
reaper's too). Only user-space instructions are counted: a system call is one instruction.

Modes (``--mode``):

* ``1w``: one store on one root run, 30 learns untimed, then ``--learns`` N (default 200);
* ``8rr``: 8 stores in one process and one thread on one root run, taking turns learn by learn
  (``benchmarks.concurrent_cpu``'s ``8rr``): 3 turns untimed, then N turns (default 40, so
  ``8 * N`` learns). Each learn finds the 7 lines the others appended since its last.
* ``8p``: 8 processes on one root run (``benchmarks.concurrent_cpu``'s ``8p``), each under its own
  callgrind: 3 learns untimed each, then, once all 8 are ready, N learns each (default 40), at once;
  the figure is the 8 counts summed over the ``8 * N`` learns. What the waiting and switching of
  real concurrency make a learn execute (marks read again, locks retried, lines decoded), against
  ``8rr``'s same work done in turns. ``CG_DIR`` puts the store on the disk to measure (default
  ``/dev/shm``).

``--tree TREE`` (repeatable) runs the program on each source tree in turn (``PYTHONPATH=TREE``),
``--runs R`` times each, alternating; it prints every run's instructions per learn and the median
per tree. ``--keep DIR`` leaves callgrind's files there (``callgrind_annotate --inclusive=yes``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_PROGRAM = r"""
import os, sys
mode, n, base = sys.argv[1], int(sys.argv[2]), sys.argv[3]
import journal, memory
writers = 1 if mode == "1w" else 8
first = memory.MemoryStore(os.path.join(base, "history.db"), journal=os.path.join(base, "journal"))
_, lease = first.open_journal().begin("bench", "bench", {})
stores = [first] + [
    memory.MemoryStore(os.path.join(base, "history.db"), journal=os.path.join(base, "journal"))
    for _ in range(writers - 1)
]
pairs = [
    (s, memory.RootRun(s.open_journal(), journal.Lease(lease.run_id, lease.epoch), "bench", "bench"))
    for s in stores
]
def turn(i):
    for w, (store, root) in enumerate(pairs):
        store.learn({"text": f"engine finding w{w}-{i}", "tags": ["bench"]}, root)
for i in range(30 if writers == 1 else 3):
    turn(i)
os.getsid(0)
for i in range(1_000_000, 1_000_000 + n):
    turn(i)
os.getpgid(0)
os._exit(0)
"""


_WORKER = r"""
import os, sys, time
n, base, who = int(sys.argv[1]), sys.argv[2], sys.argv[3]
import journal, memory
run_id, epoch = open(os.path.join(base, "root")).read().split()
store = memory.MemoryStore(os.path.join(base, "history.db"), journal=os.path.join(base, "journal"))
root = memory.RootRun(store.open_journal(), journal.Lease(run_id, int(epoch)), "bench", "bench")
for i in range(3):
    store.learn({"text": f"engine finding {who}-{i}", "tags": ["bench"]}, root)
open(os.path.join(base, f"ready-{who}"), "w").close()
while not os.path.exists(os.path.join(base, "go")):
    time.sleep(0.01)
os.getsid(0)
for i in range(1_000_000, 1_000_000 + n):
    store.learn({"text": f"engine finding {who}-{i}", "tags": ["bench"]}, root)
os.getpgid(0)
os._exit(0)
"""


def _run_8p(tree: Path, n: int, keep: Path | None, tag: str) -> int:
    """``8p``: 8 worker processes, each under callgrind; their counted parts summed."""
    base = Path(tempfile.mkdtemp(prefix="cg-learn-", dir=os.environ.get("CG_DIR", "/dev/shm")))
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    begin = (
        "import sys, journal, memory\n"
        "s = memory.MemoryStore(sys.argv[1] + '/history.db', journal=sys.argv[1] + '/journal')\n"
        "_, lease = s.open_journal().begin('bench', 'bench', {})\n"
        "open(sys.argv[1] + '/root', 'w').write(f'{lease.run_id} {lease.epoch}')\n"
        "sys.stdout.write('begun\\n'); sys.stdout.flush(); sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [_python(), "-c", begin, str(base)], env=env, cwd=base, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )  # holds the root's lease, as the benchmark's driver does
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"begun\n"
        procs = []
        for w in range(8):
            cmd = [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={base}/cg-w{w}.out",
                "--zero-before=getsid", "--dump-before=getpgid",
                _python(), "-c", _WORKER, str(n), str(base), f"w{w}",
            ]  # fmt: skip
            procs.append(
                subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=base)
            )
        while len(list(base.glob("ready-*"))) < len(procs) and all(p.poll() is None for p in procs):
            time.sleep(0.05)
        (base / "go").touch()
        if any(p.wait() != 0 for p in procs):
            raise RuntimeError("a callgrind worker failed")
        total = 0
        for w in range(8):
            part = next(
                p for p in base.glob(f"cg-w{w}.out*") if "Trigger: --dump-before=getpgid" in p.read_text()
            )
            found = re.search(r"^summary: (\d+)", part.read_text(), re.M)
            assert found is not None, part
            total += int(found.group(1))
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                shutil.copy(part, keep / f"{tag}-w{w}.out")
        return total
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait()
        shutil.rmtree(base, ignore_errors=True)


def _python() -> str:
    """The real interpreter (not a pyenv shim, which valgrind would count too)."""
    return os.path.realpath(sys.executable)


def _run(tree: Path, mode: str, n: int, keep: Path | None, tag: str) -> int:
    if mode == "8p":
        return _run_8p(tree, n, keep, tag)
    base = Path(tempfile.mkdtemp(prefix="cg-learn-", dir=os.environ.get("CG_DIR", "/dev/shm")))
    out = base / "cg.out"
    try:
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
        subprocess.run(
            [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                "--zero-before=getsid", "--dump-before=getpgid",
                _python(), "-c", _PROGRAM, mode, str(n), str(base),
            ],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=base,  # not the caller's folder: ``-c`` puts the current folder first on sys.path
        )  # fmt: skip
        part = next(p for p in base.glob("cg.out*") if "Trigger: --dump-before=getpgid" in p.read_text())
        found = re.search(r"^summary: (\d+)", part.read_text(), re.M)
        assert found is not None, part
        total = int(found.group(1))
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(part, keep / f"{tag}.out")
        return total
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python benchmarks/callgrind_learn.py")
    ap.add_argument("--mode", choices=("1w", "8rr", "8p"), default="1w")
    ap.add_argument("--learns", type=int, default=None)
    ap.add_argument("--tree", action="append", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None)
    args = ap.parse_args(argv)
    n = args.learns or (200 if args.mode == "1w" else 40)
    per = 1 if args.mode == "1w" else 8
    trees = args.tree or [Path(__file__).resolve().parent.parent]
    got: dict[Path, list[float]] = {t: [] for t in trees}
    for r in range(args.runs):
        for k, tree in enumerate(trees):
            total = _run(tree, args.mode, n, args.keep, f"{args.mode}-{k}-{r}")
            got[tree].append(total / (n * per))
            print(f"{tree} run {r + 1}: {total / (n * per):,.0f} instructions per learn", flush=True)
    for tree, values in got.items():
        print(
            f"{args.mode} {tree}: median {statistics.median(values):,.0f} per learn ({n * per} learns a run)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
