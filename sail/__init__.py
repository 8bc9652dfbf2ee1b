"""The agent tick loop, the dispatch runner and chain access through web3 (SPEC R-A).

``tick`` is the canonical loop: reconcile → read memory → decide → skip or submit. Strategies
implement ``decide(state) -> Skip | Swap``; ``DcaStrategy`` is the example. ``Runner`` signs and
sends, keeping ``.sail/activity.jsonl``; ``Chain`` reads the chain. The ledger itself lives in
``memory.ledger``.

Names that need web3 are imported on first use, so ``import sail`` (and the ledger-reading CLI
commands) stay light.
"""

from __future__ import annotations

import importlib.metadata as _metadata
from typing import Any

from sail._config import SailConfig, load_config, save_config
from sail._errors import (
    SailChainMissing,
    SailConfigInvalid,
    SailConfigMissing,
    SailError,
    SailKeyUnavailable,
    SailNodeUnavailable,
    SailSubmitFailed,
)

_LAZY = {
    "Chain": "sail._chain",
    "ChainView": "sail._chain",
    "QuoteUnavailable": "sail._chain",
    "DcaStrategy": "sail._strategy",
    "Skip": "sail._strategy",
    "Strategy": "sail._strategy",
    "Swap": "sail._strategy",
    "TickState": "sail._strategy",
    "Dispatched": "sail._runner",
    "Runner": "sail._runner",
    "load_account": "sail._runner",
    "TickResult": "sail._tick",
    "tick": "sail._tick",
    "tick_from_config": "sail._tick",
    "AnvilNode": "sail._node",
}

__all__ = [
    "AnvilNode",
    "Chain",
    "ChainView",
    "DcaStrategy",
    "Dispatched",
    "QuoteUnavailable",
    "Runner",
    "SailChainMissing",
    "SailConfig",
    "SailConfigInvalid",
    "SailConfigMissing",
    "SailError",
    "SailKeyUnavailable",
    "SailNodeUnavailable",
    "SailSubmitFailed",
    "Skip",
    "Strategy",
    "Swap",
    "TickResult",
    "TickState",
    "load_account",
    "load_config",
    "save_config",
    "tick",
    "tick_from_config",
]

try:  # the installed distribution's version (one for every package of flows-memory)
    __version__: str = _metadata.version("flows-memory")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    """Import a web3-dependent public name on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sail' has no attribute {name!r}")
    from sail._extra import import_chain_module

    value = getattr(import_chain_module(module), name)
    globals()[name] = value
    return value
