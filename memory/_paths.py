"""Where the history DB, the learned files and the file journal live."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path

from journal import JournalLocationInvalid, file_location, shown_location
from memory._errors import ArgumentInvalid, StoreMissing, Unreachable
from memory._finding import scope_hash
from memory._safe import describe, kind_of, regular_prefix

LEARNED_ROOT = "flows-memory"
JOURNAL_DIR = "flows-journal"
RETIRED_LEAF = "retired"  # beside a scope's folder of learned files: its retired files


QUARANTINE_DIR = "flows-quarantine"
"""Where ``flows check --repair`` moves what is not what the store expects at its place."""


DB_NAME_MAX = 247
"""The longest history DB file name, in bytes: a file system's 255, less SQLite's ``-journal``."""
DB_FOLDER_MAX = 3839
"""The longest path of a history DB's folder, in bytes: ``PATH_MAX`` (4096) less room for the
store's own files under it (``flows-memory/<scope>/.trajectories/…``, ``flows-journal/runs/…``)."""


def resolve_db(db: str | os.PathLike[str] | None = None) -> Path:
    """The history DB: ``db`` if given, else ``$FLOWS_DB``, else ``$XDG_DATA_HOME/flows/history.db``
    (``~/.local/share/flows/history.db`` when ``$XDG_DATA_HOME`` is unset).

    Raises:
        ArgumentInvalid: ``db`` or a set ``$FLOWS_DB`` is empty (it would name the current folder, or
            leave the writes to the default store), or the path holds NUL,
            a name over 255 bytes (the DB's own over ``DB_NAME_MAX``) or a folder path over
            ``DB_FOLDER_MAX`` bytes: no file could be made there; or it holds bytes that are not
            UTF-8 (lone surrogates), which the store could not write in its URIs and records.
    """
    if db is not None:
        if not os.fspath(db):
            raise ArgumentInvalid(
                "the history DB path is empty: give the DB's file (--db PATH), e.g. ./store/history.db"
            )
        return _usable(Path(db).expanduser().absolute())
    env = os.environ.get("FLOWS_DB")
    if env is not None:
        if not env:  # set but empty (``FLOWS_DB=$STORE`` with $STORE unset): never the default store
            raise ArgumentInvalid(
                "$FLOWS_DB is set but empty: set it to the DB's file (e.g. ./store/history.db), or "
                "unset it to use the default store",
                path="$FLOWS_DB",
            )
        return _usable(Path(env).expanduser().absolute())
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return _usable(Path(data_home).expanduser().absolute() / "flows" / "history.db")


def _not_utf8(text: str) -> int | None:
    """Where ``text`` (a name the OS gave) holds a byte that is not UTF-8 (Python reads one as a lone
    surrogate): its index, or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


def _usable(path: Path) -> Path:
    """``path`` when a history DB and its store could be made there; else ``ArgumentInvalid``."""
    text = os.fspath(path)
    odd = _not_utf8(text)
    if odd is not None:  # the store writes its paths in UTF-8 (SQLite's URIs, the journal, JSON)
        # checked before ``fsencode``, which fails on a lone surrogate no undecodable byte makes
        # (U+D800, passed by a caller), with a bare UnicodeEncodeError
        shown = repr(text[:200])[1:-1] + ("…" if len(text) > 200 else "")
        raise ArgumentInvalid(
            f"the history DB path {shown} is not UTF-8 (character {odd} is a byte no UTF-8 text holds): "
            "give a path whose names are UTF-8, or rename the folder",
            path=path,
        )
    raw = os.fsencode(path)
    if len(raw) <= 255 and b"\0" not in raw:
        return path  # the usual path: every name in it is short enough
    shown = repr(os.fsdecode(raw[:200]))[1:-1] + ("…" if len(raw) > 200 else "")
    if b"\0" in raw:
        raise ArgumentInvalid(
            f"the history DB path {shown} holds a NUL character: give a path without one", path=path
        )
    folder, name = os.path.split(raw)
    if len(name) > DB_NAME_MAX:
        raise ArgumentInvalid(
            f"the history DB file name in {shown} is {len(name)} bytes, longer than {DB_NAME_MAX} "
            "(255 less SQLite's -journal): give a shorter name",
            path=path,
        )
    if len(folder) > DB_FOLDER_MAX or any(len(part) > 255 for part in folder.split(b"/")):
        raise ArgumentInvalid(
            f"the history DB's folder in {shown} has a name over 255 bytes or is longer than "
            f"{DB_FOLDER_MAX} bytes, which leaves no room for the store's files: give a shorter path",
            path=path,
        )
    return path


def resolve_journal(db_path: Path, journal: str | os.PathLike[str] | None = None) -> str:
    """The journal's location: ``journal`` if given, else ``$FLOWS_JOURNAL``, else
    ``<db-dir>/flows-journal`` (the embedded file journal).

    Raises:
        JournalLocationInvalid: the location given holds bytes that are not UTF-8 (lone surrogates).
    """
    location = os.fspath(journal) if journal is not None else os.environ.get("FLOWS_JOURNAL")
    if location is None or (journal is None and not location):  # an empty one given is refused
        return os.path.join(os.path.dirname(db_path), JOURNAL_DIR)  # ``db_path.parent / JOURNAL_DIR``
    if _not_utf8(location) is not None:  # the store writes the location in UTF-8 (its memo, JSON)
        raise JournalLocationInvalid(
            f"the journal location {repr(shown_location(location))[:200]} holds bytes that are not "
            "UTF-8: give a folder (or a DSN) whose text is UTF-8, or rename the folder"
        )
    return location


def learned_root(db_path: Path) -> Path:
    """``<db-dir>/flows-memory``: learned files and nothing else."""
    return db_path.parent / LEARNED_ROOT


def learned_dir(db_path: Path, scope: str) -> Path:
    """The directory of one scope's learned files."""
    return learned_root(db_path) / scope_hash(scope) / ".trajectories" / "compacted"


def retired_dir(db_path: Path, scope: str) -> Path:
    """The directory of one scope's retired files: one per forgotten or superseded finding, named
    after its key, kept for good (it is what keeps the finding out of every read)."""
    return learned_root(db_path) / scope_hash(scope) / ".trajectories" / RETIRED_LEAF


def scope_folders(db_path: Path) -> list[Path]:
    """Every scope's folder (``<db-dir>/flows-memory/<scope-hash>``) that exists, looked at without
    following links.

    Raises:
        Unreachable: ``flows-memory`` or a scope folder is a link or not a folder (named), or
            cannot be listed.
    """
    return _raising(lambda: scan_scopes(db_path, leaf=None))


def stage_folders(scope_dirs: list[Path]) -> list[Path]:
    """The folders of ``scope_dirs`` (``scope_folders``) where hidden stage files may be: each scope's
    learned-file and retired-file folders."""
    return [f / ".trajectories" / sub for f in scope_dirs for sub in ("compacted", RETIRED_LEAF)]


def retired_dirs(db_path: Path) -> list[Path]:
    """Every scope's retired-file directory that exists (see ``scope_dirs``)."""
    return _raising(lambda: scan_scopes(db_path, leaf=RETIRED_LEAF))


def scan_scopes(db_path: Path, leaf: str | None = "compacted") -> tuple[list[Path], list[tuple[Path, str]]]:
    """Every scope's ``.trajectories/<leaf>`` folder (the scope folders themselves when ``leaf`` is
    None) under ``<db-dir>/flows-memory``, looked at without following links: ``(folders, wrong)``,
    where ``wrong`` lists each path that is a link or not a folder where a folder belongs
    (``flows-memory`` itself, a scope folder, its ``.trajectories`` or ``<leaf>``), with what it is.
    Hidden names are skipped; a scope whose folder is not there yet is no folder.

    Raises:
        OSError: a folder could not be listed (permission, I/O); ``filename`` names it.
    """
    leaves, wrong, _, _, _ = _scan(db_path, leaf)
    return leaves, wrong


def scope_tree(
    db_path: Path, root_stat: os.stat_result | None = None
) -> tuple[list[Path], list[Path], int, list[os.stat_result]]:
    """From one listing of ``<db-dir>/flows-memory``: every scope's learned-file directory that
    exists (``scope_dirs``), every scope folder's retired-file directory (there or not: the
    ``retired_dir`` of each scope folder ``scope_folders`` finds), how many names (not hidden)
    the listing held, and the ``lstat`` of each learned-file directory (in its order), taken once
    every folder on its way was found a real folder, none a link. ``root_stat`` is the caller's own
    ``lstat`` of ``flows-memory``, when it has one (it is not taken again).

    Raises:
        Unreachable: as ``scope_dirs``.
    """
    try:
        leaves, wrong, retired, listed, stats = _scan(db_path, "compacted", retired=True, root_stat=root_stat)
    except OSError as exc:
        raise Unreachable(f"cannot list {exc.filename}: {describe(exc)}", path=exc.filename) from exc
    if wrong:
        path, what = wrong[0]
        raise Unreachable(wrong_folder_message(path, what), path=path)
    return leaves, retired, listed, stats


def _scan(
    db_path: Path, leaf: str | None, *, retired: bool = False, root_stat: os.stat_result | None = None
) -> tuple[list[Path], list[tuple[Path, str]], list[Path], int, list[os.stat_result]]:
    """``scan_scopes``'s ``(folders, wrong)``, then the scope folders themselves that are real
    folders (with ``retired``, their ``.trajectories/retired`` instead), how many names (not
    hidden) ``flows-memory`` listed, and the ``lstat`` of each of the folders (``root_stat``:
    ``flows-memory``'s, when the caller took it)."""
    root = os.path.join(os.path.dirname(db_path), LEARNED_ROOT)  # ``learned_root``, as a string
    wrong: list[tuple[Path, str]] = []
    what = _wrong_folder(root) if root_stat is None else _what_folder(root_stat.st_mode)
    if what == "missing":
        return [], [], [], 0, []
    if what:
        return [], [(Path(root), what)], [], 0, []
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return [], [], [], 0, []
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, root) from None
    leaves: list[Path] = []
    stats: list[os.stat_result] = []
    scopes: list[Path] = []
    listed = 0
    for name in names:
        if name.startswith("."):
            continue
        listed += 1
        probe = os.path.join(root, name)
        what, st = _folder_stat(probe)
        if not what:
            scopes.append(Path(f"{probe}/.trajectories/retired" if retired else probe))
            for part in (".trajectories", leaf) if leaf else ():
                probe = os.path.join(probe, part)
                what, st = _folder_stat(probe)
                if what:
                    break
        if what == "missing":
            continue
        if what:
            wrong.append((Path(probe), what))
        else:
            assert st is not None
            leaves.append(Path(probe))
            stats.append(st)
    return leaves, wrong, scopes, listed, stats


def _wrong_folder(path: Path | str) -> str:
    """``""`` for a real folder, ``"missing"``, or what else is at ``path`` (never following a link)."""
    return _folder_stat(path)[0]


def _folder_stat(path: Path | str) -> tuple[str, os.stat_result | None]:
    """``_wrong_folder``'s answer, and the ``lstat`` it took (None when nothing is there)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "missing", None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None
    return _what_folder(st.st_mode), st


def _what_folder(mode: int) -> str:
    """``""`` for a folder's mode, else what the mode says is there instead."""
    if stat.S_ISDIR(mode):
        return ""
    if stat.S_ISLNK(mode):
        return "a symbolic link, which the store never follows"
    return f"{kind_of(mode)} where a folder belongs"


def scope_dirs(db_path: Path) -> list[Path]:
    """Every scope's learned-file directory that exists under ``<db-dir>/flows-memory``.

    Raises:
        Unreachable: a folder on the way is a symbolic link or not a folder (named), or cannot be
            listed.
    """
    return _raising(lambda: scan_scopes(db_path))


def _raising(scan: Callable[[], tuple[list[Path], list[tuple[Path, str]]]]) -> list[Path]:
    """The folders ``scan`` found, or ``Unreachable`` for the first wrong one or a failed listing."""
    try:
        folders, wrong = scan()
    except OSError as exc:
        raise Unreachable(f"cannot list {exc.filename}: {describe(exc)}", path=exc.filename) from exc
    if wrong:
        path, what = wrong[0]
        raise Unreachable(wrong_folder_message(path, what), path=path)
    return folders


def wrong_folder_message(path: Path, what: str) -> str:
    """The message for a link, or a file, where the store expects one of its folders."""
    return (
        f"{path} is {what}; the store reads only its own folders: `flows check --repair` moves it to "
        "flows-quarantine/ beside the store"
    )


_SQLITE_HEADER = b"SQLite format 3\x00"


def _history_dbs_beside(db_path: Path) -> list[Path]:
    """Other SQLite files (``*.db``) in ``db_path``'s folder: history DBs a mistyped name misses."""
    found = []
    try:
        names = sorted(os.listdir(db_path.parent))
    except OSError:
        return []
    for name in names:
        other = db_path.parent / name
        if not name.endswith(".db") or other == db_path:
            continue
        if regular_prefix(other, 16) == _SQLITE_HEADER:  # never through a link, never on a FIFO
            found.append(other)
    return found


def refuse_odd_db(db_path: Path) -> os.stat_result | None:
    """Refuse a history DB path that holds something other than a regular file (a folder, a FIFO,
    a device, a link), which every read refuses (``HistoryDB``), before a write makes anything
    beside it (``Unreachable``, naming the path). A missing path is for the write to make.

    Returns the DB's ``lstat`` (a regular file's), or None when it could not be taken."""
    try:
        st = os.lstat(db_path)
    except OSError:
        return None  # missing (made by the write), or for the write itself to report
    mode = st.st_mode
    if not stat.S_ISREG(mode):
        raise Unreachable(
            f"{db_path} is {kind_of(mode)}, not the history DB's file; the store never follows links "
            "or opens anything else: give --db (or MemoryStore) a file's path, or move it aside",
            path=db_path,
        )
    return st


def looping_link(path: Path) -> Path:
    """The first link on the way to ``path`` (``path`` itself included) that cannot be followed
    because links lead back to one another (``ELOOP``); ``path`` when none is found (a link swapped
    since the caller met the loop)."""
    for step in (*reversed(path.parents[:-1]), path):
        try:
            os.stat(step)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return step
    return path


def _loop_words(folder: Path) -> str:
    """What a link loop on the way to ``folder`` is, naming the link that loops."""
    link = looping_link(folder)
    where = "it is" if link == folder else f"{link} on its way is"
    return f"{where} a symbolic link in (or into) a loop of links, which no path ever leaves"


def refuse_odd_folder(folder: Path) -> None:
    """Refuse a store folder that is there and is no folder (a file, a FIFO, a socket, a device;
    a link to a folder is the folder), or that no path reaches (a loop of links on its way): no
    store can be in it, and what reads or writes it would say is about the files it cannot make
    below it (``Unreachable``, naming the folder)."""
    try:
        mode = os.stat(folder).st_mode
    except FileNotFoundError:
        _refuse_dangling_link(folder)
        return  # missing (said by the caller)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise Unreachable(
                f"the store's folder {folder} cannot be reached: {_loop_words(folder)}; fix or remove "
                "that link, or give --db (or $FLOWS_DB) a path in a real folder",
                path=folder,
            ) from None
        return  # for the read or write itself to report
    if not stat.S_ISDIR(mode):
        raise Unreachable(
            f"the store's folder {folder} is {kind_of(mode)}, not a folder: no store can be in it; "
            "give --db (or $FLOWS_DB) a path in a folder, or move it aside",
            path=folder,
        )


def _refuse_dangling_link(folder: Path) -> None:
    """Refuse a store folder that is a link to nothing: a write would fail to make the folder with
    "File exists" and a read would call the store missing, each about something else."""
    try:
        target = os.readlink(folder)
    except OSError:
        return  # no link: the folder is missing
    raise Unreachable(
        f"the store's folder {folder} is a link to {target}, which does not exist: no store can be in "
        "it; make the folder it names, or give --db (or $FLOWS_DB) a path in a folder",
        path=folder,
    )


def refuse_odd_journal(db_path: Path, journal: str | os.PathLike[str] | None) -> None:
    """Refuse a file journal's folder that is there and is no folder (a file, a FIFO, a socket, a
    device; a link to a folder is the folder), or that lies below a file: no journal can be in it
    (``Unreachable``, naming what is there). A DSN, a missing folder and a location the journal
    itself refuses are left to the journal's open."""
    try:
        location = resolve_journal(db_path, journal)
        if location.startswith(("postgresql://", "postgres://")):
            return
        folder = Path(file_location(location))
    except JournalLocationInvalid:
        return  # the journal's open says what is wrong with it
    where = f"the journal's folder {folder}"
    try:
        mode = os.stat(folder).st_mode
    except NotADirectoryError:
        below = next((p for p in folder.parents if p.exists() and not p.is_dir()), None)
        if below is None:
            return
        where, folder, mode = f"{where} is below {below}, which", below, os.stat(below).st_mode
    except FileNotFoundError:
        _refuse_dangling_journal(folder)
        return  # missing: made by a write, or a store with no runs yet
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # no retry reaches it: said as what it is, not as a failed read
            raise Unreachable(
                f"cannot open the journal: {where} cannot be reached: {_loop_words(folder)}; fix or "
                "remove that link, or give --journal (or $FLOWS_JOURNAL) a real folder or a "
                "postgresql:// DSN",
                path=folder,
            ) from None
        return  # missing (made by a write, or said by the read), or for the open to report
    except ValueError:
        return  # for the open to report
    if not stat.S_ISDIR(mode):
        raise Unreachable(
            f"{where} is {kind_of(mode)}, not a folder: no journal can be in it; give --journal (or "
            "$FLOWS_JOURNAL) a folder or a postgresql:// DSN, or move it aside",
            path=folder,
        )


def _refuse_dangling_journal(folder: Path) -> None:
    """Refuse a journal folder that is a link to nothing: a read would answer as a journal with no
    runs, and a write fail to make the folder with "File exists"."""
    try:
        target = os.readlink(folder)
    except OSError:
        return  # no link: the folder is missing
    raise Unreachable(
        f"cannot open the journal: its folder {folder} is a link to {target}, which does not exist; "
        "make the folder it names, or give --journal (or $FLOWS_JOURNAL) a real folder or a "
        "postgresql:// DSN",
        path=folder,
    )


def _present(path: Path) -> bool:
    """Whether ``path`` may hold something: True unless it is surely missing (a folder on its way
    that cannot be searched is for the open to report, with its code, never a guess here)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except (OSError, ValueError):
        return True
    return True


def _journal_elsewhere(db_path: Path, journal: str | os.PathLike[str] | None) -> bool:
    """Whether a journal given apart from the DB (``--journal``, ``$FLOWS_JOURNAL``) may hold runs
    of its own: a DSN, or a folder that is there (a missing one holds none, and a read of it would
    answer as an empty store). A location the journal itself refuses is for its open to report."""
    if journal is None and not os.environ.get("FLOWS_JOURNAL"):
        return False
    try:
        location = resolve_journal(db_path, journal)
        if location.startswith(("postgresql://", "postgres://")):
            return True
        folder = file_location(location)
    except JournalLocationInvalid:
        return True
    return _present(Path(folder))


def check_store_location(
    db: str | os.PathLike[str] | None, journal: str | os.PathLike[str] | None, *, creating: bool
) -> None:
    """Refuse a store path a command would otherwise guess at (``StoreMissing``).

    * A history DB that does not exist, in a folder that holds another (``histroy.db`` beside
      ``history.db``): the name is a typo; reads would miss the DB's findings, and a sync would make
      a second DB and move the files' findings into it.
    * The DB's folder is there and is no folder (a file, a FIFO, a socket): ``Unreachable``.
    * ``creating`` is False (a command that only reads, or needs a store that has run): the DB's
      folder does not exist, so no store can be there, unless the journal is given elsewhere
      (``--journal`` or ``$FLOWS_JOURNAL``: a DSN, or a folder that is there), which may hold runs
      of its own. (A folder that exists and holds nothing yet is an empty store.)
    * The journal's folder (``--journal``, ``$FLOWS_JOURNAL`` or the one beside the DB) is there and
      is no folder, or lies below a file (``refuse_odd_journal``): ``Unreachable``.
    * ``creating`` is True (a write that may begin a store): the DB's path holds something other
      than a regular file (a folder, a FIFO, a device such as ``/dev/null``, a link), which every
      read refuses (``Unreachable``); or a ``--db`` (or ``$FLOWS_DB``) whose
      folder's own folder does not exist either: a write makes at most the one folder the DB is
      named in (``work/store/history.db`` in an existing ``work``), never a path of missing
      folders; the default location's folders are always made.
    """
    db_path = resolve_db(db)
    if creating:  # a write refuses what every read would (``HistoryDB``), before it makes anything
        refuse_odd_db(db_path)
    refuse_odd_folder(db_path.parent)  # a loop of links on its way hides the DB from ``_present``
    refuse_odd_journal(db_path, journal)
    if _present(db_path):
        return
    others = _history_dbs_beside(db_path)
    if others:
        raise StoreMissing(
            f"there is no history DB at {db_path}, but its folder holds {others[0]}"
            + (f" (and {len(others) - 1} more)" if len(others) > 1 else "")
            + f": pass --db {others[0]} (a second DB beside it would split the store)",
            path=db_path,
        )
    explicit = db is not None or bool(os.environ.get("FLOWS_DB"))
    if creating:
        if explicit and not db_path.parent.is_dir() and not db_path.parent.parent.is_dir():
            raise StoreMissing(
                f"neither the folder of the history DB {db_path} nor the folder it would be made in "
                f"exists: a write makes at most one new folder for a store; check the path, or create "
                f"it first (mkdir -p {db_path.parent})",
                path=db_path,
            )
        return
    if _journal_elsewhere(db_path, journal) or db_path.parent.is_dir():
        return
    default = resolve_db(None) if explicit else None
    given = journal is not None or bool(os.environ.get("FLOWS_JOURNAL"))
    raise StoreMissing(
        f"no store at {db_path}: its folder {db_path.parent} does not exist"
        + (f" (the default store is {default})" if default is not None and default != db_path else "")
        + (f", nor does the journal's folder {resolve_journal(db_path, journal)}" if given else "")
        + "; check --db (or $FLOWS_DB)"
        + (" and --journal (or $FLOWS_JOURNAL)" if given else "")
        + ", or create the store by learning into it "
        "(`flows learn TEXT --scope S --db PATH`) or running a flow (`flows run FILE --db PATH`)",
        path=db_path,
    )
