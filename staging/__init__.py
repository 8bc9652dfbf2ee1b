"""Staging: hidden temporary files, atomic publish, the fsync discipline, sweeping.

Its names are imported when first used (``__getattr__`` below): ``guarded_main``, the entry of the
console scripts, arms its Ctrl-C guard before the rest of this package (logging, dataclasses: tens
of milliseconds) is loaded.
"""

_TYPE_CHECKING = False  # typing itself is not loaded at start-up: the names below are for the checker
if _TYPE_CHECKING:
    from staging._errors import CodedError, CodedInterrupt, PublishFailed, StageFailed, StagingError
    from staging._failpoints import hit as failpoint
    from staging._interrupt import guarded_main
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
    "guarded_main",
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


_HOMES = {
    **dict.fromkeys(
        ("CodedError", "CodedInterrupt", "PublishFailed", "StageFailed", "StagingError"), "_errors"
    ),
    "failpoint": "_failpoints",
    "guarded_main": "_interrupt",
}


def __getattr__(name: str) -> object:
    if name in __all__ and name != "HAVE_SYNCFS":  # imported on first use: see above
        import importlib

        module = importlib.import_module(f"staging.{_HOMES.get(name, '_stage')}")
        value = globals()[name] = getattr(module, "hit" if name == "failpoint" else name)
        return value
    if name == "HAVE_SYNCFS":
        from staging._stage import have_syncfs

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
