"""``python -m benchmarks.create_cost [--freed N ...] [--creates C] [--touch MB] [--dir DIR]``: what one
exclusive file create costs in a folder, against how many files were deleted in that folder a second
before.

For each N (default 0, 1,000, 4,000, 0 again) it makes a new folder under DIR, creates N empty files
in it, unlinks them, waits 1.1 s, then times C (default 200) exclusive creates (``O_CREAT|O_EXCL``)
there and prints their median, 90th percentile and mean in µs, with the inode group of the new files
(inode number less 1, divided by the group's 8,192 inodes: the figure is right for this machine's
file system only) and how many of the deleted inode numbers were handed out again.

Why: ext4 without a journal (``/proc/fs/jbd2`` lists none; ``/sys/fs/ext4/DEV/journal_task`` is
``<none>``) will not reuse an inode freed less than 60 s ago (360 s while its inode table block is
still dirty), and each create looks at every such free inode of the group, from the group's first,
before taking another (the kernel's ``find_inode_bit`` and ``recently_deleted``). So a create's
system time grows with the files deleted in its group within the last minutes, by anyone. A new
folder lands in its parent's group: run it twice in a row under the same DIR and the second run
pays for the first one's deletions. ``--touch MB`` writes over a buffer of MB megabytes before each
timed create, as a learn's own work does between two stages: the walk then runs on cold caches.
docs/PERFORMANCE.md has the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_INODES_PER_GROUP = 8192


def _create(folder: str, names: list[str], touch: bytearray | None = None) -> tuple[list[float], list[int]]:
    """Create each of ``names`` in ``folder`` (``touch`` written over before each): µs per create,
    and the inode numbers."""
    took, inodes = [], []
    for name in names:
        if touch is not None:
            touch[:] = bytes(len(touch))
        t0 = time.perf_counter_ns()
        fd = os.open(os.path.join(folder, name), _FLAGS, 0o600)
        took.append((time.perf_counter_ns() - t0) / 1000)
        inodes.append(os.fstat(fd).st_ino)
        os.close(fd)
    return took, inodes


def main(argv: list[str] | None = None) -> int:
    """Measure each N in turn and print one line each."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.create_cost", description=__doc__)
    ap.add_argument("--freed", type=int, nargs="+", default=[0, 1000, 4000, 0])
    ap.add_argument("--creates", type=int, default=200)
    ap.add_argument("--touch", type=int, default=0, help="MB written over before each timed create")
    ap.add_argument("--dir", default=None, help="where the folders are made (default: temp)")
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="flows-create-cost-", dir=args.dir)
    try:
        for k, freed in enumerate(args.freed):
            folder = os.path.join(base, str(k))
            os.mkdir(folder)
            _, gone = _create(folder, [f"gone-{i}" for i in range(freed)])
            for i in range(freed):
                os.unlink(os.path.join(folder, f"gone-{i}"))
            time.sleep(1.1)  # a deletion is "recent" only once a second has turned
            touch = bytearray(args.touch << 20) if args.touch else None
            took, inodes = _create(folder, [f"new-{i}" for i in range(args.creates)], touch)
            took.sort()
            again = len(set(gone) & set(inodes))
            groups = sorted({(ino - 1) // _INODES_PER_GROUP for ino in inodes})
            print(
                f"{freed:>6} deleted 1 s before: create median {statistics.median(took):6.1f} µs, "
                f"p90 {took[int(len(took) * 0.9)]:6.1f}, mean {statistics.mean(took):6.1f}; "
                f"inode group {groups}, numbers handed out again {again}"
            )
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
