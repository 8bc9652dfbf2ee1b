"""``python -m tests.reliability [--quick]``: run every scenario and print one table.

``--quick`` is the CI size (a few minutes at most); without it the run is longer and meant to be
run by hand (its table is in docs/RELIABILITY.md). Exit status 1 when any scenario lost, doubled or
fabricated a write or hit an unexpected error.
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.reliability import failpoints, powerloss, soak
from tests.reliability.tally import Tally, table


def scenarios(quick: bool) -> list[Tally]:
    """Run every scenario at the chosen size; return their tallies in table order."""
    out: list[Tally] = []
    if quick:
        out += powerloss.run_exhaustive(3)
        out.append(powerloss.run_covering(1))
        out.append(powerloss.run_random(states=1000, length=8))
        out.append(failpoints.run_sweep(failpoints.FAULTS_QUICK))
        out.append(soak.run_soak(seconds=20, stores=2, per_store=2))
    else:
        out += powerloss.run_exhaustive(
            3, alphabets={"findings": ("L1", "L2", "L3", "R")}, kinds=("findings",)
        )
        out += powerloss.run_exhaustive(4, kinds=("ledger",))
        out.append(powerloss.run_covering(2))
        out.append(powerloss.run_random(states=10_000, length=12))
        out.append(failpoints.run_sweep(failpoints.FAULTS_FULL))
        out.append(soak.run_soak(seconds=120, stores=3, per_store=3))
    return out


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments, run, print the table (and the first failures); return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m tests.reliability", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="the CI size")
    args = parser.parse_args(argv)
    started = time.monotonic()
    tallies = scenarios(args.quick)
    print(table(tallies))
    print(f"\n({time.monotonic() - started:.0f} s)")
    replay = powerloss.run_ledger_replay(2)
    print(
        "\nOutside the model, a measured limit of the ledger's bare line format (no sequence, no checksum): "
        f"replaying stale copies of earlier lines into unsynced ledger appends, {replay.cases} states: "
        f"{replay.doubled} doubled, {replay.unexpected} failed closed, {replay.lost} lost."
    )
    failed = [t for t in tallies if not t.clean]
    for t in failed:
        print(f"\n{t.scenario}:", *t.notes, sep="\n  ", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
