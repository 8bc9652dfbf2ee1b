"""``python -m benchmarks.reverse_lines [--dir DISK] [SIZE ...]``: what ``LineLog.iter_reverse``
costs over a stream of three records of ``SIZE`` bytes of payload each (default 1, 2, 4, 8 and 16
MB), in CPU (user + system ms, ``getrusage``) of one full pass newest first. A reader that joined
every block of a long line to the bytes held so far cost four times as much for every doubling.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
from pathlib import Path

from journal import LineLog, Record, RecordCodec


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def main(argv: list[str] | None = None) -> int:
    """Write each stream, read it newest first, and print the CPU of the read."""
    ap = argparse.ArgumentParser(prog="reverse_lines", description=__doc__)
    ap.add_argument("--dir", default=None, help="where to write the streams (a temporary folder)")
    ap.add_argument("sizes", nargs="*", type=int, default=[1 << 20, 2 << 20, 4 << 20, 8 << 20, 16 << 20])
    args = ap.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="reverse-lines-", dir=args.dir))
    try:
        for size in args.sizes:
            path = folder / f"s{size}.jsonl"
            log = LineLog(path, RecordCodec("run", "s"), sequence=lambda r: r.seq)
            with log.locked():
                log.recover()
                for seq in (1, 2, 3):
                    log.append(Record("run", "s", seq, f"id{seq}", None, seq, {"t": "a" * size}))
            log.close()
            reader = LineLog(path, RecordCodec("run", "s"), sequence=lambda r: r.seq)
            before = _cpu()
            count = sum(1 for _ in reader.iter_reverse())
            took = (_cpu() - before) * 1000
            print(f"payload {size:>10,} B  records {count}  iter_reverse {took:8.1f} ms CPU")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
