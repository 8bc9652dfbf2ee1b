"""``python -m benchmarks.decode_lines [--lines N] [--rounds R] [--no-decode]``: what
``RecordCodec.decode`` costs a typical ``memory-learn`` line (440 bytes: a 64-hex key, a text,
tags, metadata), in process time (``getrusage``, the minimum of ``R`` passes over ``N`` lines).
Under ``valgrind --tool=callgrind``, run once with and once with ``--no-decode``: the difference
over ``N`` is the instructions a line costs.
"""

from __future__ import annotations

import argparse
import hashlib
import resource

from journal import Record, RecordCodec


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def lines(count: int) -> list[bytes]:
    """``count`` encoded lines of a typical learned finding's record."""
    codec = RecordCodec("r", "memory-learn")
    out = []
    for i in range(count):
        key = hashlib.sha256(str(i).encode()).hexdigest()
        rid = hashlib.blake2b(str(i).encode(), digest_size=8).hexdigest()
        text = "a finding about the market " * 8
        payload = {"memory": key[:16], "text": text, "tags": ["x", "y"], "meta": {"n": i}}
        out.append(codec.encode(Record("r", "memory-learn", i + 1, rid, key, 1796214467900 + i, payload)))
    return out


def main(argv: list[str] | None = None) -> int:
    """Decode the lines ``rounds`` times; print the best per-line process time."""
    ap = argparse.ArgumentParser(prog="decode_lines", description=__doc__)
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--no-decode", action="store_true", help="build the lines only (callgrind's baseline)")
    args = ap.parse_args(argv)
    data = lines(args.lines)
    if args.no_decode:
        return 0
    decode = RecordCodec("r", "memory-learn").decode
    best = float("inf")
    for _ in range(args.rounds):
        start = _cpu()
        for line in data:
            decode(line)
        best = min(best, _cpu() - start)
    print(f"{best / len(data) * 1e6:.3f} µs a line")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
