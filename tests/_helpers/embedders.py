"""What the deterministic test embedders share: each word of a text hashed into one of ``dims``
buckets, so texts that share words point the same way and nothing depends on a model."""

from __future__ import annotations

import zlib
from collections.abc import Iterable


def hashed_words(texts: Iterable[str], dims: int) -> list[list[float]]:
    """One vector per text: bucket ``crc32(word) % dims`` counts each (lower-cased) word."""
    out = []
    for t in texts:
        v = [0.0] * dims
        for w in t.lower().split():
            v[zlib.crc32(w.encode()) % dims] += 1.0
        out.append(v)
    return out
