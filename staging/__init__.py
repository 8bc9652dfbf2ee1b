"""Staging: hidden temporary files, atomic publish, the fsync discipline, sweeping (SPEC R-S)."""

import importlib.metadata as _metadata

from staging._errors import CodedError, CodedInterrupt, PublishFailed, StageFailed, StagingError
from staging._failpoints import hit as failpoint
from staging._stage import (
    DEFAULT_SWEEP_AGE_S,
    HAVE_SYNCFS,
    STAGE_PREFIX,
    Staged,
    ensure_dir,
    fsync_dir,
    is_stage_name,
    publish_many,
    stage,
    stale_stages,
    sweep,
    sync_dir_shared,
    syncfs,
    write_all,
)

__all__ = [
    "DEFAULT_SWEEP_AGE_S",
    "HAVE_SYNCFS",
    "STAGE_PREFIX",
    "CodedError",
    "CodedInterrupt",
    "PublishFailed",
    "StageFailed",
    "Staged",
    "StagingError",
    "ensure_dir",
    "failpoint",
    "fsync_dir",
    "is_stage_name",
    "publish_many",
    "stage",
    "stale_stages",
    "sweep",
    "sync_dir_shared",
    "syncfs",
    "write_all",
]

try:  # the installed distribution's version (one for every package of flows-memory)
    __version__: str = _metadata.version("flows-memory")
except _metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
