"""Errors of the findings memory.

Every error has a stable ``code``. Journal errors are never wrapped: they pass through this layer
unchanged (SPEC R-J6). The tree::

    FlowsMemoryError              base (a staging.CodedError): path, run_id, errno
    ├── FindingInvalid            memory_finding_invalid: the caller's finding is malformed
    ├── Unjournaled               memory_unjournaled: learn was called with no root run
    ├── UnsupportedHeader         unsupported_header: the flow's header turns script memory off
    ├── Unwritable                memory_unwritable: staging or publishing the learned file failed
    └── Unreachable               memory_unreachable: a learned file or the history DB cannot be read
"""

from __future__ import annotations

from pathlib import Path

from staging import CodedError


class FlowsMemoryError(CodedError):
    """Base of the memory layer's errors; ``code`` is stable and listed in docs/SURFACE.md."""

    code = "memory_error"

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        run_id: str | None = None,
        errno: int | None = None,
    ) -> None:
        super().__init__(message)
        self.path = None if path is None else Path(path)
        self.run_id = run_id
        self.errno = errno


class FindingInvalid(FlowsMemoryError):
    """The finding is not a JSON object of ``text`` (required), ``source`` and ``tags``."""

    code = "memory_finding_invalid"


class Unjournaled(FlowsMemoryError):
    """``learn`` needs a root run to journal into; without one nothing is written."""

    code = "memory_unjournaled"


class UnsupportedHeader(FlowsMemoryError):
    """The flow's header says ``memory.script: false``, so learning is refused."""

    code = "unsupported_header"


class Unwritable(FlowsMemoryError):
    """The learned file could not be staged or published (space, permission, I/O)."""

    code = "memory_unwritable"


class Unreachable(FlowsMemoryError):
    """A learned file (or the history DB) could not be read or has the wrong shape."""

    code = "memory_unreachable"
