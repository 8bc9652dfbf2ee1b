"""Hosts sharing one journal (on PostgreSQL: the test's private schema). A host is a ``<db-dir>``
of its own, ``<base>/<name>``: the processes of a host share it, and the hosts share the journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import memory


def host_db(base: Path, name: str) -> Path:
    """The history DB of host ``name`` under ``base`` (not created)."""
    return base / name / "history.db"


def host(base: Path, name: str, journal: str, **options: Any) -> memory.MemoryStore:
    """Host ``name``'s store on ``journal`` (``options`` as ``MemoryStore`` takes them)."""
    return memory.MemoryStore(host_db(base, name), journal=journal, **options)


def two_hosts(base: Path, journal: str) -> tuple[memory.MemoryStore, memory.MemoryStore]:
    """Hosts ``a`` and ``b`` on ``journal``, each open."""
    return host(base, "a", journal), host(base, "b", journal)
