"""Strategies: ``decide(state) -> Skip | Swap``, and the dollar-cost-averaging example.

A strategy only decides. It reads what it needs through ``TickState`` (the clock, the agent's last
confirmed act from the ledger, chain reads at the head) and returns either a ``Skip`` with one of
the standard reason forms or a ``Swap`` to submit. It writes nothing: the tick ledgers skips, the
runner dispatches swaps. The mandate (caps, allowlists) is the protocol's, checked on dispatch
under the ``permission`` the swap carries; a strategy is no policy engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from memory.ledger import (
    QUOTE_RETURNED_ZERO,
    LastAct,
    allowance_reason,
    balance_reason,
    cadence_reason,
    quote_unavailable_reason,
)
from sail._chain import ChainView, QuoteUnavailable


@dataclass(frozen=True)
class TickState:
    """What a strategy sees on one tick.

    ``now`` is unix seconds from the tick's (injectable) clock; ``last_confirmed`` is the ledger's
    last confirmed act (never in-process data); ``chain`` reads at the head.
    """

    now: int
    agent: str
    last_confirmed: LastAct | None
    chain: ChainView


@dataclass(frozen=True)
class Skip:
    """Do nothing this tick, because ``reason`` (ledgered as a ``skipped`` entry).

    ``token`` is the token whose base units the reason's figures are (balance, allowance), so the
    tick can log its decimals and symbol for the displays; None when the reason has no figures.
    """

    reason: str
    token: str | None = None


@dataclass(frozen=True)
class Swap:
    """Swap exactly ``amount_in`` of ``token_in`` for at least ``amount_out_min`` of ``token_out``."""

    router: str
    token_in: str
    token_out: str
    amount_in: int
    amount_out_min: int
    deadline: int
    permission: str | None
    action: str = "swap"


class Strategy(Protocol):
    """Anything with ``decide`` and an ``interval_s``.

    ``interval_s`` is the shortest time the strategy lets pass between two confirmed acts: before a
    swap is submitted, the tick checks the ledger's own tail over that span, so a snapshot that
    under-states the last act can never cause a swap inside it.
    """

    @property
    def interval_s(self) -> int:
        """Seconds between confirmed acts, at least."""
        ...

    def decide(self, state: TickState) -> Skip | Swap:
        """Return what to do this tick; raise only for failures (a chain read that failed)."""
        ...


@dataclass(frozen=True)
class DcaStrategy:
    """Dollar-cost averaging: swap a fixed ``amount_in`` of a stable token into ``token_out``.

    Every ``interval_s`` seconds at most (from the last *confirmed* act), while the agent holds at
    least ``max(min_balance, amount_in)`` of ``token_in``, the router may spend ``amount_in`` of it,
    and the router quotes a non-zero output. ``amount_out_min`` is the quote less ``slippage_bps``.
    Checks run in that order; the first that fails is the skip reason.
    """

    router: str
    token_in: str
    token_out: str
    amount_in: int
    interval_s: int
    min_balance: int
    slippage_bps: int = 50
    deadline_s: int = 300
    permission: str | None = None

    def decide(self, state: TickState) -> Skip | Swap:
        """Apply the checks above; see the class docstring.

        Raises:
            memory.ledger.ChainUnavailable: a balance or allowance read failed.
        """
        last = state.last_confirmed
        # from the later of the last act's block time and the latest signing of a confirmed act
        # (``LastAct.since``): a chain whose clock runs behind the agent's must not make the act
        # look an interval old at every tick
        if last is not None and state.now - last.since < self.interval_s:
            # negative when the chain that stamped the last act runs ahead of this clock
            return Skip(cadence_reason(state.now - last.since, self.interval_s))
        balance = state.chain.balance_of(self.token_in, state.agent)
        needed = max(self.min_balance, self.amount_in)
        if balance < needed:
            return Skip(balance_reason(balance, needed), token=self.token_in)
        allowed = state.chain.allowance(self.token_in, state.agent, self.router)
        if allowed < self.amount_in:
            return Skip(allowance_reason(allowed, self.amount_in, self.router), token=self.token_in)
        try:
            quoted = state.chain.quote(self.router, self.amount_in, (self.token_in, self.token_out))
        except QuoteUnavailable as exc:
            return Skip(quote_unavailable_reason(str(exc)))
        if quoted == 0:
            return Skip(QUOTE_RETURNED_ZERO)
        return Swap(
            router=self.router,
            token_in=self.token_in,
            token_out=self.token_out,
            amount_in=self.amount_in,
            amount_out_min=quoted * (10_000 - self.slippage_bps) // 10_000,
            deadline=state.now + self.deadline_s,
            permission=self.permission,
        )
