"""The agent on a 1,000,000-line ledger against a 10-line one: ``tick``, ``status`` and ``why``.

Builds, in a temporary directory, the ``.sail`` of an agent that has ticked N times (a daily DCA
agent ticking every 5 minutes: a confirmed swap every 288 ticks, the last one 100 ticks before the
end) — its ledger and the activity log of the same ticks (``tick_started``/``tick_finished`` for
each, the signed/submitted/executed records of each swap) — once with N = 1,000,000 and once with
N = 10. The lines are written in bulk: one line of each kind is encoded with the ledger's and the
activity log's own codecs, and the numbers that differ from line to line are substituted into it
(a sample of the result is decoded back with the codecs, so a mistake cannot go unnoticed).

Then, each as a fresh process would (new objects, nothing cached in memory), median of several runs:

* **tick** — ``sail tick`` as the command runs it (recorded start and outcome, the ledger's lock,
  reconcile, the last confirmed act, decide) on the in-process EVM; the decision is a cadence skip,
  so the chain answers only the head and the chain id;
* **status** — ``sail status`` (``sail._status.agent_status``);
* **why** — ``sail why`` (the 10 most recent skips);
* **journal** — ``sail journal --days 1 --json``: the narrative of the last UTC day (``last_days``,
  ``narrate``, ``as_json``), every sentence citing its lines by number and digest; and the same on
  a third agent whose ledger is that last day alone (its lines copied, so the same narrative work
  over a short file): the large ledger's last day holds a day of ticks, the 10-line one ten, so the
  first ratio measures the day's length as much as the ledger's, the second the ledger's alone;
* the last confirmed act with the snapshot (``Ledger.last_confirmed()``), and without it (a rebuild
  from both files, then written), and a full rescan (``Ledger.entries()``), on the large ledger.

The ratios large / small are the goals (``python -m benchmarks``: at most 1.5).
Run alone: ``python -m benchmarks.ledger_bench [--entries N] [--runs R]``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memory.ledger import (
    Acted,
    ActivityCodec,
    ActivityLog,
    Amount,
    DispatchSettled,
    DispatchSigned,
    DispatchSubmitted,
    Ledger,
    LedgerCodec,
    Outcome,
    Skipped,
    TickFinished,
    TickStarted,
    TokenMetadata,
    cadence_reason,
)

TOKEN_IN, TOKEN_OUT, ROUTER = "0x" + "1a" * 20, "0x" + "2b" * 20, "0x" + "3c" * 20
AGENT_KEY = "0x" + "00" * 31 + "02"  # eth-tester's second funded account
T0 = 1_750_000_000
TICK_S = 300
ACT_EVERY = 288
INTERVAL = 86_400
SMALL = 10
MIN_ROUNDS = 3
#: sentinels the templates carry where a line's numbers go
_TS, _BLOCK, _HASH, _AGO = 1_999_999_991, 1_999_999_992, 0xE1E1E1E1E1E1E1E1E1E1E1E1, 1_999_999_993


def _templates() -> dict[str, bytes]:
    """One line of each kind, encoded by the codecs, with ``%(name)d``/``%(hash)s`` slots."""
    ledger, activity = LedgerCodec(), ActivityCodec()
    tx = f"0x{_HASH:064x}"
    act = Acted(
        ts=_TS, block=_BLOCK, chain_id=8453, action="swap", permission="0xSwapPermission",
        outcome=Outcome.CONFIRMED, tx_hash=tx, gas_used=142013, token_in=TOKEN_IN, token_out=TOKEN_OUT,
        amount_in=Amount.of(25_000_000, 6, "USDC"), amount_out=Amount.of(9_821_340_000_000_000, 18, "WETH"),
        balances_after={TOKEN_IN: 475_000_000, TOKEN_OUT: 104_213_340_000_000_000},
    )  # fmt: skip
    dispatch = {
        "ts": _TS,
        "chain_id": 8453,
        "tx_hash": tx,
        "sender": TOKEN_IN,
        "to": ROUTER,
        "data": "0x38ed1739",
    }
    reason = cadence_reason(_AGO, INTERVAL)
    lines = {
        "skip": ledger.encode(Skipped(ts=_TS, block=_BLOCK, chain_id=8453, reason=reason)),
        "act": ledger.encode(act),
        "started": activity.encode(TickStarted(ts=_TS, pid=4242)),
        "skipped": activity.encode(TickFinished(ts=_TS, pid=4242, outcome="skipped", reason=reason)),
        "submitted": activity.encode(TickFinished(ts=_TS, pid=4242, outcome="submitted", tx_hash=tx)),
        "signed": activity.encode(
            DispatchSigned(**dispatch, nonce=_BLOCK, action="swap", permission="0xSwapPermission")  # type: ignore[arg-type]
        ),
        "sent": activity.encode(DispatchSubmitted(**dispatch, action="swap", permission="0xSwapPermission")),  # type: ignore[arg-type]
        "executed": activity.encode(DispatchSettled(_TS, "dispatch_executed", tx, _BLOCK, 142013)),
        "token": activity.encode(TokenMetadata(ts=_TS, token=TOKEN_IN, decimals=6, symbol="USDC")),
    }
    out = {}
    for name, line in lines.items():
        text = line.replace(b"%", b"%%").replace(str(_TS).encode(), b"%(ts)d")
        text = text.replace(str(_BLOCK).encode(), b"%(block)d").replace(str(_AGO).encode(), b"%(ago)d")
        out[name] = text.replace(f"{_HASH:064x}".encode(), b"%(hash)s")
    return out


def build(sail_dir: Path, n: int) -> None:
    """Write the ledger and the activity log of ``n`` ticks in bulk (see the module docstring)."""
    t = _templates()
    ledger_path, activity_path = Ledger(sail_dir).path, ActivityLog(sail_dir).path
    ledger_path.parent.mkdir(parents=True)
    last_act = max(0, n - 100)
    with ledger_path.open("wb") as ledger, activity_path.open("wb") as activity:
        led: list[bytes] = []
        act: list[bytes] = [t["token"] % {b"ts": T0}]
        for i in range(n):
            ts = T0 + TICK_S * i
            values = {b"ts": ts, b"block": i, b"ago": TICK_S * (i % ACT_EVERY), b"hash": b"%064x" % (i + 1)}
            act.append(t["started"] % values)
            if i % ACT_EVERY == 0 or i == last_act:
                act += [
                    t["signed"] % values,
                    t["sent"] % values,
                    t["executed"] % values,
                    t["submitted"] % values,
                ]
                led.append(t["act"] % values)
            else:
                act.append(t["skipped"] % values)
                led.append(t["skip"] % values)
            if len(led) >= 20_000:
                ledger.write(b"\n".join(led) + b"\n")
                activity.write(b"\n".join(act) + b"\n")
                led.clear()
                act.clear()
        if led:
            ledger.write(b"\n".join(led) + b"\n")
        if act:
            activity.write(b"\n".join(act) + b"\n")
    _check_sample(ledger_path, LedgerCodec())
    _check_sample(activity_path, ActivityCodec())


def _check_sample(path: Path, codec: LedgerCodec | ActivityCodec) -> None:
    with path.open("rb") as f:
        head = f.read(1 << 16).split(b"\n")[:-1]
        f.seek(max(0, path.stat().st_size - (1 << 16)))
        tail = f.read().split(b"\n")[1:-1]
    for line in head + tail:
        codec.decode(line)  # raises LineDamaged if a template went wrong


def timed(fn: Callable[[], object], runs: int, before: Callable[[], object] = lambda: None) -> float:
    """Median wall time of ``fn`` in milliseconds, ``before`` run untimed ahead of each call."""
    samples = []
    for _ in range(runs):
        before()
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


class _Agent:
    """One agent directory and what a fresh ``sail`` process would build to tick or read it."""

    def __init__(self, base: Path, n: int, chain: Any) -> None:
        from sail._config import SailConfig

        self.home = base
        self.sail_dir = base / ".sail"
        build(self.sail_dir, n)
        self.now = T0 + TICK_S * n
        self.chain = chain
        self.config = SailConfig(
            rpc_url="http://127.0.0.1:9", router=ROUTER, token_in=TOKEN_IN, token_out=TOKEN_OUT,
            amount_in=25_000_000, interval_s=INTERVAL, min_balance=25_000_000,
        )  # fmt: skip

    @classmethod
    def day_alone(cls, base: Path, large: _Agent) -> _Agent:
        """An agent whose ledger is ``large``'s last UTC day alone (the lines copied as they are)."""
        from memory.ledger import last_days

        since = last_days(Ledger(large.sail_dir), 1)
        assert since is not None
        lines = [raw for _, _, entry, raw in _tail_lines(large.sail_dir) if entry.ts >= since - 7200]
        sail_dir = base / ".sail"
        Ledger(sail_dir).path.parent.mkdir(parents=True)
        Ledger(sail_dir).path.write_bytes(b"".join(raw + b"\n" for raw in reversed(lines)))
        ActivityLog(sail_dir).path.write_bytes(_templates()["token"] % {b"ts": T0} + b"\n")
        day = cls.__new__(cls)
        day.home, day.sail_dir, day.now, day.chain, day.config = base, sail_dir, large.now, None, large.config
        Ledger(sail_dir).state()
        return day

    def tick(self) -> None:
        """``sail tick``: record the start, tick, record the outcome (fresh objects each time)."""
        from eth_account import Account

        from sail._runner import Runner
        from sail._tick import dca_strategy, tick
        from sail._ticklog import TickRecorder

        self.now += TICK_S
        clock = float(self.now).__float__
        recorder = TickRecorder(self.sail_dir, clock)
        recorder.started()
        runner = Runner(self.chain, Account.from_key(AGENT_KEY), ActivityLog(self.sail_dir), clock=clock)
        result = tick(
            self.sail_dir, strategy=dca_strategy(self.config), chain=self.chain, runner=runner, clock=clock
        )
        assert result.skipped is not None and result.skipped.reason.startswith("cadence: "), result
        recorder.skipped(result.skipped.reason)

    def status(self) -> None:
        from sail._status import agent_status

        assert agent_status(self.home, self.config)["lastConfirmed"] is not None

    def journal(self) -> None:
        from memory.ledger import last_days, narrate

        ledger = Ledger(self.sail_dir)
        told = narrate(
            ledger,
            token_in=TOKEN_IN,
            interval_s=INTERVAL,
            since=last_days(ledger, 1),
        ).as_json()
        assert told["days"] and told["days"][-1]["sentences"]

    def why(self) -> None:
        from memory.ledger import recent_skips

        assert len(recent_skips(Ledger(self.sail_dir), 10)) == 10


def _tail_lines(sail_dir: Path) -> list[tuple[int, str, Any, bytes]]:
    """The ledger's last 2,000 lines, newest first, as ``(offset, "", entry, raw)``."""
    codec = LedgerCodec()
    data = Ledger(sail_dir).path.read_bytes()
    start = max(0, len(data) - 2000 * 400)
    raws = data[start:].split(b"\n")[(1 if start else 0) : -1]
    return [(0, "", codec.decode(raw), raw) for raw in reversed(raws)]


def _ms(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def measure(
    base: Path, entries: int, runs: int, *, budget_s: float = 90.0
) -> tuple[dict[str, float], dict[str, list[float]]]:
    """Build a large (``entries``) and a small (10-line) agent under ``base``.

    Returns the figures (medians, ms) and, for tick/status/why, the samples of each round: a round
    runs the large and the small agent back to back, so a ratio can pair them under one weather.
    Rounds stop at ``runs``, or once ``budget_s`` has passed after at least ``MIN_ROUNDS``.
    """
    from web3 import EthereumTesterProvider, Web3

    from sail._chain import Chain

    chain = Chain(Web3(EthereumTesterProvider()))
    start = time.perf_counter()
    large = _Agent(base / "large", entries, chain)
    built_s = time.perf_counter() - start
    small = _Agent(base / "small", SMALL, chain)
    out: dict[str, float] = {
        "built_s": built_s,
        "size_mib": (Ledger(large.sail_dir).path.stat().st_size) / 2**20,
        "activity_mib": (ActivityLog(large.sail_dir).path.stat().st_size) / 2**20,
    }
    for agent in (large, small):  # the first reads build the snapshots (untimed)
        agent.tick()
        agent.status()
    day = _Agent.day_alone(base / "day", large)
    out["journal_day_lines"] = float(Ledger(day.sail_dir).path.read_bytes().count(b"\n"))
    rounds: dict[str, list[float]] = {}
    deadline = time.monotonic() + budget_s
    for n in range(runs):
        if n >= MIN_ROUNDS and time.monotonic() > deadline:
            break  # a slow machine (or a line log that reads every line) keeps the run short
        for what in ("tick", "status", "why", "journal"):
            for name, agent in (("large", large), ("small", small)):
                rounds.setdefault(f"{what}_{name}_ms", []).append(_ms(getattr(agent, what)))
        rounds.setdefault("journal_day_ms", []).append(_ms(day.journal))
    out.update({name: statistics.median(samples) for name, samples in rounds.items()})
    ledger = Ledger(large.sail_dir)
    expected = ledger.last_confirmed()
    assert expected is not None

    def lookup() -> None:
        assert Ledger(large.sail_dir).last_confirmed() == expected  # a fresh Ledger, as a fresh process

    out["with_snapshot_ms"] = timed(lookup, runs)
    out["without_snapshot_ms"] = timed(lookup, 1, before=lambda: ledger.snapshot_path.unlink(missing_ok=True))
    out["rescan_ms"] = timed(lambda: Ledger(large.sail_dir).entries(), 1)
    return out, rounds


def ratio(rounds: dict[str, list[float]], what: str) -> float:
    """The median over rounds of large / small for ``what`` (tick, status, why or journal)."""
    pairs = zip(rounds[f"{what}_large_ms"], rounds[f"{what}_small_ms"], strict=True)
    return statistics.median(large / small for large, small in pairs)


def day_ratio(rounds: dict[str, list[float]]) -> float:
    """The median over rounds of the journal on the large ledger / on its last day alone."""
    pairs = zip(rounds["journal_large_ms"], rounds["journal_day_ms"], strict=True)
    return statistics.median(large / day for large, day in pairs)


def main() -> None:
    """Build both agents and print the figures."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        m, rounds = measure(Path(tmp), args.entries, args.runs)
    print(
        f"built {args.entries:,} ticks (ledger {m['size_mib']:.0f} MiB, activity {m['activity_mib']:.0f} MiB)"
        f" in {m['built_s']:.1f} s; medians of {args.runs}"
    )
    for what in ("tick", "status", "why", "journal"):
        large, small = m[f"{what}_large_ms"], m[f"{what}_small_ms"]
        print(
            f"{what:<7} {args.entries:>9,} lines {large:9.2f} ms   {SMALL} lines {small:8.2f} ms"
            f"   ratio {ratio(rounds, what):.2f}"
        )
    lines = int(m["journal_day_lines"])
    print(
        f"journal {args.entries:>9,} lines {m['journal_large_ms']:9.2f} ms   the last day alone"
        f" ({lines} lines) {m['journal_day_ms']:8.2f} ms   ratio {day_ratio(rounds):.2f}"
    )
    print(f"last confirmed act, valid snapshot:   {m['with_snapshot_ms']:9.3f} ms")
    print(f"  snapshot deleted (rebuild + write): {m['without_snapshot_ms']:9.0f} ms")
    print(f"  full rescan (every line decoded):   {m['rescan_ms']:9.0f} ms")


if __name__ == "__main__":
    main()
