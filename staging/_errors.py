"""Errors of the staging layer.

The tree::

    StagingError            base: code, message, path, errno
    ├── StageFailed         staging_stage_failed: the temporary file could not be created, written or fsync'd
    └── PublishFailed       staging_publish_failed: the rename or the directory fsync failed

Both wrap the ``OSError`` that caused them (``__cause__``) and keep its ``errno``, so the layers
above can translate them into their own codes in one place.
"""

from __future__ import annotations

from pathlib import Path


class StagingError(Exception):
    """Base of staging errors; ``code`` is stable, ``errno`` is the cause's (or None)."""

    code = "staging_error"

    def __init__(self, message: str, *, path: str | Path, errno: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = Path(path)
        self.errno = errno

    def __str__(self) -> str:
        return self.message


class StageFailed(StagingError):
    """The stage could not be made: no space, no permission, not a directory, an I/O error."""

    code = "staging_stage_failed"


class PublishFailed(StagingError):
    """The staged file could not be renamed into place, or the rename could not be made durable."""

    code = "staging_publish_failed"
