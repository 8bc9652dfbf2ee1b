"""Where the history DB, the learned files and the file journal live."""

from __future__ import annotations

import os
from pathlib import Path

from memory._finding import scope_hash

LEARNED_ROOT = "flows-memory"
JOURNAL_DIR = "flows-journal"


def resolve_db(db: str | os.PathLike[str] | None = None) -> Path:
    """The history DB: ``db`` if given, else ``$FLOWS_DB``, else ``$XDG_DATA_HOME/flows/history.db``
    (``~/.local/share/flows/history.db`` when ``$XDG_DATA_HOME`` is unset)."""
    if db is not None:
        return Path(db).expanduser().absolute()
    env = os.environ.get("FLOWS_DB")
    if env:
        return Path(env).expanduser().absolute()
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home).expanduser().absolute() / "flows" / "history.db"


def resolve_journal(db_path: Path, journal: str | os.PathLike[str] | None = None) -> str:
    """The journal's location: ``journal`` if given, else ``$FLOWS_JOURNAL``, else
    ``<db-dir>/flows-journal`` (the embedded file journal)."""
    if journal is not None:
        return os.fspath(journal)
    env = os.environ.get("FLOWS_JOURNAL")
    if env:
        return env
    return str(db_path.parent / JOURNAL_DIR)


def learned_root(db_path: Path) -> Path:
    """``<db-dir>/flows-memory``: learned files and nothing else."""
    return db_path.parent / LEARNED_ROOT


def learned_dir(db_path: Path, scope: str) -> Path:
    """The directory of one scope's learned files."""
    return learned_root(db_path) / scope_hash(scope) / ".trajectories" / "compacted"


def retired_dir(db_path: Path, scope: str) -> Path:
    """The directory of one scope's retired files: one per forgotten or superseded finding, named
    after its key, kept for good (it is what keeps the finding out of every read)."""
    return learned_root(db_path) / scope_hash(scope) / ".trajectories" / "retired"


def scope_folders(db_path: Path) -> list[Path]:
    """Every scope's folder (``<db-dir>/flows-memory/<scope-hash>``) that exists."""
    root = learned_root(db_path)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    return [root / n for n in names if not n.startswith(".") and (root / n).is_dir()]


def retired_dirs(db_path: Path) -> list[Path]:
    """Every scope's retired-file directory that exists."""
    return [d for f in scope_folders(db_path) if (d := f / ".trajectories" / "retired").is_dir()]


def scope_dirs(db_path: Path) -> list[Path]:
    """Every scope's learned-file directory that exists under ``<db-dir>/flows-memory``."""
    root = learned_root(db_path)
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []
    dirs = []
    for name in names:
        d = root / name / ".trajectories" / "compacted"
        if not name.startswith(".") and d.is_dir():
            dirs.append(d)
    return dirs
