"""The canonical tick (the seed's ``tick()``): reconcile → read memory → decide → skip or submit.

1. Reconcile first: every dispatch in ``activity.jsonl`` without a final ledger entry is ledgered
   from its receipt, calldata and balance reads (``memory.ledger.reconcile``).
2. Read memory: the last confirmed act, from the ledger (through its snapshot), never from
   in-process data.
3. Decide (the strategy).
4. Skip → one ``skipped`` entry, at the point of return.
5. Act → submit through the runner, and write nothing to the ledger: the ``acted`` entry appears
   when a later tick reconciles it.

The whole tick holds the ledger's lock, so concurrent ticks run one after the other: the second
reconciles what the first dispatched before it decides, and a dispatch is never ledgered twice.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memory.ledger import (
    Acted,
    ActivityLog,
    ChainUnavailable,
    Ledger,
    Skipped,
    reconcile,
)
from sail._chain import Chain
from sail._config import EMBEDDED, SailConfig, sail_dir
from sail._node import embedded_chain
from sail._runner import Dispatched, Runner, load_account
from sail._strategy import DcaStrategy, Skip, Strategy, TickState


@dataclass(frozen=True)
class TickResult:
    """What one tick did: entries reconciled, and either the skip it ledgered or the dispatch it sent."""

    reconciled: tuple[Acted, ...]
    skipped: Skipped | None
    dispatched: Dispatched | None


def tick(
    home_sail_dir: Path,
    *,
    strategy: Strategy,
    chain: Chain,
    runner: Runner,
    clock: Callable[[], float] = time.time,
    reconcile_wait_s: float = 5.0,
    lock_timeout: float = 120.0,
) -> TickResult:
    """Run one tick for the agent whose ``.sail`` directory is ``home_sail_dir``.

    Raises:
        ChainUnavailable: a chain read the tick cannot do without failed (nothing is ledgered
            for it; the next tick starts over).
        SailSubmitFailed: the node refused the swap.
        journal.JournalCorrupt: the ledger or activity log is damaged mid-file.
    """
    ledger = Ledger(home_sail_dir)
    activity = ActivityLog(home_sail_dir)

    def now() -> int:  # the ledger wants whole seconds
        return int(clock())

    with ledger.writer(lock_timeout) as writer:
        reconciled = reconcile(writer, activity, chain, clock=now, receipt_timeout=reconcile_wait_s)
        state = TickState(now=now(), agent=runner.agent, last_confirmed=ledger.last_confirmed(), chain=chain)
        decision = strategy.decide(state)
        if isinstance(decision, Skip):
            entry = Skipped(
                ts=state.now, block=_head_or_none(chain), chain_id=chain.chain_id(), reason=decision.reason
            )
            writer.append(entry)
            return TickResult(tuple(reconciled), entry, None)
        return TickResult(tuple(reconciled), None, runner.submit(decision))


def _head_or_none(chain: Chain) -> int | None:
    try:
        return chain.head()
    except ChainUnavailable:
        return None


def dca_strategy(config: SailConfig) -> DcaStrategy:
    """The DCA strategy a config describes."""
    return DcaStrategy(
        router=config.router,
        token_in=config.token_in,
        token_out=config.token_out,
        amount_in=config.amount_in,
        interval_s=config.interval_s,
        min_balance=config.min_balance,
        slippage_bps=config.slippage_bps,
        deadline_s=config.deadline_s,
        permission=config.permission,
    )


def tick_from_config(home: Path, config: SailConfig, *, clock: Callable[[], float] = time.time) -> TickResult:
    """One tick as ``sail tick`` runs it: chain over the config's RPC URL (or the embedded chain),
    key from the env var or keystore.

    Raises:
        SailKeyUnavailable: no signing key.
        SailNodeUnavailable: the embedded chain cannot be started.
        (and whatever ``tick`` raises)
    """
    account = load_account(
        key_env=config.key_env, keystore=None if config.keystore is None else Path(config.keystore)
    )
    directory = sail_dir(home)
    with contextlib.ExitStack() as stack:
        url = config.rpc_url
        if url == EMBEDDED:
            url = stack.enter_context(embedded_chain(directory)).url
        chain = Chain.connect(url)
        runner = Runner(
            chain,
            account,
            ActivityLog(directory),
            clock=clock,
            gas=config.gas,
            receipt_timeout=config.receipt_timeout_s,
        )
        return tick(
            directory,
            strategy=dca_strategy(config),
            chain=chain,
            runner=runner,
            clock=clock,
            reconcile_wait_s=config.reconcile_wait_s,
        )
