"""The ledger's entries: the entry schema as frozen dataclasses, and its wire form.

The schema is a contract (the state snapshot and every reader rely on it). Every entry carries ``ts``
(unix seconds), ``block``, ``chainId`` and ``kind``; an ``acted`` entry adds ``action``,
``permission``, ``outcome``, ``txHash``, ``gasUsed``, ``tokenIn``, ``tokenOut``, ``amountIn``,
``amountOut`` and ``balancesAfter``; a ``skipped`` entry adds ``reason``. No other key, ever.

What may be null follows the outcome (an entry carries what is knowable and leaves the rest null):

=============  ========  =========  ===============================================
field          confirmed reverted   unverified
=============  ========  =========  ===============================================
block          int       int        null (no receipt, so no block)
gasUsed        string    string     null
tokenIn/Out    address   address    address, or null when the calldata is unknown
amountIn       amount    amount     amount, or null when the token could not be read
amountOut      amount    null       null
balancesAfter  map       null       null
=============  ========  =========  ===============================================

``balancesAfter`` maps ``tokenIn`` and ``tokenOut`` to the agent's ``balanceOf`` each, read at the
latest block while the entry is reconciled (fresh reads, never at ``block``: see docs/SAIL.md).
``permission`` is the protocol's permission id the dispatch ran under, or null when none was
configured. A ``skipped`` entry's ``block`` is the chain head the tick saw, or null when the chain
could not be read.

An entry's free text (a skip's ``reason``, ``action``, ``permission``) holds at
most ``MAX_TEXT_CHARS`` characters when it is written (``check_writable``): a longer one is refused
with ``ledger_invalid_entry`` and nothing is written. A ledger written before that bound is still
read whole (its readers bound what they show instead). Text from outside the agent (a node's error
in a reason) is cut to fit when the reason is built (``fit_text``), with a marker that says so.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar, Final, Literal

from memory.ledger._errors import LedgerInvalidEntry

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}\Z")
_TX_HASH = re.compile(r"0x[0-9a-fA-F]{64}\Z")
_UINT = re.compile(r"(0|[1-9][0-9]*)\Z")
#: the most digits a base-unit figure (an amount, a balance, gas) may have: a token's uint256 has 78,
#: a sum of a receipt's transfers a few more; Python will not read a decimal string past 4,300
#: digits at all (a line crafted so failed every reader with a bare ValueError)
MAX_UNITS_DIGITS: Final = 100
_UNITS_BOUND: Final = 10**MAX_UNITS_DIGITS
_HUMAN = re.compile(r"(0|[1-9][0-9]*)\.[0-9]+ \S+\Z")

ACTED_KEYS: Final = (
    "ts",
    "block",
    "chainId",
    "kind",
    "action",
    "permission",
    "outcome",
    "txHash",
    "gasUsed",
    "tokenIn",
    "tokenOut",
    "amountIn",
    "amountOut",
    "balancesAfter",
)
SKIPPED_KEYS: Final = ("ts", "block", "chainId", "kind", "reason")
AMOUNT_KEYS: Final = ("baseUnits", "human")

MAX_TEXT_CHARS: Final = 2000
"""The most characters a free-text field the agent writes may hold (a skip's reason, an action, a
permission; the activity log's reasons, messages and symbols)."""


def fit_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` as it is when it has at most ``limit`` characters; else its start and the marker
    ``… [cut: N characters in all]``, ``limit`` characters together: how text from outside the agent
    (a node's error, a contract's revert reason) enters a field the schema bounds."""
    if not text.isascii():  # a lone surrogate (no UTF-8 line can hold one) as its escape, \udcff
        text = text.encode("utf-8", "backslashreplace").decode()
    if len(text) <= limit:
        return text
    marker = f"… [cut: {len(text)} characters in all]"
    return text[: max(0, limit - len(marker))] + marker


def fit_copy(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` as it is when it has at most ``limit`` characters; else its start and the marker
    ``… [cut: N characters in all, sha256 <hex>]`` (the SHA-256 of the whole text's UTF-8),
    ``limit`` characters together: how a copy that is compared, not read (a ``dispatch_mismatch``'s
    calldata, the log's or the chain's), enters a line — still checkable against the full copy."""
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode()
    if len(text) <= limit:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()
    marker = f"… [cut: {len(text)} characters in all, sha256 {digest}]"
    return text[: max(0, limit - len(marker))] + marker


#: the most characters a display (``sail status``, ``why``, ``ledger``, text or JSON) shows of one
#: string or line: a longer one is cut by ``fit_copy``, its SHA-256 kept (a path fits; a text the
#: writer bounds fits)
MAX_SHOWN_CHARS: Final = 6000


def fit_json(value: Any, limit: int = MAX_SHOWN_CHARS) -> Any:
    """``value`` (JSON-ready: dicts, lists, strings, numbers) with every string, key included, cut
    by ``fit_copy`` to ``limit`` characters: what a display prints of a ledger or log written before
    the write bound, or crafted (a skip reason, a symbol, a tick's message of megabytes)."""
    if isinstance(value, str):
        return fit_copy(value, limit) if len(value) > limit else value
    if isinstance(value, dict):
        return {fit_json(k, limit): fit_json(v, limit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [fit_json(v, limit) for v in value]
    return value


def text_refusal(fields: dict[str, str | None]) -> tuple[str, str] | None:
    """The first of ``fields`` (name to text) longer than ``MAX_TEXT_CHARS``, or holding a lone
    surrogate (which no UTF-8 line can hold: the encoder raised a bare ``TypeError``), and why it is
    refused; None when all fit."""
    for name, value in fields.items():
        if not isinstance(value, str):
            continue
        if len(value) > MAX_TEXT_CHARS:
            return name, (
                f"holds {len(value)} characters, more than the {MAX_TEXT_CHARS} a written text may hold "
                "(nothing was written): make it shorter"
            )
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError as exc:
                return name, (
                    f"holds a lone surrogate (U+{ord(value[exc.start]):04X} at {exc.start}), which no UTF-8 "
                    "line can hold (nothing was written): decode its bytes as UTF-8 text first"
                )
    return None


def check_writable(entry: Entry) -> None:
    """Refuse an entry whose free text is longer than ``MAX_TEXT_CHARS`` (checked when it is
    written, never when read: a ledger written before the bound still reads).

    Raises:
        LedgerInvalidEntry: a field too long (named).
    """
    if isinstance(entry, Skipped):
        fields: dict[str, str | None] = {"reason": entry.reason}
    else:
        # an amount's text is its figures and the token's symbol, bounded where the symbol is logged
        # (``token_metadata``): refusing it here would leave a trade on chain no tick could ledger
        fields = {"action": entry.action, "permission": entry.permission}
    refused = text_refusal(fields)
    if refused is not None:
        raise LedgerInvalidEntry(*refused)


class Outcome(StrEnum):
    """What became of a dispatch: its three outcomes."""

    CONFIRMED = "confirmed"  # mined with a successful receipt
    REVERTED = "reverted"  # mined, and the transaction reverted
    UNVERIFIED = "unverified"  # submitted (there is a hash) but the receipt could not be read


def format_human(base_units: int, decimals: int, symbol: str) -> str:
    """Render base units as ``"<amount> <SYMBOL>"`` with the token's decimals.

    Exact (integer arithmetic, no float): trailing zeros are dropped but one fractional digit is
    kept, so ``format_human(25_000_000, 6, "USDC") == "25.0 USDC"``.

    Raises:
        LedgerInvalidEntry: negative amount or decimals, or a symbol that is empty or has spaces.
    """
    if base_units < 0 or decimals < 0:
        raise LedgerInvalidEntry("human", f"cannot render {base_units} with {decimals} decimals")
    if not symbol or any(c.isspace() for c in symbol):
        raise LedgerInvalidEntry("human", f"token symbol {symbol!r} is empty or has spaces")
    whole, frac = divmod(base_units, 10**decimals)
    digits = str(frac).rjust(decimals, "0").rstrip("0") if decimals else ""
    return f"{whole}.{digits or '0'} {symbol}"


@dataclass(frozen=True)
class Amount:
    """A token amount: exact base units and the human rendering (``{"baseUnits", "human"}``)."""

    base_units: int
    human: str

    @classmethod
    def of(cls, base_units: int, decimals: int, symbol: str) -> Amount:
        """Build an amount from base units and the token's decimals and symbol."""
        return cls(base_units, format_human(base_units, decimals, symbol))

    def __post_init__(self) -> None:
        if type(self.base_units) is not int or not 0 <= self.base_units < _UNITS_BOUND:
            raise LedgerInvalidEntry(
                "baseUnits",
                f"must be a non-negative int of at most {MAX_UNITS_DIGITS} digits, "
                f"got {_short(self.base_units)}",
            )
        if not isinstance(self.human, str) or not _HUMAN.match(self.human):
            raise LedgerInvalidEntry("human", f'must read "<amount> <SYMBOL>", got {self.human!r}')

    def to_wire(self) -> dict[str, str]:
        """The JSON object the ledger stores."""
        return {"baseUnits": str(self.base_units), "human": self.human}


@dataclass(frozen=True)
class Acted:
    """A dispatch the agent submitted, as reconciled from the chain (``kind: "acted"``)."""

    ts: int
    block: int | None
    chain_id: int
    action: str
    permission: str | None
    outcome: Outcome
    tx_hash: str
    gas_used: int | None
    token_in: str | None
    token_out: str | None
    amount_in: Amount | None
    amount_out: Amount | None
    balances_after: Mapping[str, int] | None

    kind: ClassVar[Literal["acted"]] = "acted"

    def __post_init__(self) -> None:
        _check_common(self.ts, self.block, self.chain_id)
        if not isinstance(self.outcome, Outcome):
            raise LedgerInvalidEntry("outcome", f"must be an Outcome, got {self.outcome!r}")
        if not isinstance(self.action, str) or not self.action:
            raise LedgerInvalidEntry("action", "must be a non-empty string")
        if self.permission is not None and (not isinstance(self.permission, str) or not self.permission):
            raise LedgerInvalidEntry("permission", "must be a non-empty string or null")
        if not isinstance(self.tx_hash, str) or not _TX_HASH.match(self.tx_hash):
            raise LedgerInvalidEntry("txHash", f"must be 0x and 64 hex digits, got {self.tx_hash!r}")
        for name, value in (("tokenIn", self.token_in), ("tokenOut", self.token_out)):
            if value is not None and (not isinstance(value, str) or not _ADDRESS.match(value)):
                raise LedgerInvalidEntry(name, f"must be an address or null, got {value!r}")
        _check_optional_uint("gasUsed", self.gas_used)
        for name, amount in (("amountIn", self.amount_in), ("amountOut", self.amount_out)):
            if amount is not None and not isinstance(amount, Amount):
                raise LedgerInvalidEntry(name, f"must be an Amount or null, got {amount!r}")
        if self.balances_after is not None:
            frozen = MappingProxyType(dict(self.balances_after))
            for token, units in frozen.items():
                if not isinstance(token, str) or not _ADDRESS.match(token):
                    raise LedgerInvalidEntry("balancesAfter", f"key {token!r} is not an address")
                if type(units) is not int or not 0 <= units < _UNITS_BOUND:
                    raise LedgerInvalidEntry(
                        "balancesAfter", f"{token}: {_short(units)} is not a base-unit int"
                    )
            object.__setattr__(self, "balances_after", frozen)
        self._check_nulls()

    def _check_nulls(self) -> None:
        """Enforce what the outcome makes knowable: nulls only where the schema allows them."""
        known = {
            "block": self.block,
            "gasUsed": self.gas_used,
            "tokenIn": self.token_in,
            "tokenOut": self.token_out,
            "amountIn": self.amount_in,
            "amountOut": self.amount_out,
            "balancesAfter": self.balances_after,
        }
        required = {
            Outcome.CONFIRMED: tuple(known),
            Outcome.REVERTED: ("block", "gasUsed", "tokenIn", "tokenOut", "amountIn"),
            Outcome.UNVERIFIED: (),
        }[self.outcome]
        must_be_null = {
            Outcome.CONFIRMED: (),
            Outcome.REVERTED: ("amountOut", "balancesAfter"),
            Outcome.UNVERIFIED: ("block", "gasUsed", "amountOut", "balancesAfter"),
        }[self.outcome]
        for name in required:
            if known[name] is None:
                raise LedgerInvalidEntry(name, f"a {self.outcome} entry must carry it")
        for name in must_be_null:
            if known[name] is not None:
                raise LedgerInvalidEntry(name, f"a {self.outcome} entry must leave it null, never made up")

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the ledger stores, keys in the schema's order."""
        return {
            "ts": self.ts,
            "block": self.block,
            "chainId": self.chain_id,
            "kind": "acted",
            "action": self.action,
            "permission": self.permission,
            "outcome": str(self.outcome),
            "txHash": self.tx_hash,
            "gasUsed": None if self.gas_used is None else str(self.gas_used),
            "tokenIn": self.token_in,
            "tokenOut": self.token_out,
            "amountIn": None if self.amount_in is None else self.amount_in.to_wire(),
            "amountOut": None if self.amount_out is None else self.amount_out.to_wire(),
            "balancesAfter": (
                None
                if self.balances_after is None
                else {token: str(units) for token, units in self.balances_after.items()}
            ),
        }

    @property
    def is_final(self) -> bool:
        """True when the outcome is settled (confirmed or reverted); unverified is revisited."""
        return self.outcome is not Outcome.UNVERIFIED


@dataclass(frozen=True)
class Skipped:
    """The agent considered acting and chose not to, and why (``kind: "skipped"``)."""

    ts: int
    block: int | None
    chain_id: int
    reason: str

    kind: ClassVar[Literal["skipped"]] = "skipped"

    def __post_init__(self) -> None:
        _check_common(self.ts, self.block, self.chain_id)
        if not isinstance(self.reason, str) or not self.reason.strip() or "\n" in self.reason:
            raise LedgerInvalidEntry("reason", "must be a non-empty, one-line string")

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the ledger stores, keys in the schema's order."""
        return {
            "ts": self.ts,
            "block": self.block,
            "chainId": self.chain_id,
            "kind": "skipped",
            "reason": self.reason,
        }


Entry = Acted | Skipped


def _check_common(ts: object, block: object, chain_id: object) -> None:
    if type(ts) is not int or ts < 0:
        raise LedgerInvalidEntry("ts", f"must be non-negative unix seconds (int), got {ts!r}")
    if block is not None and (type(block) is not int or block < 0):
        raise LedgerInvalidEntry("block", f"must be a non-negative int or null, got {block!r}")
    if type(chain_id) is not int or chain_id <= 0:
        raise LedgerInvalidEntry("chainId", f"must be a positive int, got {chain_id!r}")


def _check_optional_uint(name: str, value: object) -> None:
    if value is not None and (type(value) is not int or not 0 <= value < _UNITS_BOUND):
        raise LedgerInvalidEntry(
            name,
            f"must be a non-negative int of at most {MAX_UNITS_DIGITS} digits or null, got {_short(value)}",
        )


def _short(value: object) -> str:
    """``value`` for a message: an int past the bound by its size alone (its digits may be more
    than Python will write out), anything else as ``repr`` cut to 80 characters."""
    if type(value) is int and not -_UNITS_BOUND < value < _UNITS_BOUND:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:40]}… ({len(text)} characters)"


# -- wire form -> entries ---------------------------------------------------------------------


def entry_from_wire(obj: object) -> Entry:
    """Validate a decoded JSON value against the schema and return the entry it holds.

    Exactly the schema's keys, with exactly its types: decimal strings for ``gasUsed``,
    ``baseUnits`` and balances; ints for ``ts``, ``block``, ``chainId``.

    Raises:
        LedgerInvalidEntry: anything else (the field and what is wrong are named).
    """
    if not isinstance(obj, dict):
        raise LedgerInvalidEntry("(entry)", "must be a JSON object")
    kind = obj.get("kind")
    expected = {"acted": ACTED_KEYS, "skipped": SKIPPED_KEYS}.get(kind) if isinstance(kind, str) else None
    if expected is None:
        raise LedgerInvalidEntry("kind", f'must be "acted" or "skipped", got {kind!r}')
    _check_keys(obj, expected, "(entry)")
    if kind == "skipped":
        return Skipped(ts=obj["ts"], block=obj["block"], chain_id=obj["chainId"], reason=obj["reason"])
    outcome = obj["outcome"]
    if outcome not in {o.value for o in Outcome}:
        raise LedgerInvalidEntry("outcome", f"must be confirmed, reverted or unverified, got {outcome!r}")
    return Acted(
        ts=obj["ts"],
        block=obj["block"],
        chain_id=obj["chainId"],
        action=obj["action"],
        permission=obj["permission"],
        outcome=Outcome(outcome),
        tx_hash=obj["txHash"],
        gas_used=_uint_string_or_null("gasUsed", obj["gasUsed"]),
        token_in=obj["tokenIn"],
        token_out=obj["tokenOut"],
        amount_in=_amount_or_null("amountIn", obj["amountIn"]),
        amount_out=_amount_or_null("amountOut", obj["amountOut"]),
        balances_after=_balances_or_null(obj["balancesAfter"]),
    )


def _check_keys(obj: dict[str, Any], expected: tuple[str, ...], where: str) -> None:
    missing = [k for k in expected if k not in obj]
    extra = sorted(k for k in obj if k not in expected)
    if missing:
        raise LedgerInvalidEntry(missing[0], f"missing from {where}")
    if extra:
        raise LedgerInvalidEntry(extra[0], f"is not in the schema of {where}")


def _uint_string_or_null(name: str, value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_UNITS_DIGITS or not _UINT.match(value):
        raise LedgerInvalidEntry(
            name,
            f"must be a decimal string of at most {MAX_UNITS_DIGITS} digits or null, got {_short(value)}",
        )
    return int(value)


def _amount_or_null(name: str, value: object) -> Amount | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise LedgerInvalidEntry(name, "must be {baseUnits, human} or null")
    _check_keys(value, AMOUNT_KEYS, name)
    units = _uint_string_or_null(f"{name}.baseUnits", value["baseUnits"])
    if units is None:
        raise LedgerInvalidEntry(f"{name}.baseUnits", "must be a decimal string")
    return Amount(units, value["human"])


def _balances_or_null(value: object) -> dict[str, int] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise LedgerInvalidEntry("balancesAfter", "must be an object of address -> decimal string")
    out: dict[str, int] = {}
    for token, units in value.items():
        parsed = _uint_string_or_null(f"balancesAfter.{token}", units)
        if parsed is None:
            raise LedgerInvalidEntry(f"balancesAfter.{token}", "must be a decimal string")
        out[token] = parsed
    return out


# -- the skip reasons ---------------------------------------------------------------------


def cadence_reason(last_acted_s_ago: int, interval_s: int) -> str:
    """``cadence: last acted <n>s ago, interval <n>s``.

    A negative ``last_acted_s_ago`` (the last act is stamped by a chain whose clock runs ahead of
    the tick's) reads ``cadence: last acted <n>s ahead of this tick's clock (the chain's clock runs
    ahead of it), interval <n>s`` rather than pretending it happened just now.
    """
    if last_acted_s_ago < 0:
        return (
            f"cadence: last acted {-last_acted_s_ago}s ahead of this tick's clock (the chain's clock "
            f"runs ahead of it), interval {interval_s}s"
        )
    return f"cadence: last acted {last_acted_s_ago}s ago, interval {interval_s}s"


def balance_reason(balance: int, minimum: int) -> str:
    """``balance <n> < min <n>`` (base units of the token spent)."""
    return f"balance {balance} < min {minimum}"


def allowance_reason(allowance: int, needed: int, router: str) -> str:
    """``allowance <n> < <n> for <router> — owner top-up needed``."""
    return f"allowance {allowance} < {needed} for {router} — owner top-up needed"


def quote_unavailable_reason(message: str) -> str:
    """``quote unavailable: <message>`` (the message is folded onto one line, and cut to fit the
    bound of a reason, ``MAX_TEXT_CHARS``, with ``fit_text``'s marker)."""
    head = "quote unavailable: "
    return head + fit_text(" ".join(message.split()), MAX_TEXT_CHARS - len(head))


QUOTE_RETURNED_ZERO: Final = "quote returned 0"


#: what ``unresolved_reason`` adds for a dispatch resolved as never sent whose nonce was consumed since
UNSENT_BUT_CONSUMED: Final = " (resolved as never sent; its nonce was consumed since)"


#: what ends the reason when a dispatch the activity log says was dropped holds the trade
DROPPED_UNBORNE: Final = " (logged as dropped; the chain does not bear it out yet)"

#: what ends the reason when a dispatch a final ledger line resolved was never mined: the chain has
#: not used its nonce, so no receipt can back that line (a claim: a crafted or restored line)
RESOLUTION_UNBORNE: Final = (
    " (ledgered with a final outcome, yet the chain has not used its nonce: no receipt backs that "
    "line, a claim; it is watched until the chain settles it)"
)


def unresolved_reason(
    tx_hash: str, signed_s_ago: int, *, unsent: bool = False, dropped: bool = False, claimed: bool = False
) -> str:
    """``unresolved dispatch <txHash>, signed <n>s ago``: an earlier dispatch holds the next trade.

    Added beside the standard forms: a tick never submits while a dispatch it signed earlier is neither
    ledgered with a final outcome nor resolved as never sent — nor while one resolved as never sent
    has had its nonce consumed and is not ledgered yet (``unsent``: the reason then ends with
    ``UNSENT_BUT_CONSUMED``, so the displays know which kind of dispatch holds it) — nor while one
    the activity log says was dropped is not borne out by the chain (``dropped``: ``DROPPED_UNBORNE``) —
    nor while one a final ledger line resolved has a nonce the chain has not used (``claimed``:
    ``RESOLUTION_UNBORNE``; the line is a claim, the transaction may still be mined).
    """
    if claimed:
        return f"unresolved dispatch {tx_hash}, signed {max(0, signed_s_ago)}s ago" + RESOLUTION_UNBORNE
    suffix = DROPPED_UNBORNE if dropped else UNSENT_BUT_CONSUMED if unsent else ""
    return f"unresolved dispatch {tx_hash}, signed {max(0, signed_s_ago)}s ago" + suffix
