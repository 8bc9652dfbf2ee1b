"""The entry schema: exact keys and types, nulls only where the schema allows them."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

import memory.ledger as ml
from journal import LineDamaged
from memory.ledger import Acted, Amount, LedgerCodec, LedgerInvalidEntry, Outcome, Skipped
from tests.ledger.schema import check_line

TOKEN_IN = "0x" + "1a" * 20
TOKEN_OUT = "0x" + "2b" * 20
TX = "0x" + "ab" * 32


def confirmed(**overrides: object) -> Acted:
    fields: dict[str, object] = {
        "ts": 1752400000,
        "block": 21894213,
        "chain_id": 8453,
        "action": "swap",
        "permission": "0xSwapPermission",
        "outcome": Outcome.CONFIRMED,
        "tx_hash": TX,
        "gas_used": 142013,
        "token_in": TOKEN_IN,
        "token_out": TOKEN_OUT,
        "amount_in": Amount.of(25_000_000, 6, "USDC"),
        "amount_out": Amount.of(9_821_340_000_000_000, 18, "WETH"),
        "balances_after": {TOKEN_IN: 475_000_000, TOKEN_OUT: 104_213_340_000_000_000},
    }
    fields.update(overrides)
    return Acted(**fields)  # type: ignore[arg-type]


def test_a_confirmed_entry_serialises_to_exactly_the_documented_example() -> None:
    wire = orjson.loads(LedgerCodec().encode(confirmed()))
    assert wire == {
        "ts": 1752400000,
        "block": 21894213,
        "chainId": 8453,
        "kind": "acted",
        "action": "swap",
        "permission": "0xSwapPermission",
        "outcome": "confirmed",
        "txHash": TX,
        "gasUsed": "142013",
        "tokenIn": TOKEN_IN,
        "tokenOut": TOKEN_OUT,
        "amountIn": {"baseUnits": "25000000", "human": "25.0 USDC"},
        "amountOut": {"baseUnits": "9821340000000000", "human": "0.00982134 WETH"},
        "balancesAfter": {TOKEN_IN: "475000000", TOKEN_OUT: "104213340000000000"},
    }
    assert list(wire) == list(ml.ACTED_KEYS)
    check_line(wire)


def test_a_skipped_entry_serialises_to_exactly_the_documented_example() -> None:
    entry = Skipped(
        ts=1752398000, block=21894100, chain_id=8453, reason="cadence: last acted 14400s ago, interval 86400s"
    )
    wire = orjson.loads(LedgerCodec().encode(entry))
    assert wire == {
        "ts": 1752398000,
        "block": 21894100,
        "chainId": 8453,
        "kind": "skipped",
        "reason": "cadence: last acted 14400s ago, interval 86400s",
    }
    check_line(wire)


@pytest.mark.parametrize(
    ("units", "decimals", "symbol", "human"),
    [
        (25_000_000, 6, "USDC", "25.0 USDC"),
        (9_821_340_000_000_000, 18, "WETH", "0.00982134 WETH"),
        (0, 18, "WETH", "0.0 WETH"),
        (1, 18, "WETH", "0.000000000000000001 WETH"),
        (7, 0, "PTS", "7.0 PTS"),
        (123_456_789, 3, "X", "123456.789 X"),
    ],
)
def test_human_renders_base_units_with_the_tokens_decimals(
    units: int, decimals: int, symbol: str, human: str
) -> None:
    assert ml.format_human(units, decimals, symbol) == human


@given(units=st.integers(min_value=0, max_value=2**256 - 1), decimals=st.integers(min_value=0, max_value=36))
def test_human_is_exact_for_any_amount(units: int, decimals: int) -> None:
    amount, symbol = ml.format_human(units, decimals, "TKN").split(" ")
    whole, frac = amount.split(".")
    assert symbol == "TKN"
    assert int(whole) * 10**decimals + int(frac.ljust(decimals, "0")[:decimals] or "0") == units


@given(
    ts=st.integers(min_value=0, max_value=2**40),
    block=st.integers(min_value=0, max_value=2**40),
    gas=st.integers(min_value=0, max_value=2**64),
    units=st.integers(min_value=0, max_value=2**256 - 1),
    reason=st.text(min_size=1).filter(lambda s: s.strip() and "\n" not in s),
)
def test_entries_round_trip_through_the_codec(ts: int, block: int, gas: int, units: int, reason: str) -> None:
    codec = LedgerCodec()
    acted = confirmed(ts=ts, block=block, gas_used=gas, amount_out=Amount.of(units, 18, "WETH"))
    skipped = Skipped(ts=ts, block=block, chain_id=1, reason=reason)
    for entry in (acted, skipped):
        line = codec.encode(entry)
        assert b"\n" not in line
        assert codec.decode(line) == entry
        check_line(orjson.loads(line))


def test_a_reverted_entry_carries_what_is_knowable_and_null_for_the_rest() -> None:
    entry = confirmed(outcome=Outcome.REVERTED, amount_out=None, balances_after=None)
    wire = entry.to_wire()
    assert (wire["amountOut"], wire["balancesAfter"]) == (None, None)
    assert wire["amountIn"] == {"baseUnits": "25000000", "human": "25.0 USDC"}
    assert wire["gasUsed"] == "142013"


@pytest.mark.parametrize(
    ("outcome", "overrides", "field"),
    [
        (Outcome.REVERTED, {"balances_after": None}, "amountOut"),
        (Outcome.REVERTED, {"amount_out": None}, "balancesAfter"),
        (Outcome.UNVERIFIED, {"amount_out": None, "balances_after": None}, "block"),
        (Outcome.CONFIRMED, {"amount_out": None}, "amountOut"),
        (Outcome.CONFIRMED, {"gas_used": None}, "gasUsed"),
    ],
)
def test_a_made_up_or_missing_value_is_refused_by_outcome(
    outcome: Outcome, overrides: dict[str, object], field: str
) -> None:
    with pytest.raises(LedgerInvalidEntry) as info:
        confirmed(outcome=outcome, **overrides)
    assert info.value.field == field
    assert info.value.code == "ledger_invalid_entry"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"ts": 1.5}, "ts"),
        ({"ts": True}, "ts"),
        ({"chain_id": 0}, "chainId"),
        ({"tx_hash": "0x12"}, "txHash"),
        ({"token_in": "USDC"}, "tokenIn"),
        ({"gas_used": "142013"}, "gasUsed"),
        ({"balances_after": {TOKEN_IN: "5"}}, "balancesAfter"),
        ({"action": ""}, "action"),
    ],
)
def test_ill_typed_fields_are_refused_on_write(overrides: dict[str, object], field: str) -> None:
    with pytest.raises(LedgerInvalidEntry) as info:
        confirmed(**overrides)
    assert info.value.field == field


def test_a_multi_line_reason_is_refused() -> None:
    with pytest.raises(LedgerInvalidEntry):
        Skipped(ts=1, block=1, chain_id=1, reason="a\nb")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda w: w.update(extra=1),
        lambda w: w.pop("permission"),
        lambda w: w.update(gasUsed=142013),
        lambda w: w.update(ts="1752400000"),
        lambda w: w.update(outcome="ok"),
        lambda w: w.update(kind="trade"),
        lambda w: w["amountIn"].update(baseUnits=25000000),
        lambda w: w["amountIn"].update(human="25 USDC"),
        lambda w: w["amountIn"].update(note="x"),
        lambda w: w["balancesAfter"].update({TOKEN_IN: 1}),
    ],
)
def test_decode_refuses_anything_but_the_schema_as_damage_not_a_tear(mutate: object) -> None:
    wire = confirmed().to_wire()
    mutate(wire)  # type: ignore[operator]
    with pytest.raises(LineDamaged) as info:
        LedgerCodec().decode(orjson.dumps(wire))
    assert info.value.torn is False


def test_bytes_that_are_not_json_decode_as_a_possible_tear() -> None:
    line = LedgerCodec().encode(confirmed())[:40]
    with pytest.raises(LineDamaged) as info:
        LedgerCodec().decode(line)
    assert info.value.torn is True


def test_the_standard_reason_forms() -> None:
    assert ml.cadence_reason(14400, 86400) == "cadence: last acted 14400s ago, interval 86400s"
    assert ml.cadence_reason(0, 60) == "cadence: last acted 0s ago, interval 60s"
    assert ml.cadence_reason(-3780, 3600) == (  # stamped by a chain whose clock runs ahead
        "cadence: last acted 3780s ahead of this tick's clock (the chain's clock runs ahead of it), "
        "interval 3600s"
    )
    assert ml.balance_reason(5, 25) == "balance 5 < min 25"
    assert ml.allowance_reason(0, 25, "0xRouter") == "allowance 0 < 25 for 0xRouter — owner top-up needed"
    assert (
        ml.quote_unavailable_reason("execution\nreverted:  NO_ROUTE")
        == "quote unavailable: execution reverted: NO_ROUTE"
    )
    assert ml.QUOTE_RETURNED_ZERO == "quote returned 0"


@given(st.binary(max_size=300))
def test_any_bytes_decode_to_an_entry_or_raise_only_line_damaged(data: bytes) -> None:
    try:
        entry = LedgerCodec().decode(data)
    except LineDamaged:
        return
    assert isinstance(entry, Acted | Skipped)
