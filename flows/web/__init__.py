"""``flows serve``: a read-only local web dashboard over a store's runs, findings and agent ledgers.

Needs the ``web`` extra (Starlette, uvicorn, Jinja2): ``pip install 'flows-memory[web]'``.
``import flows`` never imports this package, and importing it imports Starlette only when a name
that needs it (``create_app``, ``Dashboard``, ``Guard``) is first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from flows.web._errors import (
    ServeBadRequest,
    ServeBindFailed,
    ServeDbOutdated,
    ServeError,
    ServeExtraMissing,
    ServeHeadTooLarge,
    ServeInternal,
    ServeNotFound,
    ServeTokenRequired,
    ServeUnauthorized,
)

_LAZY = {
    "Dashboard": "flows.web._app",
    "Guard": "flows.web._app",
    "create_app": "flows.web._app",
    "Reader": "flows.web._reader",
    "ServeConfig": "flows.web._reader",
}

__all__ = [
    "Dashboard",
    "Guard",
    "Reader",
    "ServeBadRequest",
    "ServeBindFailed",
    "ServeConfig",
    "ServeDbOutdated",
    "ServeError",
    "ServeExtraMissing",
    "ServeHeadTooLarge",
    "ServeInternal",
    "ServeNotFound",
    "ServeTokenRequired",
    "ServeUnauthorized",
    "create_app",
]


def __getattr__(name: str) -> Any:
    """Import a name that needs the web extra on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'flows.web' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
