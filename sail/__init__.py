"""The agent tick loop, the dispatch runner and chain access through web3.

``tick`` is the canonical loop: reconcile → read memory → decide → skip or submit. Strategies
implement ``decide(state) -> Skip | Swap``; ``DcaStrategy`` is the example. ``Runner`` signs and
sends, keeping ``.sail/activity.jsonl``; ``Chain`` reads the chain. The ledger itself lives in
``memory.ledger``.

Every name is imported on first use (those that need web3 through the ``chain`` extra), so ``import
sail`` costs nothing and the ledger-reading CLI commands stay light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any

if _TYPE_CHECKING:
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

# no web3, but the ledger and the journal (a second on a small machine): imported on first use too,
# so that ``sail._entry`` (the console script) arms its Ctrl-C guard before any of it is loaded
_LIGHT = {
    **dict.fromkeys(("SailConfig", "load_config", "save_config"), "sail._config"),
    **dict.fromkeys(
        (
            "SailChainMismatch",
            "SailChainMissing",
            "SailConfigInvalid",
            "SailConfigMissing",
            "SailError",
            "SailKeyUnavailable",
            "SailNodeUnavailable",
            "SailSetupFailed",
            "SailSubmitFailed",
            "SailSubmitUncertain",
            "SailTickTimeout",
        ),
        "sail._errors",
    ),
}

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
    if name in _LIGHT:
        import importlib

        value = globals()[name] = getattr(importlib.import_module(_LIGHT[name]), name)
        return value
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'sail' has no attribute {name!r}")
    from sail._extra import import_chain_module

    value = getattr(import_chain_module(module), name)
    globals()[name] = value
    return value
