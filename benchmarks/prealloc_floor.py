"""``python -m benchmarks.prealloc_floor [--ops N] [--rounds R] [--dir DIR]``: what a preallocated
log would buy the journal-first floor, measured at the system-call level with no library code.

Four raw sequences, R rounds of N operations each, alternating, every round in a fresh folder:

* ``append``: a line appended to a log and ``fsync``'d (the file grows: its inode is written too);
* ``prealloc append``: the same line written over a region of the log that was zero-filled and
  synced beforehand, then ``fdatasync``'d (nothing of the log's inode that a data sync needs
  changes: only the data and the device's cache flush);
* ``learn``: a learn's raw sequence: a new hidden file written (no sync), the line appended and
  ``fsync``'d, the file renamed into place;
* ``prealloc learn``: the same with the preallocated log's overwrite and ``fdatasync``.

It prints each sequence's rate per round and median, and the per-round ratios of the preallocated
learn to the learn and to the plain append. A preallocated log is a change of the journal's format
(its size no longer says where its records end), so it is measured here before anything is built.
docs/PERFORMANCE.md has the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

_LINE = b'{"id":"0123456789abcdef","key":"k","payload":{"text":"' + b"a" * 400 + b'"}}\n'
_FILE = b"b" * 500
_KINDS = ("append", "prealloc append", "learn", "prealloc learn")


def _round(base: str, kind: str, ops: int) -> float:
    """Operations per second of one round of ``kind``."""
    folder = tempfile.mkdtemp(prefix="prealloc-", dir=base)
    os.mkdir(f"{folder}/learned")
    fd = os.open(f"{folder}/log", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    prealloc, learn = kind.startswith("prealloc"), kind.endswith("learn")
    try:
        if prealloc:  # zeros written, not ``fallocate``d: an unwritten extent is converted on write
            os.write(fd, b"\0" * (len(_LINE) * (ops + 1)))
            os.fsync(fd)
            dfd = os.open(folder, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
        at = 0
        start = time.perf_counter()
        for i in range(ops):
            if learn:
                stage = f"{folder}/learned/.stage-{i}"
                sfd = os.open(stage, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
                os.write(sfd, _FILE)
                os.close(sfd)
            if prealloc:
                os.pwrite(fd, _LINE, at)
                at += len(_LINE)
                os.fdatasync(fd)
            else:
                os.write(fd, _LINE)
                os.fsync(fd)
            if learn:
                os.rename(stage, f"{folder}/learned/{i}.json")
        return ops / (time.perf_counter() - start)
    finally:
        os.close(fd)
        shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", type=int, default=500, help="operations per round (default 500)")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of each sequence (default 4)")
    parser.add_argument("--dir", default=None, help="the folder to measure in (default: the system's temp)")
    args = parser.parse_args()
    base = args.dir or tempfile.gettempdir()
    rates: dict[str, list[float]] = {kind: [] for kind in _KINDS}
    for _ in range(args.rounds):
        for kind in _KINDS:
            rates[kind].append(_round(base, kind, args.ops))
    for kind in _KINDS:
        runs = ", ".join(f"{r:,.0f}" for r in rates[kind])
        print(f"{kind:16} median {statistics.median(rates[kind]):8,.0f}/s   rounds: {runs}")
    for other in ("learn", "append"):
        ratios = [p / o for p, o in zip(rates["prealloc learn"], rates[other], strict=True)]
        shown = ", ".join(f"{r:.2f}" for r in ratios)
        print(f"prealloc learn / {other}: median {statistics.median(ratios):.2f}   rounds: {shown}")


if __name__ == "__main__":
    main()
