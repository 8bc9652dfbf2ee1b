"""``python -m benchmarks.group_ab [--blocks B] [--per-block K] [--dir DISK]``: what the size of the
group of learned names that one ``syncfs`` makes durable is worth, measured in one process.

Blocks of ``K`` learns alternate between the group as it was (``NAMES_GROUP`` 128 names,
``NAMES_WAIT_S`` 100 ms) and the present one (1,024 names, 1 s), on one store and one root run, so
both see the same disk at the same minutes; each block starts with every waiting name flushed. A
``syncfs`` writes back every dirty page of the file system, other programs' too, so on a shared disk
it costs several milliseconds. Prints each kind's median rate and the median of the per-pair ratios.
"""

from __future__ import annotations

import shutil
import tempfile

import memory._publisher as publisher
from benchmarks._common import learn_blocks, paired_parser, print_paired


def main(argv: list[str] | None = None) -> int:
    """Run the paired blocks and print the figures."""
    ap = paired_parser("group_ab", __doc__, blocks=24, per_block=300)
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="flows-group-ab-", dir=args.dir)
    present = (publisher.NAMES_GROUP, publisher.NAMES_WAIT_S)
    kinds = {"128 names or 100 ms": (128, 0.1), f"{present[0]} names or {present[1]:g} s": present}

    def switch(kind: str) -> None:
        publisher.NAMES_GROUP, publisher.NAMES_WAIT_S = kinds[kind]

    try:
        rates = learn_blocks(base, "group-ab", list(kinds), args.blocks, args.per_block, switch=switch)
    finally:
        publisher.NAMES_GROUP, publisher.NAMES_WAIT_S = present
        shutil.rmtree(base, ignore_errors=True)
    print_paired(rates, "present / before")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
