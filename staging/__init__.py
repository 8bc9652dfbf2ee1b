"""Staging: hidden temporary files, atomic publish, the fsync discipline, sweeping."""

from staging._errors import CodedError, CodedInterrupt, PublishFailed, StageFailed, StagingError
from staging._failpoints import hit as failpoint
from staging._stage import (
    DEFAULT_SWEEP_AGE_S,
    STAGE_PREFIX,
    OpenDir,
    Staged,
    ensure_dir,
    fsync_dir,
    have_syncfs,
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
    "OpenDir",
    "PublishFailed",
    "StageFailed",
    "Staged",
    "StagingError",
    "ensure_dir",
    "failpoint",
    "fsync_dir",
    "have_syncfs",
    "is_stage_name",
    "publish_many",
    "stage",
    "stale_stages",
    "sweep",
    "sync_dir_shared",
    "syncfs",
    "write_all",
]


HAVE_SYNCFS: bool
"""Whether ``syncfs`` is available (Linux); looked up on first use (``have_syncfs``), since the
lookup imports ctypes, which a process that never writes should not pay for at start-up."""


def __getattr__(name: str) -> object:
    if name == "HAVE_SYNCFS":
        have = globals()["HAVE_SYNCFS"] = have_syncfs()
        return have
    # the version is read from the installed distribution's metadata on first use: importing
    # importlib.metadata costs tens of milliseconds that a command which never asks should not pay
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib.metadata

    try:  # the installed distribution's version (one for every package of flows-memory)
        version = importlib.metadata.version("flows-memory")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        version = "0+unknown"
    globals()["__version__"] = version
    return version
