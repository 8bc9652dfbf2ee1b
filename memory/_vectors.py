"""Vectors: derived state that lets ``why`` find a finding by meaning, never a source of truth.

A finding's vector is computed from its text and tags the first time a search by meaning needs it,
and kept in ``<db-dir>/flows-cache/vectors.sqlite3`` under the finding's key and the embedder's
name (a key's content never changes, so its vector never goes stale; another embedder has its own
rows). A search ranks only the live findings the read would return (``Search`` hands them in), so
a vector of a forgotten, superseded, expired or unknown key is never returned, whatever the file
holds. ``forget`` and ``sync`` delete the vectors of what they retire; ``flows check`` reports
vectors of anything but the live findings and ``--repair`` deletes them (they are derived again on
the next search). Losing the file loses nothing: it is rebuilt as needed.

Vectors are stored as little-endian float16 of unit length (half the bytes of float32; a cosine
over them differs by well under 0.01). Each host derives its own from the findings it reads, so a
shared PostgreSQL journal needs no vector extension.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
import shutil
import sqlite3
import stat
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from memory._embed import DIMS_MAX, USER_RAISES, Embedder, checked_vectors, embedder_shape
from memory._errors import EmbedderFailed, Unwritable
from memory._filecache import cache_dir
from memory._files import RACY_S
from memory._results import Recalled
from memory._safe import write_beside

if TYPE_CHECKING:  # numpy is imported when a VectorIndex is made (the semantic extra)
    import numpy as np

VECTORS_FILE = "vectors.sqlite3"
SNAPSHOT_PREFIX = "vectors-"
"""Snapshots of a model's vectors (``vectors-<digest of the model name>.npy``), mapped by a fresh
process; derived from the vectors file, deleted whenever a vector is discarded."""
_KEY32 = re.compile(r"[0-9a-f]{32}")


def snapshots(folder: Path) -> list[Path]:
    """The vectors' snapshot files in ``folder``."""
    try:
        return [
            folder / n for n in os.listdir(folder) if n.startswith(SNAPSHOT_PREFIX) and n.endswith(".npy")
        ]
    except OSError:
        return []


RECIPE = "text+tags/1"
"""What a finding's vector is made of (its text, then its tags on a line); part of the stored
model name, so a change of recipe derives new vectors."""

BATCH = 256
_MEMORY_MAX = 250_000  # vectors remembered in-process (float16: 128 MB at 256 dims) before a reset
_SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (
    model TEXT NOT NULL,
    key   TEXT NOT NULL,
    vec   BLOB NOT NULL,
    PRIMARY KEY (model, key)
) WITHOUT ROWID
"""


_SCHEMA_SQL = " ".join(_SCHEMA.replace("IF NOT EXISTS ", "").split())
"""The one object a vectors file holds, as SQLite keeps its statement (spaces aside)."""


def _schema_is_ours(conn: sqlite3.Connection) -> bool:
    """Whether the file holds exactly the ``vectors`` table this module makes, and nothing else: a
    crafted file could hold a view by its name (every delete fails), a table of other columns (a
    NULL key no delete matches) or a trigger (a delete copying the erased vector elsewhere in it)."""
    objects = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    if len(objects) != 1:
        return False
    kind, name, table, sql = objects[0]
    return (kind, name, table) == ("table", "vectors", "vectors") and (
        isinstance(sql, str) and " ".join(sql.split()) == _SCHEMA_SQL
    )


#: how long a statement on the vectors file waits for another connection's lock, or a checkpoint
#: for another connection's read, before it is answered busy (read when a connection is made)
BUSY_WAIT_S = 30.0


def vectors_path(db_path: Path) -> Path:
    """Where a store's vectors live: ``<db-dir>/flows-cache/vectors.sqlite3``."""
    return cache_dir(db_path) / VECTORS_FILE


def embed_text(finding: Recalled) -> str:
    """What a finding's vector is computed from: its text, and its tags on a second line."""
    return finding.text + ("\n" + " ".join(finding.tags) if finding.tags else "")


def model_of(embedder: Embedder | str) -> str:
    """The name vectors are stored under: the embedder's name and the recipe of what it read."""
    return f"{embedder if isinstance(embedder, str) else embedder.name}#{RECIPE}"


UNIT_SLACK = 0.02
"""How far a stored vector's squared length may be from 1 (float16 rounds a unit vector's length by
well under 0.002); a vector farther from it, and not zero, was not written by this store. A vector's
length scales every similarity it takes part in: one of length 400 would outrank every finding."""


VEC_BYTES_MAX = 2 * DIMS_MAX
"""The longest a stored vector can be; a longer value is never read whole (a crafted row of a
hundred megabytes was decoded into gigabytes of Python floats by ``flows check``)."""


def _is_vector(blob: object) -> bool:
    """Whether ``blob`` is a non-empty run of finite little-endian float16 values of unit length, or
    all zero (numpy not needed), of at most ``DIMS_MAX`` values."""
    if not isinstance(blob, bytes) or not blob or len(blob) % 2 or len(blob) > VEC_BYTES_MAX:
        return False
    values = struct.unpack(f"<{len(blob) // 2}e", blob)
    if not all(math.isfinite(x) for x in values):
        return False
    square = math.fsum(x * x for x in values)
    return square == 0 or abs(square - 1) <= UNIT_SLACK


def _fit_rows(np: Any, block: Any) -> Any:
    """Which rows of ``block`` (float16, a vector per row) a search may trust: finite, and of unit
    length or zero (as ``_is_vector``); read in slices, so a mapped snapshot is never copied whole."""
    good = np.zeros(len(block), dtype=bool)
    for i in range(0, len(block), 8192):
        part = np.asarray(block[i : i + 8192], dtype=np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            square = np.einsum("ij,ij->i", part, part)
        good[i : i + 8192] = np.isfinite(part).all(axis=1) & (
            (square == 0) | (np.abs(square - 1) <= UNIT_SLACK)
        )
    return good


def _no_odd_journal(path: Path) -> bool:
    """Whether ``path``'s rollback journal (``-journal``, which SQLite opens when it finds one, as it
    opens the file: a FIFO there hung every search) is a regular file or not there."""
    try:
        return stat.S_ISREG(os.lstat(f"{path}-journal").st_mode)
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _connect(path: Path, *, create: bool) -> sqlite3.Connection | None:
    """The vectors file, opened (and made, with its private folder, when ``create``); None when it
    is not there to read, is not a regular file in a real folder (a link is never followed), or
    holds anything but its one table (``_schema_is_ours``)."""
    folder = path.parent
    try:
        if create:
            os.makedirs(folder, mode=0o700, exist_ok=True)
        if not stat.S_ISDIR(os.lstat(folder).st_mode):
            return None
        st = os.lstat(path)
    except FileNotFoundError:
        if not create:
            return None
    except OSError:
        return None
    else:
        if not stat.S_ISREG(st.st_mode) or not _no_odd_journal(path):
            return None
    try:
        if create:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            os.close(fd)
        conn = sqlite3.connect(str(path), timeout=BUSY_WAIT_S, check_same_thread=False, isolation_level=None)
    except (OSError, sqlite3.Error):
        return None
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA secure_delete = ON")  # a deleted vector's bytes are overwritten
        conn.execute(_SCHEMA)
        ours = _schema_is_ours(conn)
    except sqlite3.Error:
        ours = False
    if not ours:
        conn.close()
    return conn if ours else None


class VectorIndex:
    """The vectors of one store for one embedder: held in-process as one float16 matrix (a row per
    key), kept in the vectors file when it can be written (a reader without write access derives
    them in memory only). The first search of a process reads the model's stored vectors in one
    scan when it needs many of them, else by key.

    ``read_only`` (a read-only store's): the vectors file is never opened (SQLite's write-ahead log
    makes even a reader write beside it) and nothing is written or removed, a snapshot neither;
    the model's snapshot, if a writer left one, is read (mapped read-only), and every other vector
    is derived in memory."""

    def __init__(self, db_path: Path, embedder: Embedder, *, read_only: bool = False) -> None:
        import numpy

        self._np = numpy
        self._read_only = read_only
        self.embedder = embedder
        self._name, self._dims = embedder_shape(embedder)  # read once: every vector is checked against them
        self.model = model_of(self._name)
        self._path = vectors_path(db_path)
        self._rows: dict[str, int] = {}
        self._matrix = numpy.zeros((0, self._dims), dtype=numpy.float16)
        self._used = 0  # the matrix's rows in use
        self._scanned = False
        self._last: tuple[Sequence[str], np.ndarray] | None = None  # the last keys asked and their rows
        self._conn: sqlite3.Connection | None = None
        self._opened = False
        self._file: tuple[int, int] | None = None  # the device and inode of the file ``_conn`` has open
        self._lock = threading.RLock()

    def _embed(self, texts: Sequence[str]) -> np.ndarray:
        """``checked_vectors`` of ``texts``, from an embedder whose name and dims are still those
        the vectors are kept under: one renamed or resized since (a model swapped in place) would
        file its vectors under the old name, to be trusted as the old model's."""
        try:
            now = (self.embedder.name, self.embedder.dims)
        except USER_RAISES as exc:
            raise EmbedderFailed(
                f"reading the embedder's name and dims raised {type(exc).__name__}: {exc!s:.200}"
            ) from exc
        if now != (self._name, self._dims):
            raise EmbedderFailed(
                f"the embedder is now {now[0]!r:.200} of {now[1]!r:.20} dims; this store's vectors were "
                f"opened for {self._name!r:.200} of {self._dims} dims: close the store and open it again "
                "with the embedder as it is now (vectors are kept under its name)"
            )
        out: np.ndarray = checked_vectors(self.embedder, texts, (self._name, self._dims))
        return out

    def _db(self) -> sqlite3.Connection | None:
        if not self._opened and not self._read_only:
            self._opened = True
            self._conn = _connect(self._path, create=True)
            if self._conn is not None:
                with contextlib.suppress(OSError):
                    st = os.lstat(self._path)
                    self._file = (st.st_dev, st.st_ino)
        return self._conn

    def _same_file(self) -> bool:
        """Whether the vectors file this process has open is still the one at its path; when it is
        not (another process's erase, or a repair, removed it whole), everything read from it and
        derived since is forgotten, and the path opened afresh when next needed. Before, a process
        that went on with the removed file wrote a snapshot of vectors of findings another process
        had erased since, from its own memory and the removed file's keys."""
        if self._file is None:
            return True
        try:
            st = os.lstat(self._path)
            now: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            now = None
        if now == self._file:
            return True
        self._reopen_later()
        self._rows, self._used, self._scanned, self._last = {}, 0, False, None
        self._matrix = self._np.zeros((0, self._dims), dtype=self._np.float16)
        return False

    def _keep(self, keys: Sequence[str], block: np.ndarray) -> None:
        """Hold ``block`` (float16, a row per key) in the matrix; a key held already is replaced."""
        np = self._np
        fresh = [i for i, k in enumerate(keys) if k not in self._rows]
        for i, k in enumerate(keys):
            row = self._rows.get(k)
            if row is not None:
                if not self._matrix.flags.writeable:  # the snapshot, mapped read-only: copy it first
                    self._matrix = np.array(self._matrix)
                self._matrix[row] = block[i]
        if not fresh:
            return
        n = self._used  # rows in use (a snapshot's rows of a bad key or vector included)
        need = n + len(fresh)
        if need > self._matrix.shape[0] or not self._matrix.flags.writeable:
            grown = np.zeros((max(need, 2 * self._matrix.shape[0], 1024), self._dims), dtype=np.float16)
            grown[:n] = self._matrix[:n]
            self._matrix = grown
        self._used = need
        self._matrix[n:need] = block[fresh]
        for j, i in enumerate(fresh):
            self._rows[keys[i]] = n + j

    def _load(self, keys: Sequence[str] | None) -> None:
        """Read stored vectors (of ``keys``, or the model's every one) into the matrix; a row that
        is not a finite vector of ``dims`` of unit length (or zero), or whose key is not a key (a
        blob, a number, any other text: a crafted row, which a snapshot could not hold), is left out
        (it is derived again)."""
        conn = self._db()
        if conn is None:
            return
        np = self._np
        size = 2 * self._dims
        try:
            # only a value of a vector's length is read (``length`` reads no blob): a crafted row
            # of a hundred megabytes is never brought into memory
            if keys is None:
                cursor: Iterable[tuple[str, bytes]] = conn.execute(
                    "SELECT key, vec FROM vectors WHERE model = ? AND length(vec) = ?", (self.model, size)
                )
                chunks: Iterable[Iterable[tuple[str, bytes]]] = [cursor]
            else:
                by_key = "SELECT key, vec FROM vectors WHERE model = ? AND length(vec) = ? AND key IN ({})"
                chunks = (
                    conn.execute(by_key.format(",".join("?" * len(part))), [self.model, size, *part])
                    for part in (list(keys[i : i + 500]) for i in range(0, len(keys), 500))
                )
            for rows in chunks:
                found = [
                    (k, v)
                    for k, v in rows
                    if isinstance(v, bytes) and len(v) == size and isinstance(k, str) and _KEY32.fullmatch(k)
                ]
                if not found:
                    continue
                block = np.frombuffer(b"".join(v for _, v in found), dtype="<f2").reshape(
                    len(found), self._dims
                )
                good = _fit_rows(np, block)
                names = [k for (k, _), ok in zip(found, good, strict=True) if ok]
                self._keep(names, block[good].astype(np.float16))
        except sqlite3.Error:
            self._give_up()

    def _snapshot_path(self) -> Path:
        return (
            self._path.parent / f"{SNAPSHOT_PREFIX}{hashlib.sha256(self.model.encode()).hexdigest()[:16]}.npy"
        )

    def _open_snapshot(self) -> bool:
        """Map the model's snapshot (every vector it held when a process last read them all) as the
        matrix, read-only: a fresh process's first search pages the vectors in from the page cache
        rather than decoding them from the vectors file. Its rows are checked (a key's shape, a
        finite vector) like any stored vector; False when there is none fit to use."""
        mapped = self._mapped_snapshot()
        if mapped is None:
            return False
        np = self._np
        vec = mapped["vec"]
        good = _fit_rows(np, vec)
        rows: dict[str, int] = {}
        for i, raw in enumerate(mapped["key"].tolist()):
            key = raw.decode("ascii", "replace")
            if good[i] and _KEY32.fullmatch(key):
                rows[key] = i
        self._matrix = vec
        self._used = len(vec)
        self._rows = rows
        self._last = None
        return True

    def _mapped_snapshot(self) -> Any:
        """The model's snapshot mapped read-only: a regular file (no link followed) whose header
        names one row per key of a 32-byte key and ``dims`` float16 values, and whose size is
        exactly what that header says (``_snapshot_rows``), mapped through the descriptor its header
        was read from; None when there is none fit to map."""
        np = self._np
        want = np.dtype([("key", "S32"), ("vec", "<f2", (self._dims,))])
        try:
            fd = os.open(self._snapshot_path(), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as fh:
            found = _snapshot_rows(fh, want)
            if found is None:
                return None
            count, offset = found
            if count == 0:
                return np.zeros(0, dtype=want)
            try:
                return np.memmap(fh, dtype=want, mode="r", offset=offset, shape=(count,))
            except (OSError, ValueError):
                return None

    def _write_snapshot(self) -> None:
        """Write the model's vectors held now as its snapshot (beside the vectors file, replaced
        atomically), for the next fresh process; best effort.

        Only the vectors the file still holds are written, read in the write transaction the
        snapshot is made in: a vector another process (or host's sync) discarded since this one
        read or derived it is never written back. A discard deletes the snapshots again once its
        own transaction has committed, so one written before it commits is gone too."""
        np = self._np
        conn = self._conn
        if conn is None or len(self._rows) < 2_000 or not self._same_file():
            return
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:
            return
        try:
            stored = conn.execute("SELECT key FROM vectors WHERE model = ?", (self.model,))
            kept = {k for (k,) in stored}
            keys = [k for k in self._rows if k in kept]
            if len(keys) < 2_000:
                return
            block = np.zeros(len(keys), dtype=[("key", "S32"), ("vec", "<f2", (self._dims,))])
            block["key"] = [k.encode() for k in keys]
            block["vec"] = self._matrix[
                np.fromiter((self._rows[k] for k in keys), dtype=np.int64, count=len(keys))
            ]
            path = self._snapshot_path()
            write_beside(path.parent, path.name, lambda fh: np.save(fh, block, allow_pickle=False))
        except sqlite3.Error:
            return
        finally:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    def _store(self, keys: Sequence[str], block: np.ndarray) -> None:
        conn = self._db()
        if conn is None or not keys:
            return
        data = block.astype("<f2")
        try:
            with conn:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(
                    "INSERT OR REPLACE INTO vectors (model, key, vec) VALUES (?, ?, ?)",
                    [(self.model, k, data[i].tobytes()) for i, k in enumerate(keys)],
                )
        except sqlite3.Error:
            self._give_up()

    def _give_up(self) -> None:
        """The vectors file cannot be used (damaged, read-only, full): go on in memory only.
        ``flows check`` reports the file and ``--repair`` replaces it."""
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None

    def _rows_of(
        self,
        keys: Sequence[str],
        texts: Callable[[list[str]], Mapping[str, str]],
        held: Callable[[list[str]], set[str]],
    ) -> np.ndarray:
        """The matrix rows of ``keys``' vectors, each derived (from ``texts(missing keys)``, the text
        ``embed_text`` gives of each) and kept where none is held.

        A derived vector is stored, then ``held`` (which of the keys' findings the store still holds)
        is asked: an erase (here or in another process) removes the finding's row and file before it
        deletes its vectors, so a vector stored after that delete is seen here and deleted again,
        and one stored before it is deleted by the erase. No vector of erased text outlives it."""
        self._same_file()  # (it forgets what it read from a file removed since)
        last = self._last
        if last is not None and last[0] == keys:  # the same live findings as the last search
            return last[1]
        rows = self._rows
        missing = [k for k in keys if k not in rows]
        if missing and len(rows) + len(missing) > _MEMORY_MAX:  # start again with these alone
            self._rows = rows = {}
            self._matrix = self._np.zeros((0, self._dims), dtype=self._np.float16)
            self._used = 0
            self._scanned = True  # a scan would bring back what was just let go
            missing = list(keys)
        lost: list[str] = []
        if missing:
            if not self._scanned and len(missing) > 2_000:
                self._scanned = True
                if not rows and self._open_snapshot():
                    rows = self._rows
                    self._load([k for k in missing if k not in rows])  # learned since the snapshot
                else:
                    self._load(None)
                    self._write_snapshot()
                    rows = self._rows
            else:
                self._load(missing)
            todo = [k for k in missing if k not in rows]
            for i in range(0, len(todo), BATCH):
                lost += self._derive(todo[i : i + BATCH], texts, held)
            if len(todo) > 2_000:  # many derived at once (a first search, derive_vectors): keep a snapshot
                self._write_snapshot()
        idx = self._np.fromiter((rows[k] for k in keys), dtype=self._np.int64, count=len(keys))
        self._last = (list(keys), idx)
        if lost:  # their zero rows serve this search only: derived again should one still be live
            self._last = None
            for k in lost:
                rows.pop(k, None)
        return idx

    def _derive(
        self,
        chunk: list[str],
        texts: Callable[[list[str]], Mapping[str, str]],
        held: Callable[[list[str]], set[str]],
    ) -> list[str]:
        """Derive, store and keep the vectors of ``chunk`` (as ``_rows_of``); the keys whose finding
        was gone once its vector was stored (kept as a zero vector, their stored one deleted)."""
        found = texts(chunk)
        unknown = [k for k in chunk if k not in found]
        if unknown:  # retired since it was listed: it gets a zero vector, never stored
            self._keep(unknown, self._np.zeros((len(unknown), self._dims), dtype=self._np.float16))
        chunk = [k for k in chunk if k in found]
        if not chunk:
            return []
        made = self._embed([found[k] for k in chunk]).astype(self._np.float16)
        self._store(chunk, made)
        still = held(chunk)
        gone = [k for k in chunk if k not in still]
        if gone:  # erased (or retired) while it was embedded: never kept, here or on disk
            self._unstore(gone)
            made[[i for i, k in enumerate(chunk) if k not in still]] = 0
        self._keep(chunk, made)
        return gone

    def _unstore(self, keys: list[str]) -> None:
        """Delete the stored vectors of ``keys`` again, for good, and every snapshot (one may have
        taken them): their finding was retired or erased while they were derived, and an erase that
        has returned must leave no vector of it. As the erase's own delete (``erase_vectors``): the
        rows deleted and the write-ahead log truncated, checked, or else the vectors file removed
        whole. Before, a delete whose checkpoint another reader kept waiting left the vector's bytes
        in the log after the erase had returned.

        Raises:
            Unwritable: the vectors file had to be removed and could not be.
        """
        if self._read_only:
            return  # nothing was stored
        self._reopen_later()  # this process's connection first: the file may have to go whole
        _erase_at(self._path, keys)

    def _reopen_later(self) -> None:
        """Close the vectors file; the next use opens the path again (made anew if it went)."""
        self._give_up()
        self._opened, self._file = False, None

    def vectors(self, findings: Sequence[Recalled], held: Callable[[list[str]], set[str]]) -> np.ndarray:
        """One unit vector per finding (float32, shape (n, dims)), derived where none is kept
        (``held``: as ``_rows_of``)."""
        with self._lock:
            idx = self._rows_of(
                [f.key for f in findings], _texts_of(findings), held
            )  # first: it may grow the matrix
            out: np.ndarray = self._matrix[idx].astype(self._np.float32)
            return out

    def question_vector(self, question: str) -> np.ndarray:
        """``question``'s vector (float32, unit length, or zeros), checked as every vector is: what
        ``similarities`` ranks by, and what a hybrid search weighs the question's words by."""
        q: np.ndarray = self._embed([question])[0].astype(self._np.float32)
        return q

    def similarities(
        self,
        q: np.ndarray,
        keys: Sequence[str],
        texts: Callable[[list[str]], Mapping[str, str]],
        held: Callable[[list[str]], set[str]],
    ) -> np.ndarray:
        """The cosine similarity of the question's vector ``q`` (``question_vector``) to each key's
        finding (float32, in ``keys``' order); ``texts`` gives the text of findings whose vector must
        be derived (``held``: as ``_rows_of``). A zero vector (the
        embedder found no meaning in a text) has no direction: it is similar to nothing, and its
        similarity is ``-inf`` (below every floor), the question's for every key when its is zero."""
        numpy = self._np
        with self._lock:
            if not keys:
                empty: np.ndarray = numpy.zeros(0, dtype=numpy.float32)
                return empty
            idx = self._rows_of(keys, texts, held)
            rows = self._matrix[idx]
            sims: np.ndarray = rows.astype(numpy.float32) @ q  # BLAS works in float32
            if not q.any():
                sims[:] = -numpy.inf
                return sims
            nil = numpy.nonzero(sims == 0)[0]  # a zero row scores exactly 0; few others do
            if len(nil):
                sims[nil[~rows[nil].any(axis=1)]] = -numpy.inf
            return sims

    def discard(self, keys: Iterable[str]) -> int:
        """Forget the vectors of ``keys`` here and in the vectors file (every embedder's)."""
        keys = list(keys)
        with self._lock:
            self._last = None
            for k in keys:
                row = self._rows.pop(k, None)
                if row is not None and self._matrix.flags.writeable:
                    self._matrix[row] = 0  # the row is never read again; its bytes go too
            if self._read_only:
                return 0  # what is stored is the writers' to drop
            _unlink_snapshots(self._path.parent)  # they may hold these keys' vectors
            conn = self._db()
        gone = _delete(conn, keys) if conn is not None else 0
        _unlink_snapshots(self._path.parent)  # and one another process wrote before the delete
        return gone

    def close(self) -> None:
        with self._lock:
            self._give_up()
            self._rows = {}
            self._matrix = self._np.zeros((0, self._dims), dtype=self._np.float16)
            self._used = 0
            self._scanned = False
            self._last = None


def _snapshot_rows(fh: BinaryIO, want: Any) -> tuple[int, int] | None:
    """A snapshot's row count and where its rows begin, from its header, read and checked before
    anything is mapped: a regular file of numpy's format holding a 1-D array of ``want`` (a row per
    key), whose size is exactly that many rows past the header. A header claiming a count that is
    negative, overflows, or is more or fewer rows than the file holds gives None: it is never handed
    to ``mmap`` (which would fail with an error of its own, or warn of an overflow)."""
    from numpy.lib import format as npy

    try:
        size = os.fstat(fh.fileno())
        if not stat.S_ISREG(size.st_mode):
            return None
        version = npy.read_magic(fh)
        read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
        shape, fortran, dtype = read(fh)
        offset = fh.tell()
    except Exception:  # a header of any shape: parsed by numpy (``literal_eval``), untrusted
        return None
    if version not in ((1, 0), (2, 0)) or dtype != want or fortran or len(shape) != 1:
        return None  # a row per key: another shape would fail the search
    (count,) = shape
    if type(count) is not int or count < 0 or offset + count * want.itemsize != size.st_size:
        return None
    if size.st_blocks * 512 + _SPARSE_SLACK < size.st_size:
        # a file with holes: what a snapshot's writer never makes (every byte is written), and what
        # makes a header's count of billions of rows cost 4 KiB of disk; a search would copy every
        # row it claims into memory, gigabytes, and be killed or fail (a file system that compresses
        # may count fewer blocks too: its snapshot is passed over, and the vectors file read instead)
        return None
    return count, offset


#: the bytes a snapshot's allocated blocks may fall short of its size (a tail the file system
#: keeps inline, or a block of zeros it did not allocate)
_SPARSE_SLACK = 1 << 16


def _texts_of(findings: Sequence[Recalled]) -> Callable[[list[str]], Mapping[str, str]]:
    by_key = {f.key: f for f in findings}
    return lambda keys: {k: embed_text(by_key[k]) for k in keys if k in by_key}


def top_indexes(sims: np.ndarray, top: int) -> list[int]:
    """Indexes of (at least) the ``top`` highest ``sims``, ties at the cut included, best first."""
    import numpy as np

    n = len(sims)
    if top <= 0 or n == 0:
        return []
    if top < n:
        cut = np.argpartition(-sims, top - 1)[:top]
        picked = np.nonzero(sims >= sims[cut].min())[0]
    else:
        picked = np.arange(n)
    return sorted(picked.tolist(), key=lambda i: -float(sims[i]))


def _delete(conn: sqlite3.Connection, keys: Sequence[str], *, strict: bool = False) -> int:
    """Delete the vectors of ``keys`` (every model's) and truncate the write-ahead log; the rows
    deleted. Best effort unless ``strict``: an error then is raised, not counted as done."""
    gone = 0
    try:
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                marks = ",".join("?" * len(chunk))
                gone += conn.execute(f"DELETE FROM vectors WHERE key IN ({marks})", chunk).rowcount
        if gone:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the old pages leave the WAL too
    except sqlite3.Error:
        if strict:
            raise
        return gone
    return gone


def discard_vectors(db_path: str | os.PathLike[str], keys: Iterable[str]) -> int:
    """Delete the stored vectors of ``keys`` (every embedder's) from a store's vectors file, their
    bytes overwritten; the number of rows deleted (0 when there is no file)."""
    return _discard(Path(db_path), list(keys))[0]


def erase_vectors(db_path: Path, keys: Sequence[str]) -> None:
    """Delete the stored vectors of ``keys`` for an erase, and make sure of it: their rows deleted
    (bytes overwritten) and the write-ahead log truncated, checked; or else the vectors file is
    removed whole, with its log and shared memory (derived state, rebuilt as needed). A file that
    is damaged, not a regular file, locked past the wait, or whose log another reader keeps from
    being truncated may still hold an erased finding's vector: it goes, and an erase never finishes
    with one left. Every snapshot is deleted, before and after.

    Raises:
        Unwritable: the file could not be removed (the erase fails, to be finished by the next).
    """
    _erase_at(vectors_path(db_path), keys)


def _erase_at(path: Path, keys: Sequence[str]) -> None:
    """``erase_vectors`` of the vectors file at ``path``."""
    _unlink_snapshots(path.parent)
    if not keys or not any(os.path.lexists(f"{path}{suffix}") for suffix in ("", "-wal")):
        return
    if not _deleted_for_good(path, keys):
        for suffix in ("", "-wal", "-shm"):
            _remove(Path(f"{path}{suffix}"))
    _unlink_snapshots(path.parent)  # and one another process wrote before the delete


def _deleted_for_good(path: Path, keys: Sequence[str]) -> bool:
    """Whether the vectors of ``keys`` were deleted from the vectors file at ``path`` and its
    write-ahead log truncated (the checkpoint reported done), none of them left."""
    conn = _connect(path, create=False)
    if conn is None:
        return False
    try:
        _delete(conn, keys, strict=True)
        busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        left = 0
        for i in range(0, len(keys), 500):
            chunk = list(keys[i : i + 500])
            marks = ",".join("?" * len(chunk))
            left += conn.execute(f"SELECT count(*) FROM vectors WHERE key IN ({marks})", chunk).fetchone()[0]
    except sqlite3.Error:
        return False
    finally:
        conn.close()
    return busy == 0 and left == 0


def _discard(db_path: Path, keys: list[str]) -> tuple[int, bool]:
    """``discard_vectors``, and whether a snapshot or the vectors file was there."""
    if not keys:
        return 0, True
    found = _unlink_snapshots(vectors_path(db_path).parent)  # they may hold these keys' vectors
    conn = _connect(vectors_path(db_path), create=False)
    if conn is None:
        return 0, found
    try:
        return _delete(conn, keys), True
    finally:
        conn.close()
        _unlink_snapshots(vectors_path(db_path).parent)  # and one another process wrote before the delete


def _unlink_snapshots(folder: Path) -> bool:
    """Delete every snapshot in ``folder``; whether there was one."""
    found = snapshots(folder)
    for path in found:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return bool(found)


class VectorDiscards:
    """``discard_vectors`` for one store, which does not look again while the cache folder is
    unchanged since a look found neither a vectors file nor a snapshot there (its mtime, when it
    was older than ``RACY_S`` at that look: a file made since would have changed it). A store
    never searched by meaning pays one ``lstat`` per retirement, not a listing and two."""

    def __init__(self, db_path: Path) -> None:
        self._db_path = db_path
        self._folder = str(vectors_path(db_path).parent)  # looked at once per retirement
        self._quiet: int | None = None  # the cache folder's mtime when a look found nothing

    def __call__(self, keys: list[str]) -> int:
        if not keys:
            return 0
        try:
            st = os.lstat(self._folder)
        except FileNotFoundError:
            return 0  # no cache folder: no vectors file, no snapshot
        except OSError:
            st = None
        if st is not None and st.st_mtime_ns == self._quiet:
            return 0
        looked = time.time_ns()
        gone, there = _discard(self._db_path, keys)
        racy = st is None or looked - st.st_mtime_ns <= RACY_S * 1e9
        self._quiet = None if there or racy or st is None else st.st_mtime_ns
        return gone


_NOT_LIVE = "its finding is not live (forgotten, superseded, expired or unknown)"


@dataclass(frozen=True)
class VectorProblem:
    """A row of the vectors file that is not the vector of a live finding, or not a vector."""

    model: str
    key: str
    what: str


def vector_problems(db_path: Path, live: set[str]) -> tuple[list[VectorProblem], str | None]:
    """Every stored vector whose key is not a live finding, or whose bytes are not a finite unit
    vector of the size the model's other rows have; and a reason when the file cannot be read at all."""
    path = vectors_path(db_path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], f"cannot look at {path}: {exc.strerror or exc}"
    if not stat.S_ISREG(st.st_mode):
        return [], f"{path} is not a regular file"
    conn = _connect(path, create=False)
    if conn is None:
        return [], (
            f"cannot open {path} as a vectors file (it is not SQLite, or holds other tables, views, "
            "triggers or columns than its one table of vectors)"
        )
    problems: list[VectorProblem] = []
    # each model's size: the one most of its rows have (a crafted row sorted first would otherwise
    # make every good row of its model look malformed); counted here, as SQLite's GROUP BY would
    # bring every value into its sorter; ``length`` alone reads no blob
    size_of = "CASE WHEN typeof(vec) = 'blob' THEN length(vec) ELSE -1 END"
    try:
        counts = Counter(conn.execute(f"SELECT model, {size_of} FROM vectors"))
        sizes: dict[str, int] = {}
        for (model, size), _ in sorted(counts.items(), key=lambda item: (item[1], -item[0][1])):
            sizes[model] = size  # the most rows last (of a tie, the smallest size)
        rows = conn.execute(  # a value longer than any vector is not read
            f"SELECT model, key, CASE WHEN length(vec) <= ? THEN vec END, {size_of} FROM vectors "
            "ORDER BY model, key",
            (VEC_BYTES_MAX,),
        )
        for model, key, blob, size in rows:
            if size != sizes.get(model) or not _is_vector(blob):
                problems.append(VectorProblem(model, key, "not a finite unit vector of its model's size"))
            elif key not in live:
                problems.append(VectorProblem(model, key, _NOT_LIVE))
    except sqlite3.Error as exc:
        return problems, f"{path} is damaged: {exc}"
    finally:
        conn.close()
    return problems, None


def repair_vectors(db_path: Path, problems: Sequence[VectorProblem], damaged: bool) -> int:
    """Delete the rows ``vector_problems`` found (the whole file when it is damaged); they are
    derived again on the next search by meaning. The number of rows (or 1 for the file) removed."""
    path = vectors_path(db_path)
    if damaged:
        for suffix in ("", "-wal", "-shm"):
            _remove(Path(f"{path}{suffix}"))
        return 1
    conn = _connect(path, create=False)
    if conn is None or not problems:
        return 0
    try:
        with conn:
            conn.execute("BEGIN IMMEDIATE")
            for p in problems:
                conn.execute("DELETE FROM vectors WHERE model = ? AND key = ?", (p.model, p.key))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return len(problems)
    finally:
        conn.close()


def _remove(path: Path) -> None:
    """Delete ``path`` whatever it is: a file or link (never followed), or a folder in a vectors
    file's place, with what it holds (the cache folder is derived state; ``rmtree`` follows no link)."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise Unwritable(
            f"cannot remove {path} ({exc.strerror or exc}): it is derived state, so removing it by hand "
            "and running `flows check --repair` again is safe",
            path=path,
            errno=exc.errno,
        ) from exc
