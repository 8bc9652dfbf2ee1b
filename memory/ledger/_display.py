"""What people read: a ledger's figures in human units, beside the raw base units they came from.

A skip's ``reason`` is stored exactly as its standard form says (``balance 10000000 < min
25000000``: base units, no token named). Every display converts it when it is shown, never before:
``balance 10.0 USDC (10000000) < min 25.0 USDC``. The figures are the token spent's (the config's
``token_in``), read with the decimals and symbol the activity log recorded for it
(``token_metadata``, kept in the snapshot's ``tokens``) or learned from an amount an entry rendered.
A reason that is not one of the forms with figures, or a token whose metadata is not known, is shown
as stored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation

from memory.ledger._entries import Acted, format_human
from memory.ledger._errors import LedgerInvalidEntry

#: a token's ``(decimals, symbol)`` by its address in lower case (the snapshot's ``tokens``)
TokenBook = Mapping[str, tuple[int, str]]

# a uint256 has at most 78 digits; ASCII digits only (`\d` takes every script's, and int() refuses
# more than 4,300 digits: a crafted reason must show as written, never fail the display)
_BALANCE = re.compile(r"balance ([0-9]{1,78}) < min ([0-9]{1,78})")
_ALLOWANCE = re.compile(r"allowance ([0-9]{1,78}) < ([0-9]{1,78}) for (\S+)( — owner top-up needed)")


def amount_text(units: int, token: str | None, tokens: TokenBook, *, raw: bool = True) -> str:
    """``10.0 USDC (10000000)`` (``10.0 USDC`` without ``raw``); the bare figure for an unknown token."""
    info = None if token is None else tokens.get(token.lower())
    if info is None:
        return str(units)
    try:
        human = format_human(units, *info)
    except LedgerInvalidEntry:  # metadata no display can use (never written by the runner)
        return str(units)
    return f"{human} ({units})" if raw else human


def reason_text(reason: str, token: str | None, tokens: TokenBook) -> str:
    """A skip reason for people: its figures in ``token``'s units beside the raw ones (see above)."""
    if token is None or token.lower() not in tokens:
        return reason
    found = _BALANCE.fullmatch(reason)
    if found is not None:
        have, need = int(found[1]), int(found[2])
        minimum = amount_text(need, token, tokens, raw=False)
        return f"balance {amount_text(have, token, tokens)} < min {minimum}"
    found = _ALLOWANCE.fullmatch(reason)
    if found is not None:
        have, need = int(found[1]), int(found[2])
        shown = f"{amount_text(have, token, tokens)} < {amount_text(need, token, tokens, raw=False)}"
        return f"allowance {shown} for {found[3]}{found[4]}"
    return reason


def learned_tokens(entries: Iterable[Acted], known: TokenBook | None = None) -> dict[str, tuple[int, str]]:
    """``known`` and, for tokens it lacks, the decimals and symbol the entries' amounts rendered."""
    book = dict(known or {})
    for entry in entries:
        for address, amount in ((entry.token_in, entry.amount_in), (entry.token_out, entry.amount_out)):
            if address is None or amount is None or address.lower() in book:
                continue
            solved = solve_decimals(amount.base_units, amount.human)
            if solved is not None:
                book[address.lower()] = solved
    return book


def solve_decimals(base_units: int, human: str) -> tuple[int, str] | None:
    """Solve ``human == base_units / 10**decimals`` for ``(decimals, symbol)`` (None when nothing fits)."""
    number, _, symbol = human.partition(" ")
    if base_units == 0 or not symbol:
        return None  # zero fits every number of decimals
    try:
        value = Decimal(number)
    except InvalidOperation:
        return None
    for decimals in range(0, 78):
        if Decimal(base_units).scaleb(-decimals) == value:
            return decimals, symbol
    return None
