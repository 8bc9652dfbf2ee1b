"""The compiled contracts sail ships (ABI and bytecode from ``contracts/*.sol`` via npm ``solc``)."""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import orjson

CONTRACT_NAMES = ("TestToken", "SwapRouter", "LookalikeToken", "Bytes32Token")


@cache
def artifact(name: str) -> dict[str, Any]:
    """The compiled artifact of contract ``name``: ``abi``, ``bytecode``, ``compiler``, ``sourceSha256``.

    Raises:
        FileNotFoundError: no such contract is shipped.
    """
    data = resources.files("sail").joinpath("contracts", f"{name}.json").read_bytes()
    loaded: dict[str, Any] = orjson.loads(data)
    return loaded


def abi(name: str) -> list[dict[str, Any]]:
    """The ABI of contract ``name``."""
    out: list[dict[str, Any]] = artifact(name)["abi"]
    return out
