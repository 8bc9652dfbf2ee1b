"""The root run a write journals into: what ``learn`` and ``forget`` need of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from journal import JournalBackend, Lease


class Root(Protocol):
    """What a learn or a forget needs of its root run. ``RootRun`` is one; a session's root is
    another, begun only when a write first needs it (``begun`` says whether it has been)."""

    @property
    def journal(self) -> JournalBackend: ...
    @property
    def lease(self) -> Lease: ...
    @property
    def flow(self) -> str: ...
    @property
    def scope(self) -> str: ...
    @property
    def script(self) -> bool: ...
    @property
    def source(self) -> str | None: ...
    @property
    def run_id(self) -> str: ...
    @property
    def begun(self) -> bool: ...


@dataclass(frozen=True)
class RootRun:
    """The root run a learn journals into: the backend, the lease, and the flow's name and scope.

    ``script`` is the flow header's ``memory.script``; when False every learn raises
    ``UnsupportedHeader``. ``source`` is a finding's default source (the flow's name when None).
    """

    journal: JournalBackend
    lease: Lease
    flow: str
    scope: str
    script: bool = True
    source: str | None = None

    @property
    def run_id(self) -> str:
        """The root run's id."""
        return self.lease.run_id

    @property
    def begun(self) -> bool:
        """Always True: a ``RootRun`` is a run already begun."""
        return True
