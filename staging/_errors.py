"""The one base of every coded error, and the errors of the staging layer.

``CodedError`` lives here, in the bottom layer, so every package may derive from it: a CLI catches
that one class, and a test walks its subclasses to check each code is documented. The whole tree,
package by package (each package's module docstring draws its own branch)::

    CodedError                        base: code, message, context fields, as_json()
    ├── staging.StagingError          the staging layer (below)
    ├── journal.JournalError          the journal kernel
    ├── memory.FlowsMemoryError       findings memory
    ├── memory.ledger.LedgerError     the agent ledger
    ├── flows.FlowsError              the flows runtime, and its integrations' branches:
    │   ├── flows.mcp.McpError        the MCP server
    │   ├── flows.web.ServeError      the dashboard
    │   └── flows.langgraph.LangGraphAdapterError   the LangGraph adapters (a LangGraph caller's
    │                                 built-in type, ValueError or TypeError, is a second base)
    ├── sail.SailError                the agent's config, keys, node and submission
    └── memory.cli.UsageError …       a command line the CLIs refuse, an escaped bug

    CodedInterrupt                    the same face on a KeyboardInterrupt (never caught as Exception)
    ├── flows.RunInterrupted          Ctrl-C stopped a flow run; the root is left interrupted
    └── memory.cli.Interrupted        Ctrl-C stopped any other command

The interrupt branch is apart from ``CodedError`` on purpose: a Ctrl-C must never be swallowed by
an ``except Exception`` (a flow body's own, or a library's), yet the CLIs report it like any coded
error, with its code and exit status 130. So it shares the face (``_Coded``: code, message, context,
``as_json``) but not the base.

Staging's branch::

    StagingError            base: code, message, path, errno
    ├── StageFailed         staging_stage_failed: the temporary file could not be created, written or fsync'd
    └── PublishFailed       staging_publish_failed: the rename or the directory fsync failed

Both wrap the ``OSError`` that caused them (``__cause__``) and keep its ``errno``, so the layers
above can translate them into their own codes in one place.
"""

from __future__ import annotations

from pathlib import Path, PurePath
from typing import Any, ClassVar


class _Coded:
    """What every coded exception has: ``code``, ``message``, context fields and ``as_json()``."""

    code: ClassVar[str]
    message: str

    def __str__(self) -> str:
        return self.message

    def context(self) -> dict[str, Any]:
        """The error's context fields that are set, by attribute name (``run_id``, ``path`` …)."""
        return {
            name: value
            for name, value in vars(self).items()
            if name != "message" and not name.startswith("_") and value is not None
        }

    def as_json(self) -> dict[str, Any]:
        """``{"code", "message", ...context}``, context keys in camelCase, values JSON-ready."""
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        for name, value in self.context().items():
            out[_camel(name)] = _plain(value)
        return out


class CodedError(_Coded, Exception):
    """Base of every error the project raises for a user.

    ``code`` is a stable string, one per class, listed in docs/SURFACE.md; ``message`` says what
    happened and what to do. Every public attribute an error sets besides ``message`` is context
    (``path``, ``run_id``, ``stream``, ``line``, ``expected``/``got`` …), and ``as_json()`` reports it.

    Args:
        message: the text ``str(error)`` returns.
    """

    code: ClassVar[str] = "coded_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CodedInterrupt(_Coded, KeyboardInterrupt):
    """A ``KeyboardInterrupt`` that says what it stopped, with a code like any coded error.

    It is a ``KeyboardInterrupt`` on purpose: ``except Exception`` must not swallow a Ctrl-C. The
    CLIs catch it beside ``CodedError`` and exit 130.

    Args:
        message: the text ``str(error)`` returns.
    """

    code: ClassVar[str] = "coded_interrupt"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _plain(value: object) -> object:
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool):
        return value
    return str(value)


class StagingError(CodedError):
    """Base of staging errors; ``code`` is stable, ``errno`` is the cause's (or None)."""

    code = "staging_error"

    def __init__(self, message: str, *, path: str | Path, errno: int | None = None) -> None:
        super().__init__(message)
        self.path = Path(path)
        self.errno = errno


class StageFailed(StagingError):
    """The stage could not be made: no space, no permission, not a directory, an I/O error."""

    code = "staging_stage_failed"


class PublishFailed(StagingError):
    """The staged file could not be renamed into place, or the rename could not be made durable."""

    code = "staging_publish_failed"
