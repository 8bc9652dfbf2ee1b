"""The ``sail`` command line: init, tick, ledger, why, status, demo.

Exit 0 on success, 1 when the command failed (one line on stderr:
``sail: error[<code>]: <message>``), 2 on usage errors (argparse). Listing commands take ``--json``
and print a JSON array whose objects have the files' camelCase keys.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from journal import JournalError
from memory.ledger import Acted, ActivityLog, Entry, Ledger, LedgerError, Skipped
from sail._config import SailConfig, load_config, sail_dir, save_config
from sail._errors import SailError, SailKeyUnavailable
from staging import StagingError

_ERRORS = (SailError, LedgerError, JournalError, StagingError)


def _home(args: argparse.Namespace) -> Path:
    return Path(args.home or os.environ.get("SAIL_HOME") or Path.cwd())


def _dump(value: object) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def _when(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _describe(entry: Entry) -> str:
    head = f"{_when(entry.ts)}  block {entry.block if entry.block is not None else '-'}  {entry.kind:<7}"
    if isinstance(entry, Skipped):
        return f"{head}  {entry.reason}"
    amount_in = entry.amount_in.human if entry.amount_in else "?"
    amount_out = entry.amount_out.human if entry.amount_out else "-"
    return f"{head}  {entry.outcome:<10} {entry.action} {amount_in} -> {amount_out}  tx {entry.tx_hash}"


# -- commands ------------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    """Write ``.sail/config.toml``."""
    config = SailConfig(
        rpc_url=args.rpc,
        router=args.router,
        token_in=args.token_in,
        token_out=args.token_out,
        amount_in=args.amount,
        interval_s=args.interval,
        min_balance=args.min_balance,
        slippage_bps=args.slippage_bps,
        permission=args.permission,
        key_env=args.key_env,
        keystore=args.keystore,
    )
    path = save_config(_home(args), config)
    print(f"wrote {path}")
    return 0


def cmd_tick(args: argparse.Namespace) -> int:
    """One tick, in this (fresh) process."""
    home = _home(args)
    config = load_config(home)
    if config.keystore is None and not os.environ.get(config.key_env):
        # said before web3 is imported (seconds on a small machine): the commonest setup mistake
        raise SailKeyUnavailable(
            f"no signing key: set ${config.key_env} to the agent's private key, or `keystore` in "
            ".sail/config.toml"
        )
    clock = (lambda: float(args.now)) if args.now is not None else time.time
    from sail._tick import tick_from_config  # web3 is imported only by commands that use the chain

    result = tick_from_config(home, config, clock=clock)
    summary: dict[str, Any] = {
        "reconciled": [e.to_wire() for e in result.reconciled],
        "skipped": None if result.skipped is None else result.skipped.reason,
        "submitted": None if result.dispatched is None else result.dispatched.tx_hash,
    }
    if args.json:
        _dump(summary)
        return 0
    for entry in result.reconciled:
        print(f"reconciled: {_describe(entry)}")
    if result.skipped is not None:
        print(f"skipped: {result.skipped.reason}")
    if result.dispatched is not None:
        settled = result.dispatched.settled
        seen = "receipt not seen yet" if settled is None else settled.event
        print(f"submitted: {result.dispatched.tx_hash} ({seen}; ledgered by a later tick)")
    return 0


def _selected(args: argparse.Namespace) -> list[Entry]:
    entries = Ledger(sail_dir(_home(args))).entries()
    if args.kind:
        entries = [e for e in entries if e.kind == args.kind]
    if args.since is not None:
        entries = [e for e in entries if e.ts >= args.since]
    return entries


def cmd_ledger(args: argparse.Namespace) -> int:
    """What has my agent actually done: the ledger, oldest first."""
    entries = _selected(args)
    if args.json:
        _dump([e.to_wire() for e in entries])
    else:
        for entry in entries:
            print(_describe(entry))
    return 0


def cmd_why(args: argparse.Namespace) -> int:
    """Why did it skip: the most recent skips, newest first, with their reasons."""
    skips: list[Skipped] = []
    for entry in Ledger(sail_dir(_home(args))).iter_reverse():
        if isinstance(entry, Skipped):
            skips.append(entry)
            if len(skips) >= args.limit:
                break
    if args.json:
        _dump([s.to_wire() for s in skips])
    elif not skips:
        print("no skips recorded")
    else:
        for skip in skips:
            print(f"{_when(skip.ts)}  block {skip.block}  {skip.reason}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Does it remember its last trade: last confirmed act, next eligible time, open dispatches."""
    home = _home(args)
    config = load_config(home)
    ledger = Ledger(sail_dir(home))
    last = ledger.last_confirmed()
    ledgered = {e.tx_hash.lower() for e in ledger.entries() if isinstance(e, Acted) and e.is_final}
    open_dispatches = [
        d.tx_hash for d in ActivityLog(sail_dir(home)).submitted() if d.tx_hash.lower() not in ledgered
    ]
    status = {
        "lastConfirmed": None
        if last is None
        else {"ts": last.ts, "block": last.block, "txHash": last.tx_hash},
        "intervalS": config.interval_s,
        "nextEligibleTs": None if last is None else last.ts + config.interval_s,
        "openDispatches": open_dispatches,
        "ledger": str(ledger.path),
    }
    if args.json:
        _dump(status)
        return 0
    if last is None:
        print("last confirmed act: none; eligible now (subject to balance, allowance and quote)")
    else:
        print(f"last confirmed act: {_when(last.ts)} block {last.block} tx {last.tx_hash}")
        print(f"next eligible: {_when(last.ts + config.interval_s)} (interval {config.interval_s}s)")
    print(f"dispatches awaiting reconcile: {len(open_dispatches)}")
    print(f"ledger: {ledger.path}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Deploy the contracts on a local anvil and run ticks as fresh processes."""
    from sail._demo import run_demo

    return run_demo(Path(args.home), out=sys.stdout)


# -- parser --------------------------------------------------------------------------------------


def _address(value: str) -> str:
    if not (value.startswith("0x") and len(value) == 42):
        raise argparse.ArgumentTypeError(f"not a 0x address: {value!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``sail`` (every command has help)."""
    parser = argparse.ArgumentParser(prog="sail", description="An agent that remembers what it did.")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--home", help="the agent's home (holds .sail/); default $SAIL_HOME or the cwd")
        return p

    p = command("init", "write .sail/config.toml")
    p.add_argument("--rpc", required=True, help="the chain's JSON-RPC URL")
    p.add_argument("--router", required=True, type=_address, help="the swap router's address")
    p.add_argument("--token-in", required=True, type=_address, help="the stable token spent")
    p.add_argument("--token-out", required=True, type=_address, help="the token bought (e.g. WETH)")
    p.add_argument("--amount", required=True, type=int, help="base units of token-in per swap")
    p.add_argument("--interval", required=True, type=int, help="seconds between confirmed swaps")
    p.add_argument("--min-balance", required=True, type=int, help="skip below this token-in balance")
    p.add_argument("--slippage-bps", type=int, default=50, help="quote tolerance (default 50)")
    p.add_argument("--permission", help="the protocol permission id dispatches carry")
    p.add_argument("--key-env", default="SAIL_PRIVATE_KEY", help="env var holding the signing key")
    p.add_argument("--keystore", help="encrypted keystore file (password in $SAIL_KEYSTORE_PASSWORD)")
    p.set_defaults(run=cmd_init)

    p = command("tick", "run one tick: reconcile, read memory, decide, skip or submit")
    p.add_argument("--now", type=int, help="the tick's clock, unix seconds (default: the system clock)")
    p.add_argument("--json", action="store_true", help="print the outcome as JSON")
    p.set_defaults(run=cmd_tick)

    p = command("ledger", "what has my agent actually done")
    p.add_argument("--json", action="store_true", help="a JSON array of the ledger's entries")
    p.add_argument("--kind", choices=("acted", "skipped"), help="only entries of this kind")
    p.add_argument("--since", type=int, metavar="TS", help="only entries at or after unix seconds TS")
    p.set_defaults(run=cmd_ledger)

    p = command("why", "why did it skip: recent skips with their reasons")
    p.add_argument("--limit", type=int, default=10, help="how many (default 10)")
    p.add_argument("--json", action="store_true", help="a JSON array of skipped entries")
    p.set_defaults(run=cmd_why)

    p = command("status", "does it remember its last trade")
    p.add_argument("--json", action="store_true", help="a JSON object")
    p.set_defaults(run=cmd_status)

    p = command("demo", "deploy the contracts on a local chain and run ticks as fresh processes")
    p.set_defaults(run=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sail`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "demo" and not args.home:
        build_parser().error("demo needs --home DIR")
    try:
        status: int = args.run(args)
    except _ERRORS as exc:
        code = getattr(exc, "code", "error")
        print(f"sail: error[{code}]: {exc}", file=sys.stderr)
        return 1
    return status
