"""Importing the modules that need the ``chain`` extra, with a diagnostic that says how to get it."""

from __future__ import annotations

import importlib
from types import ModuleType

from sail._errors import SailChainMissing

#: the top-level modules the ``chain`` extra brings (web3 and the libraries sail imports beside it)
CHAIN_MODULES = frozenset({"web3", "eth_account", "eth_utils", "eth_abi", "hexbytes", "requests"})


def import_chain_module(name: str) -> ModuleType:
    """Import ``name`` (a sail module that needs web3).

    Raises:
        SailChainMissing: a module of the ``chain`` extra is not installed.
    """
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing not in CHAIN_MODULES:
            raise
        raise SailChainMissing(
            f"this sail command needs the chain extra ({missing} is not installed): "
            "pip install 'flows-memory[chain]'"
        ) from None
