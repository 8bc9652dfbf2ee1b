"""How much of a list fits in an answer's bytes: the dashboard's lists and the MCP server's results
hold at most ``LIST_MAX_BYTES`` of items, so a page of large findings (a text of a million control
characters is six million bytes as JSON) stays a bounded answer, built a piece at a time."""

from __future__ import annotations

from collections.abc import Iterable

LIST_MAX_BYTES = 8 * 1024 * 1024
"""The most bytes of items a list answer holds (the first item is always given, however large)."""


def fitting(sizes: Iterable[int], max_bytes: int = LIST_MAX_BYTES) -> int | None:
    """How many items, of the sizes ``sizes`` gives in order, fit in ``max_bytes`` (at least one);
    None when all do. ``sizes`` is read only as far as the cut: an item past it is never measured."""
    total = 0
    for n, size in enumerate(sizes):
        total += size
        if n and total > max_bytes:
            return n
    return None
