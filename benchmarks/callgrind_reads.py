"""``python benchmarks/callgrind_reads.py``: instructions per read, counted by valgrind's callgrind.

CPU time on this shared machine swings with the load; the count of instructions a process runs
does not: the same code, input and ``PYTHONHASHSEED`` give the same total to within a few
instructions a read. This driver runs the ``reads`` benchmark's two read goals under ``valgrind
--tool=callgrind`` and isolates the read from everything around it (the interpreter's start, the
imports, the store's open) by running each program twice with different amounts of reading and
taking the difference:

* warm: one store opened, every one of the 50 tags recalled twice (the warm state
  ``read.recall_ms`` times: the scope folders held, each tag's rows built and answered once),
  then ``N`` ``recall(tag=, limit=10)`` (the tags in turn). The figure is the total at ``2N`` less
  the total at ``N``, over ``N``; the same for ``benchmarks.reads``' indexed SQLite query over
  ``baseline.db``.
* first: a fresh process's first read, ``cold.first_recall_ms``'s timed code (open the store and
  recall one tag); the figure is the whole process less the same process stopped before the timed
  code (its imports done); the same for sqlite3's connect and first query. Both leave by
  ``os._exit`` at once, so the interpreter's teardown is in neither.

Commands (``--tree`` runs the programs on another source tree, e.g. ``git archive lead | tar -x -C
/tmp/base``, for an A/B; the dataset is shared: build it once)::

    python benchmarks/callgrind_reads.py build DIR            # reads' dataset, baseline.db, files' index
    python benchmarks/callgrind_reads.py measure DIR [--tree TREE] [--calls 100] [--tags tag2,tag3]

``measure`` prints the warm instructions a read (recall and SQLite, and their ratio) and, for each
tag, the first read's (about half the tags have an unsynced finding among their ten, whose
citation the read checks: tag2 has two, tag3 none) against sqlite3's. ``--calls 0`` skips the warm
reads; ``--keep`` leaves callgrind's output files in ``DIR/callgrind`` (``callgrind_annotate
--inclusive=yes FILE``; subtract the N run from the 2N run function by function for a read's own
profile). Only user-space instructions are counted: a system call is one instruction, whatever
the kernel does for it (``strace -c`` counts those).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_TAG_SQL = (
    "SELECT f.id, f.key, f.text, f.source, f.tags, f.learned_ms, f.run_id, f.record_id FROM t"
    " JOIN f ON f.id = t.f WHERE t.tag = ? ORDER BY t.learned_ms DESC LIMIT 10"
)

_WARM = r"""
import sys
db, calls, sqlite = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "sqlite"
tags = [f"tag{i}" for i in range(50)]
if sqlite:
    import sqlite3
    conn = sqlite3.connect(db.replace("history.db", "baseline.db"))
    read = lambda tag: conn.execute(SQL, (tag,)).fetchall()
else:
    import memory
    store = memory.MemoryStore(db)
    read = lambda tag: store.recall(tag=tag, limit=10)
for tag in tags * 2:
    assert len(read(tag)) == 10
for i in range(calls):
    read(tags[i % 50])
import os
os._exit(0)
"""

_FIRST = r"""
import sys
db, tag, sqlite, stop = sys.argv[1], sys.argv[2], sys.argv[3] == "sqlite", sys.argv[4] == "stop"
if sqlite:
    import sqlite3
    if not stop:
        conn = sqlite3.connect(db.replace("history.db", "baseline.db"))
        rows = conn.execute(SQL, (tag,)).fetchall()
        assert len(rows) == 10
else:
    from memory import MemoryStore  # as cold.py: the package imports its modules on first use
    if not stop:
        store = MemoryStore(db)
        assert len(store.recall(tag=tag, limit=10)) == 10
import os
os._exit(0)
"""


def _program(text: str) -> str:
    return text.replace("SQL", repr(_TAG_SQL))


def build(directory: Path, synced: int, unsynced: int) -> None:
    """``reads``' dataset under ``directory/reads`` (as ``benchmarks.first_recall_ab`` builds it):
    the history DB, the unsynced files, the journal, the files' index and ``baseline.db``."""
    sys.path.insert(0, str(_HERE.parent))
    from benchmarks.first_recall_ab import _build

    t0 = time.perf_counter()
    _build(directory, synced, unsynced)
    print(f"built {synced:,} synced and {unsynced:,} unsynced findings in {time.perf_counter() - t0:.0f} s")


def _instructions(argv: list[str], tree: Path, out: Path) -> int:
    """Instructions of ``python -c`` ``argv`` on ``tree`` under callgrind (user space, whole process)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # bytecode cached, as an installed package runs
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, *argv]
    proc = subprocess.run(cmd, check=False, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[:2])} failed under valgrind:\n{proc.stderr[-2000:]}")
    found = re.search(r"^(?:summary|totals):\s*(\d+)", out.read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no total in {out}")
    return int(found.group(1))


def measure(directory: Path, tree: Path, calls: int, tags: list[str], keep: bool) -> None:
    db = str(directory / "reads" / "history.db")
    outdir = directory / "callgrind"
    outdir.mkdir(exist_ok=True)

    def count(name: str, program: str, *args: str) -> int:
        out = outdir / f"{name}.out"
        try:
            return _instructions(["-c", _program(program), db, *args], tree, out)
        finally:
            if not keep:
                out.unlink(missing_ok=True)

    # once outside the count: the tree's bytecode compiled and cached, every folder settled
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run(
        [sys.executable, "-c", _program(_WARM), db, "0", "recall"],
        cwd=tree,
        env={**env, "PYTHONPATH": str(tree)},
        check=True,
    )
    print(f"tree {tree}")
    per: dict[str, float] = {}
    for kind in ("recall", "sqlite") if calls else ():
        one = count(f"warm-{kind}-{calls}", _WARM, str(calls), kind)
        two = count(f"warm-{kind}-{2 * calls}", _WARM, str(2 * calls), kind)
        per[kind] = (two - one) / calls
        print(
            f"warm {kind:6}: {per[kind]:>10,.0f} instructions a read ({calls}: {one:,}; {2 * calls}: {two:,})"
        )
    if per:
        print(f"warm ratio recall / sqlite: {per['recall'] / per['sqlite']:.3f}")
    for tag in tags:
        first: dict[str, int] = {}
        for kind in ("recall", "sqlite"):
            stop = count(f"first-{kind}-{tag}-stop", _FIRST, tag, kind, "stop")
            whole = count(f"first-{kind}-{tag}", _FIRST, tag, kind, "go")
            first[kind] = whole - stop
        print(
            f"first {tag}: recall {first['recall']:,}, sqlite {first['sqlite']:,},"
            f" ratio {first['recall'] / first['sqlite']:.3f}"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build reads' dataset in DIR")
    b.add_argument("dir", type=Path)
    b.add_argument("--synced", type=int, default=90_000)
    b.add_argument("--unsynced", type=int, default=10_000)
    m = sub.add_parser("measure", help="count instructions per read over DIR's dataset")
    m.add_argument("dir", type=Path)
    m.add_argument(
        "--tree", type=Path, default=_HERE.parent, help="the source tree to run (default: this one)"
    )
    m.add_argument(
        "--calls",
        type=int,
        default=100,
        help="N: the warm reads' count is the difference of 2N and N (0: no warm reads)",
    )
    m.add_argument("--tags", default="tag2,tag3", help="the first reads' tags, comma-separated ('' for none)")
    m.add_argument("--keep", action="store_true", help="keep callgrind's output files in DIR/callgrind")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.dir, args.synced, args.unsynced)
    else:
        tags = [t for t in args.tags.split(",") if t]
        measure(args.dir.resolve(), args.tree.resolve(), args.calls, tags, args.keep)


if __name__ == "__main__":
    main()
