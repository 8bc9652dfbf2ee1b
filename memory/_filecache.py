"""A stat-keyed index of the unsynced learned files, so a fresh process need not re-read them all.

A fresh process's first read used to open and parse every unsynced learned file. The index keeps,
per scope directory, what reading each file gave, keyed by the file's name, size, mtime, ctime and
inode (as git's index does): a file whose key is unchanged is served from the index, any other file
is read (and checked) again. The index is derived and never trusted over the files:

* it lives in ``<db-dir>/flows-cache/`` (``flows-memory/`` holds learned files only), one file per
  scope directory, replaced atomically (temporary file, then rename);
* it holds only what a full read of the file returned, so every check a read makes was made once
  for each entry it serves; a file that changed in any way (rewritten, damaged, replaced, touched)
  no longer matches its key and is read again, so damage still fails the read;
* its bytes carry a keyed BLAKE2b tag; the key is ``flows-cache/key`` (32 random bytes, a regular
  file of this user, mode 0600). An index that is damaged, truncated, of another version, for
  another directory, or not tagged with that key is ignored (never an error) and rebuilt;
* a file modified within ``_RACY_NS`` of the scan is not written into the index (mtimes are
  coarse, so it could change again without changing its key); an older file written again gets a
  new mtime, and one whose mtime was set back (``touch -d``) a new ctime, so either shows;
* writing the index is best effort: a read-only store, a full disk or a missing folder skip it,
  and the read goes on from the files.

What it does not promise: a process that can write ``flows-cache/key`` as this user can forge an
index, exactly as it could rewrite the learned files and the journal themselves.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from memory._results import Citation, Recalled, frozen_metadata

CACHE_DIR = "flows-cache"
"""``<db-dir>/flows-cache``: derived indexes, safe to delete at any time."""

_VERSION = 1
_KEY_BYTES = 32
_TAG_BYTES = 32
_NO_METADATA = frozen_metadata(None)  # read-only and empty: one shared by every entry without any
_RACY_NS = 2_000_000_000  # a file changed this recently may change again within one mtime tick

StatKey = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


def cache_dir(db_path: Path) -> Path:
    """``<db-dir>/flows-cache``: where the derived indexes of a store live."""
    return db_path.parent / CACHE_DIR


def _stat_key(st: os.stat_result) -> StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _read_regular(path: Path) -> bytes | None:
    """The bytes of ``path`` when it is a regular file (never a link, FIFO or device), else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return fh.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def _lstat(path: str | Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except OSError:
        return None


def _entry_row(e: Recalled) -> list[Any]:
    c = e.citation
    meta = dict(e.metadata) if e.metadata else None
    return [
        e.id,
        e.key,
        e.text,
        e.source,
        list(e.tags),
        e.scope,
        e.flow,
        e.learned_ms,
        c.run_id,
        c.stream,
        c.id,
        meta,
        e.expires_ms,
    ]


def _row_entry(row: Any) -> Recalled:
    """The entry of an index row (``ValueError`` or ``TypeError`` when it is not that shape).

    The row's types are not checked one by one: the index's tag shows this code wrote it, from an
    entry a full read returned, and a row of the wrong shape fails here and is read from its file.
    """
    eid, key, text, source, tags, scope, flow, ms, run_id, stream, rid, meta, expires = row
    return Recalled(
        id=eid,
        key=key,
        text=text,
        source=source,
        tags=tuple(tags),
        scope=scope,
        flow=flow,
        learned_ms=ms,
        citation=Citation(run_id=run_id, stream=stream, id=rid),
        metadata=frozen_metadata(meta) if meta else _NO_METADATA,
        expires_ms=expires,
    )


def _parse_index(body: bytes, name: str) -> dict[str, tuple[StatKey, list[Any]]]:
    """The rows of a tagged index body; ``ValueError`` (or a decode error) when not this shape.

    A stat key of the wrong types never equals a file's, so its file is read instead.
    """
    doc = orjson.loads(body)
    if not isinstance(doc, dict) or doc.get("v") != _VERSION or doc.get("dir") != name:
        raise ValueError("another index")
    return {fname: ((size, mtime, ctime, ino), row) for fname, size, mtime, ctime, ino, row in doc["files"]}


class FileCache:
    """The stat-keyed indexes of one store's unsynced learned files (see the module docstring)."""

    def __init__(self, root: Path, learned_root: Path) -> None:
        self._root = root
        self._learned_root = learned_root
        self._key: bytes | None = None

    # -- the key ---------------------------------------------------------------------------------

    def _load_key(self, create: bool) -> bytes | None:
        if self._key is not None:
            return self._key
        path = self._root / "key"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return self._create_key(path) if create else None
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            data = os.read(fd, _KEY_BYTES + 1)
        except OSError:
            return None
        finally:
            os.close(fd)
        mine = stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077
        if not mine or len(data) != _KEY_BYTES:
            return None  # a key this user did not make alone is no key: run without the index
        self._key = data
        return data

    def _create_key(self, path: Path) -> bytes | None:
        key = secrets.token_bytes(_KEY_BYTES)
        if not self._write_atomically(path, key, exclusive=True):
            return self._load_key(create=False)  # another process made it first, or no room
        self._key = key
        return key

    def _write_atomically(self, path: Path, data: bytes, *, exclusive: bool = False) -> bool:
        """Write ``data`` to ``path`` through a temporary file; False (nothing left) on any failure."""
        tmp = self._root / f".tmp-{secrets.token_hex(8)}"
        try:
            os.makedirs(self._root, mode=0o700, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            if exclusive:
                os.link(tmp, path)  # fails when it exists: the first key made is the key
                os.unlink(tmp)
            else:
                os.replace(tmp, path)
            return True
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            return False

    # -- one directory's index -------------------------------------------------------------------

    def _index_path(self, directory: Path) -> tuple[Path, str]:
        name = os.path.relpath(directory, self._learned_root)
        digest = hashlib.blake2b(name.encode(), digest_size=12).hexdigest()
        return self._root / f"files-{digest}.idx", name

    def _load(self, directory: Path) -> dict[str, tuple[StatKey, list[Any]]]:
        """The directory's index as {file name: (stat key, row)}; empty when absent or not valid."""
        key = self._load_key(create=False)
        if key is None:
            return {}
        path, name = self._index_path(directory)
        data = _read_regular(path)
        if data is None:
            return {}
        tag, body = data[:_TAG_BYTES], data[_TAG_BYTES:]
        if not hmac.compare_digest(tag, hashlib.blake2b(body, key=key, digest_size=_TAG_BYTES).digest()):
            return {}
        try:
            return _parse_index(body, name)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return {}

    def _save(self, directory: Path, rows: Sequence[tuple[str, StatKey, list[Any]]]) -> None:
        key = self._load_key(create=True)
        if key is None:
            return
        path, name = self._index_path(directory)
        body = orjson.dumps({"v": _VERSION, "dir": name, "files": [[n, *k, row] for n, k, row in rows]})
        self._write_atomically(path, hashlib.blake2b(body, key=key, digest_size=_TAG_BYTES).digest() + body)

    def read(
        self, directory: Path, names: Sequence[str], read: Callable[[Path], Recalled]
    ) -> tuple[Recalled, ...]:
        """Every entry of ``names`` in ``directory``: from the index where a file's stat key is
        unchanged, else through ``read`` (whose errors propagate: a damaged file fails the read).

        Rewrites the index when it disagreed with the files, unless that cannot be done.
        """
        index = self._load(directory)
        settled_ns = time.time_ns() - _RACY_NS
        entries: list[Recalled] = []
        rows: list[tuple[str, StatKey, list[Any]]] = []
        stale = len(index) != len(names)
        prefix = os.path.join(directory, "")
        for fname in names:
            st = _lstat(prefix + fname)
            entry = _served(index.get(fname), st, fname)
            if entry is None:
                stale = True
                path = directory / fname
                entry = read(path)  # every check of a read, and its errors
                # keyed only by a stat taken on both sides of the read: a file replaced meanwhile
                # is left out, and read again next time
                after = _lstat(path)
                if st is None or after is None or _stat_key(after) != _stat_key(st):
                    st = None
            entries.append(entry)
            if st is not None and st.st_mtime_ns < settled_ns:
                rows.append((fname, _stat_key(st), _entry_row(entry)))
            else:
                stale = True  # a racy file: read again next time
        if stale and (rows or index):
            self._save(directory, rows)
        return tuple(entries)


def _served(hit: tuple[StatKey, list[Any]] | None, st: os.stat_result | None, fname: str) -> Recalled | None:
    """The index's entry for a file, when its stat key still matches a regular file of that name."""
    if hit is None or st is None or not stat.S_ISREG(st.st_mode) or hit[0] != _stat_key(st):
        return None
    try:
        entry = _row_entry(hit[1])
    except (ValueError, TypeError):
        return None
    return entry if f"{entry.key}.json" == fname else None
