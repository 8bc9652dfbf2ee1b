"""What a recall returns: frozen, typed results that carry their citation (what learns, forgets,
``why`` and history return is in ``memory._outcomes``, made only when one of them is)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


def frozen_metadata(metadata: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``metadata`` as a read-only mapping (empty when None): results are shared between callers."""
    return MappingProxyType(dict(metadata) if metadata else {})


@dataclass(frozen=True)
class Citation:
    """The journal record a finding came from."""

    run_id: str
    stream: str
    id: str

    def as_json(self) -> dict[str, str]:
        """``{"runId", "stream", "id"}``, as in the learned files."""
        return {"runId": self.run_id, "stream": self.stream, "id": self.id}


@dataclass(frozen=True)
class Recalled:
    """A finding as read back: from the history DB (``id`` > 0) or an unsynced file (``id`` < 0).

    ``key`` is its content id; ``metadata`` is read-only (empty when the finding has none);
    ``expires_ms`` is when it stops being returned (None: never); ``revision`` is 0, or the number
    its key hashes when it was learned again after a retirement (``finding_id``). ``memory_id``
    names the memory this finding is a version of: the key of its first version, which every
    supersede and ``update`` carries on (a first version's is its own key).
    """

    id: int
    key: str
    text: str
    source: str
    tags: tuple[str, ...]
    scope: str
    flow: str
    learned_ms: int
    citation: Citation
    metadata: Mapping[str, Any] = field(default_factory=lambda: frozen_metadata(None), hash=False)
    expires_ms: int | None = None
    revision: int = 0
    memory: str | None = None  # the memory this version belongs to, when not its own key

    @property
    def synced(self) -> bool:
        """True when the finding was read from the history DB."""
        return self.id > 0

    @property
    def memory_id(self) -> str:
        """The id of the memory this finding is a version of (its first version's key)."""
        return self.memory or self.key

    def as_json(self) -> dict[str, Any]:
        """The finding with camelCase keys, as the CLI prints it with ``--json``."""
        return {
            "memoryId": self.memory_id,
            "id": self.id,
            "key": self.key,
            "text": self.text,
            "source": self.source,
            "tags": list(self.tags),
            "scope": self.scope,
            "flow": self.flow,
            "learnedMs": self.learned_ms,
            "metadata": dict(self.metadata),
            "expiresMs": self.expires_ms,
            "citation": {**self.citation.as_json(), "committedMs": self.learned_ms},
            "journal": self.citation.as_json(),
            **({"revision": self.revision} if self.revision else {}),
        }


HISTORY_KINDS = ("learned", "lost", "superseded", "forgotten", "expired", "erased")
"""The kinds of ``HistoryEvent``, in the order events of one instant are listed."""

HISTORY_PAGE = 100
"""How many events ``MemoryStore.history_page`` gives unless its ``limit`` says otherwise."""
