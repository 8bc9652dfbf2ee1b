"""The ``sail`` command line: init, tick, ledger, why, status, ack-reorg, journal, demo.

The conventions (global options before or after the command, diagnostics, exit statuses, Ctrl-C, a
closed pipe, ``--version``, completion) are ``memory.cli``'s, shared with ``flows``. Listing commands'
``--json`` prints a JSON array whose objects have the files' camelCase keys: a ledger entry as its
line in the file (``ts`` in unix seconds, by the ledger's schema); every other time is epoch
milliseconds in a key ending in ``Ms``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from memory.cli import (
    INT64_MAX,
    LIMIT_MAX,
    CommandLine,
    Option,
    UsageError,
    db_path,
    instant_ms,
    journal_location,
    json_out,
    limit,
    progress,
    shown,
    stdout_to_stderr,
)
from memory.ledger import (
    MAX_DAYS,
    MAX_SHOWN_CHARS,
    Acted,
    ActivityLog,
    Entry,
    Ledger,
    Skipped,
    acknowledge_reorg,
    fit_copy,
    fit_json,
    held_reorg,
    last_days,
    learned_tokens,
    narrate,
    recent_skips,
)
from sail._config import EMBEDDED, SailConfig, config_path, load_config, sail_dir, save_config
from sail._errors import SailConfigInvalid, SailKeyUnavailable
from sail._extra import import_chain_module
from sail._status import (
    NOTE_EVENTS,
    agent_status,
    ahead,
    chain_ahead_line,
    format_status,
    ledger_rows,
    renderer,
    when,
)
from sail._ticklog import TickRecorder

if TYPE_CHECKING:
    from sail._tick import TickResult

_RPC_REQUIRED = ("router", "token_in", "token_out", "amount", "interval", "min_balance")


def _say(text: object = "") -> None:
    """Print one line of human output, its control characters escaped (``shown``), newlines too:
    what a ledger, an activity log or the chain says is data, never instructions to the terminal
    and never a line of its own (a tick's recorded message could otherwise forge one). A line longer
    than ``MAX_SHOWN_CHARS`` (a crafted or older ledger's text of megabytes) is cut, its SHA-256 kept."""
    print(fit_copy(shown(str(text), one_line=True), MAX_SHOWN_CHARS))


def _dump(obj: object, file: TextIO | None = None) -> None:
    """Print ``obj`` as JSON, every string in it cut to ``MAX_SHOWN_CHARS`` (``fit_json``)."""
    json_out(fit_json(obj), file)


def _home(args: argparse.Namespace) -> Path:
    return _usable_home(Path(args.home or os.environ.get("SAIL_HOME") or Path.cwd()))


def _usable_home(home: Path) -> Path:
    """``home`` when a command can use it: a folder, or nothing yet (``init`` and ``demo`` make it).

    Raises:
        SailConfigInvalid: it is a file, or a path the OS refuses (a name too long, a file on the way).
    """
    try:
        mode = os.stat(home).st_mode
    except FileNotFoundError:
        return home
    except OSError as exc:
        raise SailConfigInvalid(
            f"the agent home {home} cannot be used: {exc.strerror or exc}; give --home (or $SAIL_HOME) "
            "a folder",
            path=home,
        ) from exc
    if not stat.S_ISDIR(mode):
        raise SailConfigInvalid(
            f"the agent home {home} is not a folder; give --home (or $SAIL_HOME) the folder that holds "
            "(or is to hold) .sail/",
            path=home,
        )
    return home


def _agent(args: argparse.Namespace) -> tuple[Path, SailConfig]:
    """The agent's home and its config: every command but ``init`` and ``demo`` needs both, so a
    mistyped ``--home`` is ``sail_config_missing`` naming the path, never an empty answer.

    Raises:
        SailConfigMissing: the home has no ``.sail/config.toml``.
        SailConfigInvalid: the config cannot be read or is ill-formed.
    """
    home = _home(args)
    return home, load_config(home)




def _describe(entry: Entry) -> str:
    head = f"{when(entry.ts)}  block {entry.block if entry.block is not None else '-'}  {entry.kind:<7}"
    if isinstance(entry, Skipped):
        return f"{head}  {entry.reason}"
    amount_in = entry.amount_in.human if entry.amount_in else "?"
    amount_out = entry.amount_out.human if entry.amount_out else "-"
    return f"{head}  {entry.outcome:<10} {entry.action} {amount_in} -> {amount_out}  tx {entry.tx_hash}"


# -- commands ------------------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    """Write ``.sail/config.toml`` (with ``--embedded``, deploy the demo market on the embedded chain)."""
    home = _home(args)
    config = _init_usage(args)  # every value checked before anything is deployed or written
    if args.embedded:
        init_embedded = import_chain_module("sail._demo").init_embedded
        ANVIL_KEYS = import_chain_module("sail._node").ANVIL_KEYS

        with _quiet_stdout(args) as out:  # --json: whatever the chain's setup prints goes to stderr
            init_embedded(
                home,
                amount_in=config.amount_in,
                interval_s=config.interval_s,
                min_balance=config.min_balance,
                permission=config.permission,
            )
            chain = sail_dir(home) / "chain"
            if args.json:  # anvil's dev key 1 is public: printing it gives nothing away
                _dump({"config": str(config_path(home)), "chain": str(chain), "agentKey": ANVIL_KEYS[1]}, out)
                return 0
        _say(f"wrote {config_path(home)} (embedded chain in {chain})")
        _say(f"the agent is anvil's public dev account 1: export SAIL_PRIVATE_KEY={ANVIL_KEYS[1]}")
        return 0
    written = save_config(home, config)
    if args.json:
        _dump({"config": str(written), "chain": None, "agentKey": None})
    else:
        _say(f"wrote {written}")
    return 0


@contextlib.contextmanager
def _quiet_stdout(args: argparse.Namespace) -> Iterator[TextIO]:
    """With ``--json``, send everything but the command's own JSON (the stream yielded) to stderr."""
    if not args.json:
        yield sys.stdout
        return
    with stdout_to_stderr() as out:
        yield out


def cmd_tick(args: argparse.Namespace) -> int:
    """One tick, in this (fresh) process; its start and outcome go to the activity log."""
    home = _home(args)
    clock: Callable[[], float] = (lambda: float(args.now)) if args.now is not None else time.time
    recorder = TickRecorder(sail_dir(home), clock)
    recorder.started()
    try:
        result = _tick(home, clock)
    except BaseException as exc:
        recorder.failed(exc)
        raise
    if result.skipped is not None:
        recorder.skipped(result.skipped.reason)
    elif result.dispatched is not None:
        recorder.submitted(result.dispatched.tx_hash)
    summary: dict[str, Any] = {
        "reconciled": [e.to_wire() for e in result.reconciled],
        "skipped": None if result.skipped is None else result.skipped.reason,
        "submitted": None if result.dispatched is None else result.dispatched.tx_hash,
        "chainAheadS": ahead(result.chain_ahead_s),
    }
    if args.json:
        _dump(summary)
        return 0
    for entry in result.reconciled:
        _say(f"reconciled: {_describe(entry)}")
    if result.skipped is not None:
        _say(f"skipped: {result.skipped.reason}")
    if result.dispatched is not None:
        settled = result.dispatched.settled
        seen = "receipt not seen yet" if settled is None else settled.event
        _say(f"submitted: {result.dispatched.tx_hash} ({seen}; ledgered by a later tick)")
    if summary["chainAheadS"] is not None:
        _say(chain_ahead_line(summary["chainAheadS"], "this tick's"))
    return 0


def _tick(home: Path, clock: Callable[[], float]) -> TickResult:
    config = load_config(home)
    if config.keystore is None and not os.environ.get(config.key_env):
        # said before web3 is imported (seconds on a small machine): the commonest setup mistake
        raise SailKeyUnavailable(
            f"no signing key: set ${config.key_env} to the agent's private key, or `keystore` in "
            ".sail/config.toml"
        )
    # web3 is imported only by commands that use the chain
    tick_from_config = import_chain_module("sail._tick").tick_from_config
    result: TickResult = tick_from_config(home, config, clock=clock)
    return result


def _selected(home: Path, args: argparse.Namespace) -> list[Entry]:
    return [
        e
        for e in Ledger(sail_dir(home)).scan()
        if (not args.kind or e.kind == args.kind) and (args.since is None or e.ts * 1000 >= args.since)
    ]


def cmd_ledger(args: argparse.Namespace) -> int:
    """What has my agent actually done: the ledger, oldest first, one row per trade."""
    home, config = _agent(args)
    entries = _selected(home, args)
    if args.json:
        _dump([e.to_wire() for e in entries])
        return 0
    ledger = Ledger(sail_dir(home))
    tokens = learned_tokens((e for e in entries if isinstance(e, Acted)), ledger.state().tokens)
    render = renderer(config.token_in, tokens)
    for line in ledger_rows(entries, ActivityLog(sail_dir(home)).scan(NOTE_EVENTS), render):
        _say(line)
    return 0


def cmd_why(args: argparse.Namespace) -> int:
    """Why did it skip: the most recent skips, newest first, with their reasons (and, first, a
    reorganisation that holds every tick until it is acknowledged)."""
    home, config = _agent(args)
    ledger = Ledger(sail_dir(home))
    skips = recent_skips(ledger, args.limit)
    reorged = None if args.json else held_reorg(ledger, ledger.state())
    if reorged is not None:
        _say(
            f"held: every tick fails with chain_reorged since {when(reorged.ts)}: the ledgered swap "
            f"{reorged.tx_hash} (block {reorged.block}) is no longer there: {reorged.reason}; review, "
            f"then `sail ack-reorg {reorged.tx_hash}`"
        )
    if args.json:
        _dump([s.to_wire() for s in skips])
    elif not skips:
        _say("no skips recorded")
    else:
        render = renderer(config.token_in, ledger.state().tokens)
        for skip in skips:
            block = skip.block if skip.block is not None else "-"
            _say(f"{when(skip.ts)}  block {block}  {render(skip.reason)}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Does it remember its last trade: the last tick, the last confirmed act, what holds the next."""
    home, config = _agent(args)
    status = agent_status(home, config)
    if args.json:
        _dump(status)
        return 0
    tokens = {t: (v["decimals"], v["symbol"]) for t, v in status["tokens"].items()}
    for line in format_status(status, renderer(config.token_in, tokens)):
        _say(line)
    return 0


def cmd_ack_reorg(args: argparse.Namespace) -> int:
    """Let the agent trade again after a person reviewed the reorganisation a tick found."""
    home, config = _agent(args)
    record = acknowledge_reorg(
        sail_dir(home), args.tx_hash, clock=lambda: int(time.time()), lock_timeout=config.lock_timeout_s
    )
    if args.json:
        _dump({"acknowledged": record.tx_hash, "block": record.block, "blockHash": record.block_hash})
        return 0
    _say(
        f"acknowledged: the reorganisation under {record.tx_hash} (ledgered in block {record.block}); "
        "the ledger keeps its line as written, and the next tick trades again"
    )
    return 0


def cmd_journal(args: argparse.Namespace) -> int:
    """The narrative journal: the ledger told per day in plain sentences, each citing its lines."""
    home, config = _agent(args)
    since = None if args.since is None else -(-args.since // 1000)  # the first whole second at or after
    until = None if args.until is None else -(-args.until // 1000)
    if since is not None and until is not None and until <= since:
        raise UsageError("journal --until must come after --since")
    ledger = Ledger(sail_dir(home))
    if args.days is not None:
        if since is not None:
            raise UsageError("journal takes --days or --since, not both")
        since = last_days(ledger, args.days)
    if args.learn:
        return _learn_journal(args, home, config, ledger, (since, until))
    if args.db is not None or args.scope is not None or args.memory_journal is not None:
        raise UsageError("journal --db, --journal and --scope go with --learn")
    narrative = narrate(
        ledger,
        token_in=config.token_in,
        interval_s=config.interval_s,
        since=since,
        until=until,
        gap_s=args.gap,
    )
    if args.json:
        _dump(narrative.as_json())
        return 0
    for line in narrative.lines():
        _say(line)
    return 0


def _learn_journal(
    args: argparse.Namespace,
    home: Path,
    config: SailConfig,
    ledger: Ledger,
    window: tuple[int | None, int | None],
) -> int:
    """``journal --learn``: each finished day's sentences learned into flows-memory."""
    from memory import MemoryStore, check_store_location
    from sail._learn import default_scope, learn_journal

    scope = args.scope or default_scope(home)
    check_store_location(args.db, args.memory_journal, creating=True)
    store = MemoryStore(args.db, journal=args.memory_journal)
    try:
        report = learn_journal(
            ledger,
            token_in=config.token_in,
            interval_s=config.interval_s,
            store=store,
            scope=scope,
            since=window[0],
            until=window[1],
            gap_s=args.gap,
        )
    finally:
        store.close()
    if args.json:
        _dump(report.as_json())
        return 0
    for line in report.lines():
        _say(line)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Deploy the contracts on a local anvil and run ticks as fresh processes."""
    if not args.home:
        raise UsageError("demo needs --home DIR (the agent's home it leaves behind)")
    demo = import_chain_module("sail._demo")
    home = _usable_home(Path(args.home))
    if not args.json:
        with progress("demo: ticks run", enabled=True) as show:
            status: int = demo.run_demo(home, out=sys.stdout, progress=show)
        return status
    with stdout_to_stderr() as out:  # the story (and anything a child prints) on stderr
        status = demo.run_demo(home, out=sys.stderr)
        _dump(demo.outcome(home, ok=status == 0), out)
    return status


# -- parser --------------------------------------------------------------------------------------


def _unix_seconds(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {value!r}") from None
    if not 0 <= number <= INT64_MAX // 1000:
        raise argparse.ArgumentTypeError(f"must be unix seconds from 0 to {INT64_MAX // 1000}, got {value}")
    return number


def _seconds(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of seconds: {value!r}") from None
    if not 1 <= number <= INT64_MAX // 1000:
        raise argparse.ArgumentTypeError(f"must be seconds from 1 to {INT64_MAX // 1000}, got {value}")
    return number


def _days(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of days: {value!r}") from None
    if not 1 <= number <= MAX_DAYS:
        raise argparse.ArgumentTypeError(f"must be days from 1 to {MAX_DAYS}, got {value}")
    return number


def _address(value: str) -> str:
    if not (value.startswith("0x") and len(value) == 42):
        raise argparse.ArgumentTypeError(f"not a 0x address: {value!r}")
    return value


#: the market's addresses ``sail init --embedded`` checks its other values with (it deploys its own)
_PLACEHOLDER = "0x" + "00" * 20


def _init_usage(args: argparse.Namespace) -> SailConfig:
    """The config ``sail init``'s options describe, or a usage error (exit 2) naming what is wrong:
    a missing option, or a value the config refuses (``--amount 0``, ``--slippage-bps 10000``, an
    ``--rpc`` that is not an http(s) URL), before anything is deployed or written."""
    if args.rpc:
        missing = [f"--{n.replace('_', '-')}" for n in _RPC_REQUIRED if getattr(args, n) is None]
        if missing:
            raise UsageError(f"init --rpc needs {', '.join(missing)}")
    embedded = {"router": _PLACEHOLDER, "token_in": _PLACEHOLDER, "token_out": _PLACEHOLDER}
    chosen = {
        "rpc_url": EMBEDDED if args.embedded else args.rpc,
        "router": args.router,
        "token_in": args.token_in,
        "token_out": args.token_out,
        "amount_in": args.amount,
        "interval_s": args.interval,
        "min_balance": args.min_balance,
    }
    if args.embedded:
        chosen.update(embedded)
        chosen["amount_in"] = args.amount if args.amount is not None else 25 * 10**6
        chosen["interval_s"] = args.interval if args.interval is not None else 86_400
        chosen["min_balance"] = args.min_balance if args.min_balance is not None else 25 * 10**6
    try:
        return SailConfig(
            **chosen,
            slippage_bps=args.slippage_bps,
            permission=args.permission,
            key_env=args.key_env,
            keystore=args.keystore,
        )
    except SailConfigInvalid as exc:
        raise UsageError(f"init: {exc}; see `sail init --help`") from None


_OPTIONS = (
    Option(("--home",), "the agent's home (holds .sail/); default $SAIL_HOME or the cwd", metavar="DIR"),
)


def build_cli() -> CommandLine:
    """The ``sail`` command line (every command has help)."""
    cli = CommandLine(
        "sail",
        description="An agent that remembers what it did.",
        options=_OPTIONS,
        # the ledger and activity log are append-only, each line fsync'd: a tick stopped after it
        # signed a swap left its write-ahead line, which the next tick resolves from the chain
        interrupted="what the ledger and activity log recorded stays as written, and the next `sail tick` "
        "resolves from the chain a swap this one signed",
    )

    def command(name: str, help_text: str, handler: Any) -> argparse.ArgumentParser:
        return cli.command(name, handler, help_text)

    p = command("init", "write .sail/config.toml", cmd_init)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--rpc", help="the chain's JSON-RPC URL")
    where.add_argument(
        "--embedded",
        action="store_true",
        help="an anvil chain kept in .sail/chain/, with the repo's tokens and router deployed on it",
    )
    p.add_argument("--router", type=_address, help="the swap router's address (with --rpc)")
    p.add_argument("--token-in", type=_address, help="the stable token spent (with --rpc)")
    p.add_argument("--token-out", type=_address, help="the token bought, e.g. WETH (with --rpc)")
    p.add_argument("--amount", type=int, help="base units of token-in per swap (embedded: 25 USDC)")
    p.add_argument("--interval", type=int, help="seconds between confirmed swaps (embedded: 86400)")
    p.add_argument("--min-balance", type=int, help="skip below this token-in balance (embedded: 25 USDC)")
    p.add_argument("--slippage-bps", type=int, default=50, help="quote tolerance (default 50)")
    p.add_argument("--permission", help="the protocol permission id dispatches carry")
    p.add_argument(
        "--key-env",
        default="SAIL_PRIVATE_KEY",
        help="env var holding the signing key (default: SAIL_PRIVATE_KEY)",
    )
    p.add_argument("--keystore", help="encrypted keystore file (password in $SAIL_KEYSTORE_PASSWORD)")

    p = command("tick", "run one tick: reconcile, read memory, decide, skip or submit", cmd_tick)
    p.add_argument(
        "--now", type=_unix_seconds, help="the tick's clock, unix seconds (default: the system clock)"
    )

    p = command("ledger", "what has my agent actually done", cmd_ledger)
    p.add_argument("--kind", choices=("acted", "skipped"), help="only entries of this kind")
    p.add_argument(
        "--since",
        type=instant_ms,
        metavar="WHEN",
        help="only entries at or after WHEN: a duration ago (1d), an ISO 8601 date/time or epoch ms",
    )

    p = command("why", "why did it skip: recent skips with their reasons", cmd_why)
    p.add_argument(
        "--limit", type=limit, metavar="N", default=10, help=f"how many (1 to {LIMIT_MAX}; default 10)"
    )

    command("status", "does it remember its last trade", cmd_status)

    p = command(
        "ack-reorg",
        "after reviewing a chain reorganisation a tick found (chain_reorged), let the agent trade again",
        cmd_ack_reorg,
    )
    p.add_argument("tx_hash", metavar="TXHASH", help="the swap the chain_reorged line names (sail status)")

    p = command("journal", "the narrative: what it did, per day, each sentence citing its lines", cmd_journal)
    p.add_argument(
        "--since",
        type=instant_ms,
        metavar="WHEN",
        help="only entries at or after WHEN: a duration ago (1d), an ISO 8601 date/time or epoch ms",
    )
    p.add_argument(
        "--until",
        type=instant_ms,
        metavar="WHEN",
        help="only entries before WHEN: a duration ago (1d), an ISO 8601 date/time or epoch ms",
    )
    p.add_argument(
        "--gap",
        type=_seconds,
        metavar="SECONDS",
        help="tell spans with no ledgered decision longer than this (default: twice the interval)",
    )
    p.add_argument(
        "--learn",
        action="store_true",
        help="learn each finished UTC day's sentences into flows-memory as findings in the agent's scope "
        "(each citing its lines); findings already there are not learned again",
    )
    p.add_argument(
        "--scope",
        metavar="SCOPE",
        help="with --learn: the findings' scope (default: sail:<home's name>)",
    )
    p.add_argument(
        "--db",
        metavar="PATH",
        type=db_path,
        help="with --learn: the history DB (default: $FLOWS_DB or the XDG data dir)",
    )
    p.add_argument(
        "--journal",
        dest="memory_journal",
        metavar="LOCATION",
        type=journal_location,
        help="with --learn: the store's journal directory or postgresql:// DSN (default: $FLOWS_JOURNAL)",
    )
    p.add_argument(
        "--days",
        type=_days,
        metavar="N",
        help=f"only the last N UTC days, up to the last entry's (1 to {MAX_DAYS}; reads the ledger's tail)",
    )
    command("demo", "deploy the contracts on a local chain and run ticks as fresh processes", cmd_demo)
    return cli


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``sail`` (for documentation and completion)."""
    return build_cli().parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``sail`` with ``argv`` (default ``sys.argv[1:]``); return the exit status."""
    return build_cli().main(argv)
