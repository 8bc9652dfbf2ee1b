"""Every activity record kind refuses a bad field the same way: each kind is fed each bad value of
each field it holds, built in Python and decoded from its JSON line, and must answer with the same
code, the field's wire name and the same reason as every other kind that holds that field."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from memory.ledger import (
    ActivityInvalidRecord,
    ActivityRecord,
    DispatchDropped,
    DispatchIncluded,
    DispatchMismatch,
    DispatchSettled,
    DispatchSigned,
    DispatchSubmitted,
    DispatchUnsent,
    ReorgAcknowledged,
    ReorgDetected,
    TickFinished,
    TickStarted,
    TokenMetadata,
)
from memory.ledger._activity import activity_from_wire

TX, ADDRESS, BLOCK_HASH = "0x" + "ab" * 32, "0x" + "cd" * 20, "0x" + "ef" * 32

#: one valid record of each kind
VALID: list[ActivityRecord] = [
    DispatchSigned(1, 1, TX, 0, ADDRESS, ADDRESS, "0x", "swap", None),
    DispatchSubmitted(1, 1, TX, ADDRESS, ADDRESS, "0x12", "swap", "perm"),
    DispatchSettled(1, "dispatch_reverted", TX, 7, 21_000, "why"),
    DispatchUnsent(1, TX, 3, "never sent"),
    DispatchDropped(1, TX, 3, "nonce taken"),
    DispatchMismatch(1, TX, "to", "a", "b"),
    DispatchIncluded(1, 1, TX, 7, BLOCK_HASH, 1),
    ReorgDetected(1, TX, 7, BLOCK_HASH, 8, BLOCK_HASH, 1, "moved"),
    ReorgAcknowledged(1, TX),
    TokenMetadata(1, ADDRESS, 6, "USDC"),
    TickStarted(1, 42),
    TickFinished(1, 42, "failed", None, None, "chain_unavailable", "down"),
]

#: a record's attribute → the name its errors give (its JSON key)
WIRE = {"chain_id": "chainId", "tx_hash": "txHash", "sender": "from", "block_hash": "blockHash",
        "gas_used": "gasUsed", "chain_block": "chainBlock", "chain_block_hash": "chainBlockHash",
        "chain_status": "chainStatus"}  # fmt: skip

NOT_UINT = [-1, 1.0, "1", True, None, 2**64]
NOT_TEXT = [None, 1, b"x", ["x"]]

#: wire name → (bad values, the reason every kind gives for them)
BAD: dict[str, tuple[list[Any], str]] = {
    "ts": (NOT_UINT, "must be unix seconds"),
    "chainId": ([0, *NOT_UINT], "must be a positive int"),
    "txHash": (["0x12", TX[2:], TX + "00", "0x" + "zz" * 32, None, 7], "not a hash"),
    "nonce": (NOT_UINT, "must be a non-negative int"),
    "from": (["0x12", ADDRESS[2:], None, 7], "not an address"),
    "to": (["0x12", ADDRESS[2:], None, 7], "not an address"),
    "token": (["0x12", ADDRESS[2:], None, 7], "not an address"),
    "data": (["0x1", "12", None, 7], "not 0x-hex calldata"),
    "action": (["", None, 7], "must be non-empty"),
    "permission": ([7, b"x"], "str or null"),
    "block": (NOT_UINT, "must be a block number"),
    "gasUsed": (NOT_UINT, "must be an int"),
    "blockHash": (["0x12", None, 7], "not a block hash"),
    "status": ([2, -1, True, 1.0, None], "must be 0 or 1"),
    "chainBlock": ([-1, 1.0, "1", True], "a block number or null"),
    "chainBlockHash": (["0x12", 7], "a block hash or null"),
    "chainStatus": ([2, True, 1.0, "1"], "0, 1 or null"),
    "decimals": ([256, *NOT_UINT], "must be an int in [0, 255]"),
    "symbol": (["", "US DC", None, 7], "must be a non-empty string without spaces"),
    "pid": (NOT_UINT, "must be a process id"),
    "outcome": (["done", None], "skipped, submitted or failed"),
    "field": (NOT_TEXT, "must be a string"),
    "local": (NOT_TEXT, "must be a string"),
    "chain": (NOT_TEXT, "must be a string"),
    "message": ([7, b"x"], "str or null"),
    "code": ([7, b"x"], "str or null"),
}

#: the fields one kind checks otherwise than the others: (kind, wire name) → (bad values, reason, name)
OWN: dict[tuple[type, str], tuple[list[Any], str, str]] = {
    (DispatchSettled, "reason"): ([7, b"x"], "str or null", "reason"),
    (DispatchSettled, "event"): (["dispatch_signed", None], "executed or reverted", "event"),
    (DispatchUnsent, "reason"): (["", None, 7], "must be non-empty", "reason"),
    (DispatchDropped, "reason"): (["", None, 7], "must be non-empty", "reason"),
    (ReorgDetected, "reason"): (["", None, 7], "must be non-empty", "reason"),
    (TickFinished, "reason"): ([7, b"x"], "str or null", "reason"),
    (TickFinished, "txHash"): ([7, b"x"], "str or null", "tx_hash"),  # named as the attribute
}


def _cases() -> list[tuple[ActivityRecord, str, Any, str, str]]:
    cases = []
    for record in VALID:
        for f in dataclasses.fields(record):  # type: ignore[arg-type]
            wire = WIRE.get(f.name, f.name)
            own = OWN.get((type(record), wire))
            if own is not None:
                values, reason, named = own
            else:
                values, reason = BAD[wire]
                named = wire
            cases += [(record, f.name, value, named, reason) for value in values]
    return cases


CASES = _cases()


def test_every_kind_and_every_field_it_holds_is_covered() -> None:
    kinds = {type(r) for r, *_ in CASES}
    assert kinds == {type(r) for r in VALID} and len(VALID) == 12
    held = {(type(r).__name__, attr) for r, attr, *_ in CASES}
    every = {(type(r).__name__, f.name) for r in VALID for f in dataclasses.fields(r)}  # type: ignore[arg-type]
    assert held == every


@pytest.mark.parametrize(
    ("record", "attr", "value", "named", "reason"),
    CASES,
    ids=[f"{type(r).__name__}-{a}-{v!r}" for r, a, v, *_ in CASES],
)
def test_a_bad_field_is_refused_with_the_same_code_name_and_reason_built_or_decoded(
    record: ActivityRecord, attr: str, value: Any, named: str, reason: str
) -> None:
    with pytest.raises(ActivityInvalidRecord) as built:
        dataclasses.replace(record, **{attr: value})  # type: ignore[type-var]
    assert (built.value.code, built.value.field, built.value.reason) == (
        "activity_invalid_record", named, reason,
    )  # fmt: skip
    assert str(built.value) == f"activity record field {named!r}: {reason}"
    wire = WIRE.get(attr, attr)
    if wire in ("gasUsed", "event"):
        return  # the line holds gasUsed as a decimal string, and its event names its kind
    line = {**record.to_wire(), wire: value}
    with pytest.raises(ActivityInvalidRecord) as decoded:
        activity_from_wire(line)
    assert (decoded.value.code, decoded.value.field, decoded.value.reason) == (
        "activity_invalid_record", named, reason,
    )  # fmt: skip


def test_each_valid_record_reads_back_from_its_line() -> None:
    for record in VALID:
        assert activity_from_wire(record.to_wire()) == record
