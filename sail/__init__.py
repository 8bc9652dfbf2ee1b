"""The agent tick loop, the dispatch runner and chain access through web3.

``tick`` is the canonical loop: reconcile → read memory → decide → skip or submit. Strategies
implement ``decide(state) -> Skip | Swap``; ``DcaStrategy`` is the example. ``Runner`` signs and
sends, keeping ``.sail/activity.jsonl``; ``Chain`` reads the chain. The ledger itself lives in
``memory.ledger``.

Names that need web3 are imported on first use, so ``import sail`` (and the ledger-reading CLI
commands) stay light.
"""

from __future__ import annotations

from typing import Any

from sail._config import SailConfig, load_config, save_config
from sail._errors import (
    SailChainMismatch,
    SailChainMissing,
    SailConfigInvalid,
    SailConfigMissing,
    SailError,
    SailKeyUnavailable,
    SailNodeUnavailable,
    SailSetupFailed,
    SailSubmitFailed,
    SailSubmitUncertain,
    SailTickTimeout,
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
    "SailChainMismatch",
    "SailChainMissing",
    "SailConfig",
    "SailConfigInvalid",
    "SailConfigMissing",
    "SailError",
    "SailKeyUnavailable",
    "SailNodeUnavailable",
    "SailSetupFailed",
    "SailSubmitFailed",
    "SailSubmitUncertain",
    "SailTickTimeout",
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


def __getattr__(name: str) -> Any:
    """Import a web3-dependent public name (or read the version) on first use."""
    if name == "__version__":  # importlib.metadata costs tens of milliseconds: only when asked
        import importlib.metadata

        try:  # the installed distribution's version (one for every package of flows-memory)
            globals()[name] = importlib.metadata.version("flows-memory")
        except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
            globals()[name] = "0+unknown"
        return globals()[name]
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sail' has no attribute {name!r}")
    from sail._extra import import_chain_module

    value = getattr(import_chain_module(module), name)
    globals()[name] = value
    return value
