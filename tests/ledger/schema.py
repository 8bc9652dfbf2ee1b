"""An independent check of the entry schema, written from the schema's description, not from the codec.

Every ledger a test produces is checked line by line with ``assert_entry_schema`` (see the
autouse fixtures in tests/ledger/conftest.py and tests/sail/conftest.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

COMMON = {"ts", "block", "chainId", "kind"}
ACTED = COMMON | {
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
}
SKIPPED = COMMON | {"reason"}
_UINT = re.compile(r"^(0|[1-9][0-9]*)$")
_ADDR = re.compile(r"^0x[0-9a-fA-F]{40}$")
_HASH = re.compile(r"^0x[0-9a-fA-F]{64}$")
_HUMAN = re.compile(r"^[0-9]+\.[0-9]+ \S+$")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_amount(v: Any) -> None:
    assert isinstance(v, dict) and set(v) == {"baseUnits", "human"}, v
    assert isinstance(v["baseUnits"], str) and _UINT.match(v["baseUnits"]), v
    assert isinstance(v["human"], str) and _HUMAN.match(v["human"]), v


def check_line(obj: dict[str, Any]) -> None:
    """Assert one decoded ledger line has exactly the schema's keys and types."""
    assert _is_int(obj["ts"]) and (obj["block"] is None or _is_int(obj["block"])), obj
    assert _is_int(obj["chainId"]), obj
    if obj["kind"] == "skipped":
        assert set(obj) == SKIPPED, sorted(obj)
        assert isinstance(obj["reason"], str) and obj["reason"], obj
        return
    assert obj["kind"] == "acted" and set(obj) == ACTED, sorted(obj)
    assert obj["outcome"] in ("confirmed", "reverted", "unverified")
    assert isinstance(obj["action"], str) and (
        obj["permission"] is None or isinstance(obj["permission"], str)
    )
    assert isinstance(obj["txHash"], str) and _HASH.match(obj["txHash"])
    assert obj["gasUsed"] is None or (isinstance(obj["gasUsed"], str) and _UINT.match(obj["gasUsed"]))
    for key in ("tokenIn", "tokenOut"):
        assert obj[key] is None or _ADDR.match(obj[key])
    for key in ("amountIn", "amountOut"):
        if obj[key] is not None:
            _check_amount(obj[key])
    if obj["balancesAfter"] is not None:
        for token, units in obj["balancesAfter"].items():
            assert _ADDR.match(token) and isinstance(units, str) and _UINT.match(units)
    if obj["outcome"] == "confirmed":
        assert None not in (obj["block"], obj["gasUsed"], obj["amountOut"], obj["balancesAfter"]), obj
    else:
        assert obj["amountOut"] is None and obj["balancesAfter"] is None, obj


def assert_entry_schema(root: Path) -> int:
    """Check every complete line of every ledger.jsonl under ``root``; return how many were checked."""
    checked = 0
    for path in root.rglob("ledger.jsonl"):
        if "damaged" in path.parts:
            continue  # a test that damages a ledger on purpose keeps it there
        for raw in path.read_bytes().split(b"\n")[:-1]:  # the text after the last newline is no line
            check_line(json.loads(raw))
            checked += 1
    return checked
