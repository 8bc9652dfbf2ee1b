"""The ``sail`` command line (the agent ledger and tick loop land with their issue)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Say that the agent commands are not built yet; exit 2."""
    print("sail: not yet: the agent ledger and tick loop land with their issue", file=sys.stderr)
    return 2
