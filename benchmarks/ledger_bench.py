"""Cadence lookup on a 1,000,000-entry agent ledger (SPEC R-A4, R-A8).

Builds the ledger in a temporary directory (a confirmed swap every 288 entries, i.e. a daily DCA
agent ticking every 5 minutes, with the last confirmed act 100 entries from the end), then times
``Ledger.last_confirmed()`` the way a fresh tick process calls it:

* with a valid snapshot (``.sail/memory/state.json``): O(1), two 4 KiB reads and a hash;
* after the snapshot is deleted: the ledger's tail read backwards to the newest confirmed act,
  plus writing the rebuilt snapshot (stage, fsync, rename, fsync the directory);
* a full rescan (``Ledger.entries()``: every line decoded and validated), for comparison;
* one append as a fresh tick process makes it (lock, ``LineLog.recover``, append, snapshot).

Run: ``python -m benchmarks.ledger_bench [--entries N]`` (or as part of ``python -m benchmarks``).
Figures are medians of several runs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from memory.ledger import Acted, Amount, Ledger, LedgerCodec, Outcome, Skipped, cadence_reason

TOKEN_IN, TOKEN_OUT = "0x" + "1a" * 20, "0x" + "2b" * 20


def entry(i: int, *, act_every: int, last_act: int) -> Acted | Skipped:
    ts = 1_750_000_000 + 300 * i
    if i % act_every == 0 or i == last_act:
        return Acted(
            ts=ts, block=i, chain_id=8453, action="swap", permission="0xSwapPermission",
            outcome=Outcome.CONFIRMED, tx_hash=f"0x{i:064x}", gas_used=142013, token_in=TOKEN_IN,
            token_out=TOKEN_OUT, amount_in=Amount.of(25_000_000, 6, "USDC"),
            amount_out=Amount.of(9_821_340_000_000_000, 18, "WETH"),
            balances_after={TOKEN_IN: 475_000_000, TOKEN_OUT: 104_213_340_000_000_000},
        )  # fmt: skip
    return Skipped(ts=ts, block=i, chain_id=8453, reason=cadence_reason(300 * (i % act_every), 86400))


def build(sail_dir: Path, n: int) -> Path:
    """Write an n-entry ledger in bulk (the same bytes n appends would leave)."""
    codec = LedgerCodec()
    path = Ledger(sail_dir).path
    path.parent.mkdir(parents=True)
    last_act = n - 100
    with path.open("wb") as f:
        batch: list[bytes] = []
        for i in range(n):
            batch.append(codec.encode(entry(i, act_every=288, last_act=last_act)))
            if len(batch) == 10_000:
                f.write(b"\n".join(batch) + b"\n")
                batch.clear()
        if batch:
            f.write(b"\n".join(batch) + b"\n")
    return path


def timed(fn: Callable[[], object], runs: int, before: Callable[[], object] = lambda: None) -> float:
    """Median wall time of ``fn`` in milliseconds, ``before`` run untimed ahead of each call."""
    samples = []
    for _ in range(runs):
        before()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def measure(base: Path, entries: int, runs: int) -> dict[str, float]:
    """Build an ``entries``-entry ledger under ``base`` and return the figures (ms, MiB, s)."""
    sail_dir = base / ".sail"
    start = time.perf_counter()
    path = build(sail_dir, entries)
    built_s = time.perf_counter() - start
    expected = Ledger(sail_dir).last_confirmed()  # also writes the snapshot
    newest = max(entries - 100, (entries - 1) // 288 * 288)
    assert expected is not None and expected.block == newest
    snapshot = Ledger(sail_dir).snapshot_path

    def lookup() -> None:
        assert Ledger(sail_dir).last_confirmed() == expected  # a fresh Ledger, as a fresh process

    return {
        "built_s": built_s,
        "size_mib": path.stat().st_size / 2**20,
        "with_snapshot_ms": timed(lookup, runs),
        "without_snapshot_ms": timed(lookup, runs, before=lambda: snapshot.unlink(missing_ok=True)),
        "rescan_ms": timed(lambda: Ledger(sail_dir).entries(), 1),
    }


def main() -> None:
    """Build the ledger and print the three figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        m = measure(Path(tmp), args.entries, args.runs)
        print(f"built {args.entries:,} entries ({m['size_mib']:.0f} MiB) in {m['built_s']:.1f} s")
        print(
            f"cadence lookup, valid snapshot:            {m['with_snapshot_ms']:8.3f} ms"
            f" (median of {args.runs})"
        )
        print(
            f"cadence lookup, snapshot deleted (tail):   {m['without_snapshot_ms']:8.3f} ms"
            " (median; includes rewriting it)"
        )
        print(f"full rescan (decode + validate every line): {m['rescan_ms']:8.0f} ms")


if __name__ == "__main__":
    main()
