"""Where a store's files hold a text: the check an erasure's tests make after it returns."""

from __future__ import annotations

import os
from pathlib import Path


def files_holding(base: Path, needle: str) -> list[str]:
    """Every regular file under ``base`` (links not followed) whose bytes hold ``needle``."""
    found = []
    for dirpath, _, names in os.walk(base):
        for name in names:
            path = Path(dirpath) / name
            if not path.is_symlink() and path.is_file() and needle.encode() in path.read_bytes():
                found.append(str(path))
    return found
