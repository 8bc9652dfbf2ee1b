"""The history DB: SQLite, owned by this package, written only by ``sync``.

WAL and a busy timeout let several processes read while ``sync`` writes. The schema is migrated by
``PRAGMA user_version``. ``learn`` never opens the DB; it only stats it for its mode.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import sqlite3
import stat
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

import orjson

from memory._errors import FlowsMemoryError, Unreachable, Unwritable
from memory._files import Retired, index_terms
from memory._finding import is_key, meta_value_key
from memory._results import Citation, Recalled, frozen_metadata
from memory._safe import describe, kind_of

SCHEMA_VERSION = 9
_MIGRATIONS: dict[int, str | Callable[[sqlite3.Connection], None]] = {
    1: """
    CREATE TABLE findings (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        key         TEXT NOT NULL UNIQUE,
        scope       TEXT NOT NULL,
        flow        TEXT NOT NULL,
        text        TEXT NOT NULL,
        source      TEXT NOT NULL,
        tags        TEXT NOT NULL,
        learned_ms  INTEGER NOT NULL,
        run_id      TEXT NOT NULL,
        stream      TEXT NOT NULL,
        record_id   TEXT NOT NULL,
        synced_ms   INTEGER NOT NULL
    );
    CREATE INDEX findings_by_time ON findings (learned_ms DESC, id DESC);
    CREATE INDEX findings_by_source ON findings (source, learned_ms DESC);
    CREATE INDEX findings_by_scope ON findings (scope, learned_ms DESC);
    CREATE TABLE finding_tags (
        tag      TEXT NOT NULL,
        learned_ms INTEGER NOT NULL,
        finding  INTEGER NOT NULL REFERENCES findings (id) ON DELETE CASCADE,
        PRIMARY KEY (tag, learned_ms, finding)
    ) WITHOUT ROWID;
    CREATE VIRTUAL TABLE findings_fts USING fts5 (
        text, tags, source, content='findings', content_rowid='id', tokenize='unicode61'
    );
    CREATE TRIGGER findings_ai AFTER INSERT ON findings BEGIN
        INSERT INTO findings_fts (rowid, text, tags, source) VALUES (new.id, new.text, new.tags, new.source);
    END;
    CREATE TRIGGER findings_ad AFTER DELETE ON findings BEGIN
        INSERT INTO findings_fts (findings_fts, rowid, text, tags, source)
        VALUES ('delete', old.id, old.text, old.tags, old.source);
    END;
    CREATE TRIGGER findings_au AFTER UPDATE ON findings BEGIN
        INSERT INTO findings_fts (findings_fts, rowid, text, tags, source)
        VALUES ('delete', old.id, old.text, old.tags, old.source);
        INSERT INTO findings_fts (rowid, text, tags, source) VALUES (new.id, new.text, new.tags, new.source);
    END;
    """,
    # A finding's metadata (canonical JSON, NULL when it has none) and when it expires.
    2: """
    ALTER TABLE findings ADD COLUMN metadata TEXT;
    ALTER TABLE findings ADD COLUMN expires_ms INTEGER;
    """,
    # Forgotten and superseded findings: the first retirement of each key, and the mark on its row
    # (a retirement may arrive before the finding's row does).
    3: """
    ALTER TABLE findings ADD COLUMN retired_ms INTEGER;
    CREATE TABLE retirements (
        key           TEXT PRIMARY KEY,
        scope         TEXT NOT NULL,
        flow          TEXT NOT NULL,
        reason        TEXT,
        by_key        TEXT,
        forgotten_ms  INTEGER NOT NULL,
        run_id        TEXT NOT NULL,
        stream        TEXT NOT NULL,
        record_id     TEXT NOT NULL,
        synced_ms     INTEGER NOT NULL
    );
    """,
}


def _meta_rows(metadata: Mapping[str, Any] | None, learned_ms: int, row_id: int) -> list[tuple[Any, ...]]:
    """The ``finding_meta`` rows of a finding: one per top-level metadata key, its value as
    ``meta_value_key`` writes it."""
    return [(k, meta_value_key(v), learned_ms, row_id) for k, v in (metadata or {}).items()]


def _migration_4(conn: sqlite3.Connection) -> None:
    """Metadata filters: ``finding_meta`` (key, comparable value, time, row), filled from the rows."""
    conn.execute(
        "CREATE TABLE finding_meta (key TEXT NOT NULL, value TEXT NOT NULL, learned_ms INTEGER NOT NULL,"
        " finding INTEGER NOT NULL REFERENCES findings (id) ON DELETE CASCADE,"
        " PRIMARY KEY (key, value, learned_ms, finding)) WITHOUT ROWID"
    )
    rows = conn.execute("SELECT id, learned_ms, metadata FROM findings WHERE metadata IS NOT NULL").fetchall()
    for row_id, learned_ms, metadata in rows:
        conn.executemany(
            "INSERT OR IGNORE INTO finding_meta VALUES (?,?,?,?)",
            _meta_rows(orjson.loads(metadata), learned_ms, row_id),
        )


_MIGRATIONS[4] = _migration_4

_STEMS_COLUMNS = " USING fts5 (text, tags, source, tokenize = 'unicode61 remove_diacritics 0 tokenchars _')"
_STEMS_TABLE = "CREATE VIRTUAL TABLE findings_stems" + _STEMS_COLUMNS


def _stem_row(row_id: int, text: str, tags: Sequence[str], source: str) -> tuple[Any, ...]:
    """A ``findings_stems`` row: the index terms of the text, the tags and the source (``why``'s
    terms, computed here as for the unsynced files, so both sides match word forms alike)."""
    return (
        row_id,
        " ".join(index_terms(text)),
        " ".join(t for tag in tags for t in index_terms(tag)),
        " ".join(index_terms(source)),
    )


def _migration_5(conn: sqlite3.Connection) -> None:
    """Word forms: the FTS index holds each row's stems (``memory._stem``) instead of its words."""
    for trigger in ("findings_ai", "findings_ad", "findings_au"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    conn.execute("DROP TABLE IF EXISTS findings_fts")
    conn.execute(_STEMS_TABLE)
    rows = conn.execute("SELECT id, text, tags, source FROM findings").fetchall()
    conn.executemany(
        "INSERT INTO findings_stems (rowid, text, tags, source) VALUES (?,?,?,?)",
        [_stem_row(r[0], r[1], orjson.loads(r[2]), r[3]) for r in rows],
    )


_MIGRATIONS[5] = _migration_5
# A finding learned again after its key was retired: the revision its key hashes (NULL: 0).
_MIGRATIONS[6] = "ALTER TABLE findings ADD COLUMN revision INTEGER;"


def _migration_7(conn: sqlite3.Connection) -> None:
    """The memory a finding is a version of, when not its own key (a supersede's or an update's new
    version), and the lookup of a memory's versions by it. Rows written before are given theirs
    from the supersedes the DB records (oldest first: a chain of supersedes is one memory), which
    is what a learn records now."""
    conn.execute("ALTER TABLE findings ADD COLUMN memory TEXT")
    conn.execute("CREATE INDEX findings_by_memory ON findings (memory) WHERE memory IS NOT NULL")
    memory_of: dict[str, str] = {}
    for old, new in conn.execute(
        "SELECT key, by_key FROM retirements WHERE by_key IS NOT NULL ORDER BY forgotten_ms, rowid"
    ).fetchall():
        if isinstance(old, str) and isinstance(new, str) and new != old and new not in memory_of:
            memory_of[new] = memory_of.get(old, old)
    conn.executemany(
        "UPDATE findings SET memory = ? WHERE key = ? AND memory IS NULL",
        [(m, k) for k, m in memory_of.items() if m != k],
    )


_MIGRATIONS[7] = _migration_7
# An erase deletes a row's tags and metadata by the row: without these, each erase read every tag
# and metadata row of the DB (0.2 s at a million findings).
_MIGRATIONS[8] = """
CREATE INDEX IF NOT EXISTS finding_tags_by_finding ON finding_tags (finding);
CREATE INDEX IF NOT EXISTS finding_meta_by_finding ON finding_meta (finding);
"""

# The full-text index in shards by row id: an erase merges only the shards that held its rows (a merge
# rewrites a whole index: a second at a million rows in one). Shard ``low`` holds the rows from its
# ``low`` up to the next shard's; the first, ``findings_stems``, every row of a DB made before shards.
_MIGRATIONS[9] = """
CREATE TABLE IF NOT EXISTS stem_shards (low INTEGER PRIMARY KEY);
INSERT OR IGNORE INTO stem_shards VALUES (0);
"""
SHARD_ROWS = 1 << 17  # a new shard begins once a row's id is this far past the newest shard's first


def _shard_table(low: int) -> str:
    """The FTS5 table of the shard that begins at row id ``low``."""
    return "findings_stems" if low == 0 else f"findings_stems_{low}"


def _shard_of(lows: Sequence[int], row_id: int) -> int:
    """The first row id of the shard holding ``row_id``, of the shards beginning at ``lows``
    (ascending, the first 0)."""
    return max(low for low in lows if low <= row_id)


def _shards(conn: sqlite3.Connection, path: Path) -> list[int]:
    """The first row ids of the DB's full-text shards, ascending (a rowid column: integers only);
    ``Unreachable`` when the first is not 0 (a damaged DB: rows would belong to no shard)."""
    lows = [r[0] for r in conn.execute("SELECT low FROM stem_shards ORDER BY low")]
    if not lows or lows[0] != 0:
        raise Unreachable(
            f"the history DB {path} is damaged (its full-text shards do not begin at row 0): "
            "move it aside and run `flows sync`, which rebuilds it from the learned files and the journal",
            path=path,
        )
    return lows


_PLAIN_PATH = re.compile(r"[A-Za-z0-9/._~-]*")  # what ``quote(path, safe="/")`` leaves as it is
_NO_METADATA = frozen_metadata(None)  # read-only and empty: one shared by every row without any
_FEW_KEYS = 8  # ``held`` looks up at most this many keys one by one (an IN list costs more to prepare)

_COLUMNS = (
    "f.id, f.key, f.text, f.source, f.tags, f.scope, f.flow, f.learned_ms, f.run_id, f.stream, f.record_id,"
    " f.metadata, f.expires_ms, f.revision, f.memory"
)
_STAMP = "f.id, f.learned_ms, f.run_id, f.record_id"  # what says a row built before is unchanged
_NOT_RETIRED = "f.retired_ms IS NULL"
_NOT_EXPIRED = "(f.expires_ms IS NULL OR f.expires_ms > ?)"
_LIVE = f"{_NOT_RETIRED} AND {_NOT_EXPIRED}"


def _row(row: Sequence[Any], path: Path) -> Recalled:
    """The finding a row holds, checked: SQLite keeps no checksum of its pages, so a damaged page
    can still read back well-formed; the row's key must be the hash of its scope and finding.

    The finding's canonical bytes are made from the row's fields directly (``canonical`` of the
    ``Finding`` they make, without building one), and the result is built once they check out."""
    rid, key, text, source, tags_json, scope, flow, learned_ms, run_id, stream, record_id, *rest = row
    meta, expires, rev, memory = rest
    try:
        tags = orjson.loads(tags_json)
        metadata = orjson.loads(meta) if meta else None
        ok = (
            type(key) is str
            and type(text) is str
            and type(source) is str
            and type(scope) is str
            and type(flow) is str
            and type(rid) is int
            and type(learned_ms) is int
            and type(tags) is list
            and all(type(t) is str for t in tags)
            and type(run_id) is str
            and type(stream) is str
            and type(record_id) is str
            and (metadata is None or type(metadata) is dict)
            and (expires is None or type(expires) is int)
            and (rev is None or (type(rev) is int and rev > 0))
            and (memory is None or (type(memory) is str and is_key(memory) and memory != key))
        )
        if ok:
            finding: dict[str, Any] = {"text": text, "source": source, "tags": tags}
            if metadata:
                finding["metadata"] = metadata
            if expires is not None:
                finding["expiresMs"] = expires
            head = scope.encode() + b"\0" + orjson.dumps(finding, option=orjson.OPT_SORT_KEYS)
            if rev:
                head += b"\0r" + str(rev).encode()
            ok = hashlib.sha256(head).hexdigest()[:32] == key
    except (orjson.JSONDecodeError, TypeError, ValueError):
        ok = False
    if not ok:
        raise Unreachable(
            f"the history DB {path} is damaged (row {rid} does not hold the finding its key names): "
            "move it aside and run `flows sync`, which rebuilds it from the learned files and the journal",
            path=path,
        )
    return Recalled(
        id=rid,
        key=key,
        text=text,
        source=source,
        tags=tuple(tags),
        scope=scope,
        flow=flow,
        learned_ms=learned_ms,
        citation=Citation(run_id=run_id, stream=stream, id=record_id),
        metadata=frozen_metadata(metadata) if metadata else _NO_METADATA,
        expires_ms=expires,
        revision=rev or 0,
        memory=memory,
    )


def _metadata_text(entry: Recalled) -> str | None:
    if not entry.metadata:
        return None
    return orjson.dumps(dict(entry.metadata), option=orjson.OPT_SORT_KEYS).decode()


ERASE_LOG_WAIT_MS = 30_000
"""How long an erase waits for another process's read of the history DB to end, so that the log
can be checkpointed whole and the erased content's old pages overwritten."""


def _truncate_log(conn: sqlite3.Connection, wait_ms: int) -> bool:
    """``PRAGMA wal_checkpoint(TRUNCATE)`` on ``conn``, waiting up to ``wait_ms`` for readers:
    whether every frame of the log reached the DB and the log was emptied (SQLite answers busy,
    and copies what it may, while a reader still needs an older page)."""
    conn.execute(f"PRAGMA busy_timeout = {int(wait_ms)}")
    try:
        row = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.execute("PRAGMA busy_timeout = 30000")
    return row is None or row[0] == 0


class HistoryDB:
    """The SQLite history DB at ``path``; opened lazily, one connection per thread.

    Reads go through a read-only connection (``mode=ro``), so a store on a read-only disk, or a DB
    this user may not write, still answers; only ``upsert`` (``sync``) opens the DB for writing and
    migrates it. A DB on a read-only file system whose write-ahead log is empty is opened
    ``immutable`` (nobody can write it there). The DB and its ``-wal``/``-shm`` must be regular
    files: a link, FIFO or folder in their place is refused, never followed or opened.

    With ``read_only`` the DB is never written, migrated or created, and no file is created beside
    it either (``_open_without_creating``): a reader that must leave the store as it found it (the
    dashboard). Writes then fail with ``Unwritable``, and an older schema with ``Unreachable``.
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        self.path = path
        self.read_only = read_only
        #: how many reads failed because the DB changed under a read without SQLite's lock
        self.changes_seen = 0
        self._local = _PerThread()
        self._writes = 0
        self._seen = False
        #: whether the last erase (or ``truncate_log``) left old pages a reader kept
        self.pages_held = False
        # Rows already turned into results, by their stamp (``_STAMP``: row id, commit time and
        # citation). A row's finding never changes (its key is the finding's hash); a newer commit
        # changes its citation and time, so a row committed again has a stamp not seen before.
        self._rows: dict[tuple[int, int, str, str], Recalled] = {}
        self._reads: dict[tuple[Any, ...], _Answer] = {}  # see ``_stamped``
        self._recall_sql: dict[tuple[Any, ...], str] = {}

    def exists(self) -> bool:
        """True when something is at the DB's path (reads of a missing DB see no rows, and create
        nothing); never follows a link."""
        if not self._seen:  # once there, a DB stays (an open connection keeps reading it anyway)
            try:
                os.lstat(self.path)
            except FileNotFoundError:
                return False
            except OSError as exc:
                raise Unreachable(
                    f"cannot read the history DB {self.path}: {describe(exc)}", path=self.path
                ) from exc
            self._seen = True
        return self._seen

    @property
    def seen(self) -> bool:
        """Whether ``exists`` has found the DB (once there, a DB stays); no look of its own."""
        return self._seen

    def _check_files(self) -> tuple[int, bool]:
        """Refuse a DB, ``-wal``, ``-shm`` or ``-journal`` that is anything but a regular file;
        answer the log's size (0 when there is none) and whether the ``-shm`` index is there.
        (SQLite opens a ``-journal`` it finds, a rollback journal a crash may have left, as it
        opens the DB: a FIFO there hung every read.)"""
        db = str(self.path)
        found: list[os.stat_result | None] = []
        for name in (db, f"{db}-wal", f"{db}-shm", f"{db}-journal"):
            try:
                st = os.lstat(name)
            except FileNotFoundError:
                found.append(None)
                continue
            except OSError as exc:
                path = Path(name)
                raise Unreachable(f"cannot read the history DB {path}: {describe(exc)}", path=path) from exc
            mode = st.st_mode
            found.append(st)
            if not stat.S_ISREG(mode):
                path = Path(name)
                raise Unreachable(
                    f"{path} is {kind_of(mode)}, not the history DB's file; the store never follows "
                    "links or opens anything else: move it aside",
                    path=path,
                )
        _, wal, shm, _ = found
        return (0 if wal is None else wal.st_size), shm is not None

    def _create_private(self) -> None:
        """Make a DB that does not exist yet as an empty file of mode 0600 (SQLite would make it
        0644 less the umask: readable by every account, and the learned files, which take the
        DB's mode, with it). Its ``-wal`` and ``-shm`` take its mode from SQLite; to share a store,
        ``chmod`` the DB (docs/MEMORY.md)."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            os.close(os.open(self.path, flags, 0o600))
        except FileExistsError:
            pass
        except OSError as exc:
            raise Unwritable(
                f"cannot create the history DB {self.path}: {describe(exc)}", path=self.path, errno=exc.errno
            ) from exc

    def _error(self, exc: sqlite3.Error, doing: str, kind: type[FlowsMemoryError]) -> FlowsMemoryError:
        """The coded error for SQLite's ``exc``, carrying SQLite's own cause; only a DB that SQLite
        says is damaged is the user told to move aside."""
        name = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
        if name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or name.startswith("SQLITE_CORRUPT_"):
            return Unreachable(
                f"the history DB {self.path} is damaged ({exc}, {name}): move it aside and run "
                "`flows sync`, which rebuilds it from the learned files and the journal",
                path=self.path,
            )
        code = errno.ENOSPC if name == "SQLITE_FULL" else None
        return kind(f"cannot {doing} the history DB {self.path}: {exc} ({name})", path=self.path, errno=code)

    def _reader(self) -> sqlite3.Connection | None:
        """This thread's connection for reading: the writer if it has one, else a read-only one;
        None when the DB holds no schema yet (it reads as empty)."""
        snap = getattr(self._local, "snapshot", None)
        if snap is not None:
            return snap if isinstance(snap, sqlite3.Connection) else None
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        conn = conn or getattr(self._local, "ro", None)
        if conn is not None:
            return conn
        self._close_first()
        self._check_files()
        conn, version = self._open_without_creating() if self.read_only else self._open_read_only()
        if version != SCHEMA_VERSION:
            conn.close()
            self._local.guard = None
        if version > SCHEMA_VERSION:
            raise self._newer(version)
        if version == 0:  # created but never migrated: no rows yet
            return None
        if version < SCHEMA_VERSION and self.read_only:
            raise Unreachable(
                f"the history DB {self.path} has schema {version}, older than this flows-memory "
                f"({SCHEMA_VERSION}), and this reader never writes it: run `flows sync` once to upgrade it",
                path=self.path,
            )
        if version < SCHEMA_VERSION:  # an older schema: reading needs the migration
            try:
                return self._connect()
            except Unwritable as exc:
                raise Unreachable(
                    f"the history DB {self.path} has schema {version}, older than this flows-memory "
                    f"({SCHEMA_VERSION}), and cannot be migrated here ({exc}): run `flows sync` where "
                    "it can be written",
                    path=self.path,
                ) from exc
        self._local.ro = conn
        return conn

    def _first_snapshot(self) -> sqlite3.Connection | None:
        """This thread's first read, when it can be made without setting up the write-ahead log's
        shared index: a connection in one read transaction already begun, or None (the caller opens
        the usual reader).

        The first connection to a WAL database (no other process has it open) rebuilds the index in
        its ``-shm``: it truncates the file and writes each of its pages again (and ``fchown``s it
        and the log as root), file system metadata changes that wait behind the disk's journal while
        other processes flush. A process that reads once (``flows recall``) needs none of it when the
        log is empty: the connection opens the index read-only (SQLite's ``readonly_shm``), so with no
        other process attached it reads the log into its own memory (nothing, here) and the DB file
        under SQLite's read lock, which keeps any checkpoint from writing the DB while it reads. Its
        one transaction begins with the schema check (``PRAGMA user_version`` inside ``BEGIN``), so
        every read of the snapshot is made in it: a snapshot of the DB as of that moment, as the usual
        reader gives. When another process has the DB open, the index is mapped read-only and read
        as usual; if SQLite cannot begin the read that way (a writer's log holding frames that no
        read mark covers yet), or the schema is not this version's, the connection is dropped and
        the usual reader opened. Used once per thread (a connection whose index is its own memory
        drops its page cache on every transaction): the next read closes it and opens the usual
        reader, and keeps that.
        """
        if self.read_only or getattr(self._local, "first_done", False):
            return None
        self._local.first_done = True
        wal_size, indexed = self._check_files()
        if wal_size or not indexed:
            return None  # a log to replay, or no index to read: the usual reader makes them
        try:
            conn = sqlite3.connect(
                _file_uri(self.path) + "?mode=ro&readonly_shm=1",
                uri=True,
                timeout=30.0,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error:
            return None
        try:
            conn.execute("BEGIN")
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])  # begins the read
        except sqlite3.Error:
            conn.close()
            return None
        if version != SCHEMA_VERSION:  # a migration, or a newer schema: the usual reader says which
            conn.close()
            return None
        return conn

    def _open_read_only(self) -> tuple[sqlite3.Connection, int]:
        """A read-only connection and the DB's schema version (``PRAGMA user_version``, the first
        statement: it opens the file and the WAL's index). ``timeout`` is SQLite's busy timeout."""
        uri = _file_uri(self.path)
        try:
            conn = sqlite3.connect(
                uri + "?mode=ro", uri=True, timeout=30.0, isolation_level=None, check_same_thread=False
            )
            return conn, _user_version(conn)
        except sqlite3.Error as exc:
            # SQLite reads a WAL database through its -shm, which it must be able to create: on a
            # read-only or full disk, or in a folder this user cannot write, it cannot.
            guard = self._unlocked_read()
            if guard is None:
                raise self._error(exc, "open", Unreachable) from exc
        try:  # no log to replay: read the file as it is, without SQLite's shared lock
            conn = sqlite3.connect(
                uri + "?mode=ro&immutable=1", uri=True, isolation_level=None, check_same_thread=False
            )
            version = _user_version(conn)
        except sqlite3.Error as exc:
            raise self._error(exc, "open", Unreachable) from exc
        self._local.guard = guard
        return conn, version

    def _open_without_creating(self) -> tuple[sqlite3.Connection, int]:
        """A connection that reads the DB and creates no file, for a ``read_only`` DB.

        SQLite reads a WAL database through its ``-shm`` index and creates it (and an empty
        ``-wal``) when missing, even for ``mode=ro``, and leaves both behind. So:

        * no log, or an empty one: every committed transaction is in the DB file, so it is read
          ``immutable`` (no lock, no index, nothing written, not even an existing ``-shm``). Safe
          because of what is watched: the DB's stamp (inode, size, mtime), taken before the log
          was looked at, and the log, are checked after every read; a writer writes its log
          before it touches the DB, so a log with content or a changed DB fails the read (the
          store reads again once, on a fresh connection). On a read-only file system nothing can
          change and nothing is watched;
        * a log with content and its index (a writer has the DB open, or left them): ``mode=ro``,
          which joins SQLite's locking through them like any reader: it creates no file, and
          SQLite marks its read in the index's shared memory (that cannot be avoided while a
          writer's log holds part of the DB);
        * a log with content and no index (a writer died and its ``-shm`` was removed): refused,
          since reading the log needs the index it would create.

        Raises:
            Unreachable: the last case, or SQLite cannot open the DB.
        """
        uri = _file_uri(self.path)
        wal, shm = f"{self.path}-wal", f"{self.path}-shm"
        try:
            stamp = self._stamp()  # before the log is looked at (see the docstring)
            logged = _size(wal) > 0
            indexed = os.path.lexists(shm)
            frozen = bool(os.statvfs(self.path.parent).f_flag & os.ST_RDONLY)
        except OSError as exc:
            raise Unreachable(
                f"cannot read the history DB {self.path}: {describe(exc)}", path=self.path
            ) from exc
        if logged and indexed:
            try:
                conn = sqlite3.connect(
                    uri + "?mode=ro", uri=True, timeout=30.0, isolation_level=None, check_same_thread=False
                )
                version = _user_version(conn)
            except sqlite3.Error as exc:
                raise self._error(exc, "open", Unreachable) from exc
            self._local.guard = None
            return conn, version
        if logged:
            raise Unreachable(
                f"the history DB {self.path} has a write-ahead log ({wal}) holding transactions not yet "
                f"in the DB, and no index ({shm}); reading the log would create the index, which a "
                "read-only reader never does: run `flows sync` once (it folds the log into the DB)",
                path=self.path,
            )
        try:
            conn = sqlite3.connect(
                uri + "?mode=ro&immutable=1", uri=True, isolation_level=None, check_same_thread=False
            )
            version = _user_version(conn)
        except sqlite3.Error as exc:
            raise self._error(exc, "open", Unreachable) from exc
        self._local.guard = (0, 0, 0) if frozen else stamp
        return conn, version

    def schema_version(self) -> int:
        """The DB's schema version (``PRAGMA user_version``; 0 when there is no DB), read without
        writing or migrating anything (for ``read_only``, without creating any file either).

        Raises:
            Unreachable: the DB cannot be opened, or is not a regular file.
        """
        if not self.exists():
            return 0
        self._check_files()
        conn, version = self._open_without_creating() if self.read_only else self._open_read_only()
        conn.close()
        self._local.guard = None
        return version

    def _unlocked_read(self) -> tuple[int, int, int] | None:
        """Whether the DB file alone (``immutable``) holds everything, and what to watch while it is
        read so. None when its write-ahead log holds something (SQLite's failure then stands). On a
        read-only file system nobody can write the DB, and nothing is watched (``(0, 0, 0)``);
        otherwise (a folder this user cannot write, a full disk) the DB's stamp (inode, size,
        mtime) is checked after each read, and a log appearing or the file changing fails the read."""
        try:
            if _size(f"{self.path}-wal") > 0:
                return None
            if os.statvfs(self.path.parent).f_flag & os.ST_RDONLY:
                return (0, 0, 0)
            return self._stamp()
        except OSError:
            return None

    def _stamp(self) -> tuple[int, int, int]:
        st = os.stat(self.path)
        return (st.st_ino, st.st_size, st.st_mtime_ns)

    def _unchanged(self) -> None:
        """After a read without SQLite's lock: fail it if the DB was written meanwhile."""
        guard = getattr(self._local, "guard", None)
        if guard is None or guard == (0, 0, 0):
            return
        try:
            changed = self._stamp() != guard or _size(f"{self.path}-wal") > 0
        except OSError:
            changed = True
        if changed:
            conn = getattr(self._local, "ro", None)
            if conn is not None:
                conn.close()
            self._local.ro = self._local.guard = None
            self._writes += 1  # a fresh connection's data_version starts over: what was kept is stale
            self.changes_seen += 1  # the read is worth doing again: ``MemoryStore`` does it once
            raise Unreachable(
                f"the history DB {self.path} was written while it was read without SQLite's lock (which "
                "needs a -shm file that could not be made here, or that a read-only reader does not "
                "make: a read-only folder, a full disk): run the command again",
                path=self.path,
            )

    def _newer(self, version: int) -> Unreachable:
        return Unreachable(
            f"the history DB {self.path} has schema {version}, newer than this flows-memory "
            f"({SCHEMA_VERSION}); upgrade flows-memory",
            path=self.path,
        )

    def _connect(self) -> sqlite3.Connection:
        """This thread's connection for writing, creating and migrating the DB as needed."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self.read_only:
            raise Unwritable(
                f"the history DB {self.path} was opened read-only: nothing writes it", path=self.path
            )
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise Unwritable(
                f"cannot create {self.path.parent}: {exc.strerror or exc}", path=self.path, errno=exc.errno
            ) from exc
        self._check_files()
        self._create_private()
        try:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._error(exc, "open", Unwritable) from exc
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(conn)
        except sqlite3.Error as exc:
            conn.close()
            raise self._error(exc, "write", Unwritable) from exc
        except BaseException:
            conn.close()
            raise
        self._local.conn = conn
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise self._newer(version)
        for target in range(version + 1, SCHEMA_VERSION + 1):
            conn.execute("BEGIN IMMEDIATE")
            try:
                if conn.execute("PRAGMA user_version").fetchone()[0] < target:
                    migration = _MIGRATIONS[target]
                    if callable(migration):
                        migration(conn)
                    else:
                        for statement in _split(migration):
                            conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {target}")
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)  # a failed rollback must not hide why the migration failed
                raise

    def close(self) -> None:
        """Close this thread's connections (safe twice). The reader goes first: the writer closing
        last folds the write-ahead log into the DB and removes it with its ``-shm`` (SQLite does that
        only for the last connection, and never for a read-only one)."""
        self._close_first()
        for name in ("ro", "conn"):
            conn = getattr(self._local, name, None)
            if conn is not None:
                conn.close()
                setattr(self._local, name, None)
        self._local.guard = None

    def _close_first(self) -> None:
        """Close the connection this thread's first read went through (``_first_snapshot``), kept
        until the thread reads again (a process that reads once never pays for its closing)."""
        first = getattr(self._local, "first", None)
        if first is not None:
            self._local.first = None
            first.close()

    def snapshot(self) -> contextlib.AbstractContextManager[None]:
        """Every read of this thread inside the block sees one state of the DB (one read
        transaction); a DB missing when the block starts reads as empty throughout it."""
        return _Snapshot(self)

    # -- reads -------------------------------------------------------------------------------

    def _read_conn(self) -> sqlite3.Connection | None:
        """The connection reads use, or None when there is no DB (or no schema) to read."""
        return self._reader() if self.exists() else None

    def _fetch(self, sql: str, params: Sequence[Any]) -> list[Any] | None:
        """Every row ``sql`` returns, or None when there is no DB to read.

        Raises:
            Unreachable: SQLite failed the read.
        """
        conn = self._read_conn()
        if conn is None:
            return None
        try:
            return conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc

    def _query(self, sql: str, params: Sequence[Any]) -> list[Recalled]:
        raw = self._fetch(sql, params)
        if raw is None:
            return []
        if getattr(self._local, "snapshot", None) is None:
            self._unchanged()
        out = []
        rows = self._rows
        for r in raw:
            stamp = (r[0], r[7], r[8], r[10])  # as ``_STAMP`` selects it
            hit = rows.get(stamp)
            if hit is None:
                if len(rows) > 100_000:
                    rows.clear()
                hit = rows[stamp] = _row(r, self.path)
            out.append(hit)
        return out

    def recall(
        self,
        *,
        scope: str | None,
        source: str | None,
        tag: str | None = None,
        before_ms: int | None,
        limit: int | None,
        now_ms: int | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, str] | None = None,
    ) -> list[Recalled]:
        """Rows not retired matching every filter, newest first, at most ``limit``; with ``now_ms``,
        only those not expired at that time either.

        ``tags`` (and ``tag``) must all be on a row; ``meta`` maps top-level metadata keys to the
        ``meta_value_key`` their value must have (see ``_recall_sql`` for the walk).
        """
        wanted = [tag, *tags] if tag is not None else list(tags)
        pairs = list(meta.items()) if meta else []
        shape = (
            len(wanted),
            len(pairs),
            scope is not None,
            source is not None,
            before_ms is not None,
            now_ms is not None,
            limit is not None,
        )
        # Inside a snapshot a bounded read selects each row's stamp first (see ``_stamped``), once
        # this object has built rows it could reuse: before that (a process's first read), every
        # row would be read again by a second statement, so the rows are read by one.
        snapshot = (
            limit is not None and bool(self._rows) and getattr(self._local, "snapshot", None) is not None
        )
        sql = self._recall_sql.get((shape, snapshot))
        if sql is None:
            sql = _recall_sql(shape)
            if snapshot:  # rows this object has built are not read again (see ``_stamped``)
                sql = sql.replace(f"SELECT {_COLUMNS} ", f"SELECT {_STAMP} ", 1)
            self._recall_sql[(shape, snapshot)] = sql
        params: list[Any] = wanted
        for pair in pairs:
            params.extend(pair)
        if scope is not None:
            params.append(scope)
        if source is not None:
            params.append(source)
        if before_ms is not None:
            params.append(before_ms)
        read = (sql, limit, *params) if snapshot else None  # the same read at another time
        if now_ms is not None:
            params.append(now_ms)
        if limit is not None:
            params.append(limit)
        return self._query(sql, params) if read is None else self._stamped(sql, params, read, now_ms)

    def _stamped(
        self, sql: str, params: Sequence[Any], read: tuple[Any, ...], now_ms: int | None
    ) -> list[Recalled]:
        """The rows ``sql`` (selecting ``_STAMP``) finds, in order, inside a snapshot: a row this
        object built before, with the same commit time and citation, is that row still (its finding
        never changes: its key is the finding's hash); the others are read in full (and checked,
        ``_row``) by one more statement of the same snapshot. Returning the finding's text, tags and
        metadata only for rows not yet built is what makes a warm recall cheap. The same ``read``
        (the statement and its filters) answered with the same stamps as last time is the same
        rows: one comparison of the two lists instead of a lookup per row.

        And the same ``read`` in a snapshot of the same DB version (``version``: no commit of
        another connection, no write of this object, the same connection) as the one it was last
        answered in, at a time no earlier than then and before any of its rows expires, has that
        very answer: nothing it depends on can have moved, so the statement is not run again
        (not for a read without SQLite's lock, ``_unchanged``, where SQLite's version says nothing).
        """
        local = self._local
        snap = local.snapshot  # inside a snapshot: its connection, or _ABSENT (no DB)
        if snap is _ABSENT:
            return []
        version = self.version() if local.guard is None else None  # begins the snapshot's read
        last = self._reads.get(read)
        if (
            last is not None
            and version is not None
            and last[2] == version
            and (now_ms is None or last[3] <= now_ms < last[4])
        ):
            return list(last[1])
        try:
            raw = snap.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc
        if last is not None and last[0] == raw:
            return self._answered(read, raw, last[1], version, now_ms)
        out = list(map(self._rows.get, raw))  # a stamp seen before: that row, as built then
        if all(out):  # (a Recalled is always true)
            return self._answered(read, raw, cast("list[Recalled]", out), version, now_ms)
        missing = [r[0] for r, hit in zip(raw, out, strict=True) if hit is None]
        built: dict[int, Recalled] = {}
        for i in range(0, len(missing), 500):
            chunk = missing[i : i + 500]
            marks = ",".join("?" * len(chunk))
            built.update(
                (r.id, r)
                for r in self._query(f"SELECT {_COLUMNS} FROM findings f WHERE f.id IN ({marks})", chunk)
            )
        found = [hit if hit is not None else built.get(r[0]) for hit, r in zip(out, raw, strict=True)]
        if any(r is None for r in found):
            self._unchanged()  # a read without SQLite's lock that the DB changed under: read again
            raise Unreachable(
                f"the history DB {self.path} is damaged (rows its tag or time index names are not in "
                "its table): move it aside and run `flows sync`, which rebuilds it from the learned "
                "files and the journal",
                path=self.path,
            )
        return self._answered(read, raw, cast("list[Recalled]", found), version, now_ms)  # none is None

    def _answered(
        self,
        read: tuple[Any, ...],
        raw: list[Any],
        rows: list[Recalled],
        version: tuple[int, int] | None,
        now_ms: int | None,
    ) -> list[Recalled]:
        """Remember ``rows`` as the answer of ``read`` to the stamps ``raw`` (``_stamped``), in a
        snapshot of ``version`` at ``now_ms``, until the first of them expires."""
        if len(self._reads) >= 512:
            self._reads.clear()
        until = min((r.expires_ms for r in rows if r.expires_ms is not None), default=_NEVER)
        self._reads[read] = (raw, rows, version, now_ms if now_ms is not None else 0, until)
        return list(rows)

    def recall_keys(
        self,
        *,
        scope: str | None,
        source: str | None,
        before_ms: int | None,
        now_ms: int,
        tags: Sequence[str] = (),
        meta: Mapping[str, str] | None = None,
    ) -> list[str]:
        """The keys of the rows ``recall`` would return with no limit (newest first), without
        building the rows: what a search by meaning ranks before it reads the few it returns."""
        pairs = list(meta.items()) if meta else []
        shape = (
            len(tags),
            len(pairs),
            scope is not None,
            source is not None,
            before_ms is not None,
            True,
            False,
        )
        sql = _recall_sql(shape).replace(f"SELECT {_COLUMNS} ", "SELECT f.key ", 1)
        params: list[Any] = list(tags)
        for pair in pairs:
            params.extend(pair)
        params += [v for v in (scope, source, before_ms) if v is not None]
        params.append(now_ms)
        conn = self._read_conn()
        if conn is None:
            return []
        try:
            keys = [r[0] for r in conn.execute(sql, params)]
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc
        if getattr(self._local, "snapshot", None) is None:
            self._unchanged()
        return keys

    def live_rows(self, keys: Sequence[str], now_ms: int) -> list[Recalled]:
        """The rows of ``keys`` that are live (not retired, not expired at ``now_ms``)."""
        out: list[Recalled] = []
        for i in range(0, len(keys), 500):
            chunk = list(keys[i : i + 500])
            marks = ",".join("?" * len(chunk))
            out += self._query(
                f"SELECT {_COLUMNS} FROM findings f WHERE f.key IN ({marks}) AND {_LIVE}", [*chunk, now_ms]
            )
        return out

    def search(
        self, words: Sequence[Collection[str]], *, scope: str | None, limit: int, now_ms: int | None = None
    ) -> list[Recalled]:
        """Candidate rows for ``why``: the newest ``limit`` rows matching all of ``words`` and the
        newest ``limit`` matching each word, by FTS5 over the stems of text, tags and source. Each
        word is given as its index terms (``memory._stem.terms``); a row matches it when it holds
        any of them.

        The caller ranks them. Walking each posting list newest first with a limit keeps the cost
        bounded however common a word is (bm25 over every match is not).
        """
        conn = self._read_conn()
        if not words or conn is None:
            return []
        quoted = ["(" + " OR ".join(_quote(t) for t in group) + ")" for group in words if group]
        queries = [" AND ".join(quoted)] if len(quoted) > 1 else []
        queries += quoted
        ids: set[int] = set()
        try:
            newest_first = [_shard_table(low) for low in reversed(_shards(conn, self.path))]
            for match in queries:
                found = 0  # the shards split the rows by id: the newest first until ``limit`` match
                for table in newest_first:
                    rows = conn.execute(
                        f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT ?",
                        (match, limit - found),
                    ).fetchall()
                    ids.update(r[0] for r in rows)
                    found += len(rows)
                    if found >= limit:
                        break
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        sql = f"SELECT {_COLUMNS} FROM findings f WHERE f.id IN ({marks})"
        params: list[Any] = list(ids)
        if scope is not None:
            sql += " AND f.scope = ?"
            params.append(scope)
        if now_ms is not None:
            sql += f" AND {_LIVE}"
            params.append(now_ms)
        else:
            sql += f" AND {_NOT_RETIRED}"
        return self._query(sql, params)

    def get(self, key: str, now_ms: int) -> Recalled | None:
        """The live row of the finding ``key`` (not retired, not expired at ``now_ms``), or None."""
        found = self._query(f"SELECT {_COLUMNS} FROM findings f WHERE f.key = ? AND {_LIVE}", (key, now_ms))
        return found[0] if found else None

    def rows_of(self, keys: Sequence[str]) -> list[Recalled]:
        """The rows of ``keys``, live or not."""
        if not keys:
            return []
        marks = ",".join("?" * len(keys))
        return self._query(f"SELECT {_COLUMNS} FROM findings f WHERE f.key IN ({marks})", list(keys))

    def every_row(self) -> list[Recalled]:
        """Every row, live or not (what ``flows check`` verifies)."""
        return self._query(f"SELECT {_COLUMNS} FROM findings f ORDER BY f.id", ())

    def live_held(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` the DB holds as rows not (yet) marked retired."""
        return set(self._keys("SELECT key FROM findings WHERE retired_ms IS NULL AND key IN ({})", keys))

    def _keys(self, template: str, keys: Iterable[str]) -> list[str]:
        keys = list(keys)
        conn = self._read_conn() if keys else None
        if conn is None:
            return []
        out: list[str] = []
        try:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                out.extend(r[0] for r in conn.execute(template.format(",".join("?" * len(chunk))), chunk))
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc
        return out

    def scopes(
        self, after: str | None = None, limit: int | None = None, *, now_ms: int | None = None
    ) -> list[str]:
        """The scopes the DB holds findings not retired of (with ``now_ms``, nor expired by then),
        sorted (by code point: SQLite compares the UTF-8 bytes, which sort as their code points do);
        with ``after``, only those sorting after it; with ``limit``, the first ``limit`` of them.
        Walked in the scope index's order."""
        conn = self._read_conn()
        if conn is None:
            return []
        sql = "SELECT DISTINCT scope FROM findings f WHERE retired_ms IS NULL"
        params: list[object] = []
        if now_ms is not None:  # a scope whose rows all expired is no page's to look at
            sql += f" AND {_NOT_EXPIRED}"
            params.append(now_ms)
        if after is not None:
            sql += " AND scope > ?"
            params.append(after)
        sql += " ORDER BY scope"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        try:
            rows = conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc
        return [r[0] for r in rows]

    def version(self) -> tuple[int, int]:
        """Changes when the DB's content may have changed: another connection's commit moves
        SQLite's ``data_version``; this object's own writes, and a reader connection dropped for a
        change seen under it, move the second number."""
        local = self._local
        snap = local.snapshot  # inside one: its connection (or _ABSENT)
        if snap is not None and snap is not _ABSENT and local.data_version is not None:
            # asked again in the same snapshot: SQLite's data_version stays what it was when the
            # read transaction began (the pragma begins it when it is the first statement)
            return (local.data_version, self._writes)
        conn = self._read_conn() if snap is None else None if snap is _ABSENT else snap
        if conn is None:
            return (-1, self._writes)
        try:
            found = int(conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc
        if snap is not None:
            local.data_version = found
        return (found, self._writes)

    def held(self, keys: Iterable[str]) -> dict[str, Citation]:
        """The citation the DB holds for each of ``keys`` that it has."""
        keys = list(keys)
        conn = self._read_conn() if keys else None
        if conn is None:
            return {}
        out: dict[str, Citation] = {}
        try:
            if len(keys) <= _FEW_KEYS:  # one lookup each: a statement SQLite prepares once and cheaply
                for key in keys:
                    row = conn.execute(
                        "SELECT run_id, stream, record_id FROM findings WHERE key = ?", (key,)
                    ).fetchone()
                    if row is not None:
                        out[key] = Citation(row[0], row[1], row[2])
                keys = []
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                marks = ",".join("?" * len(chunk))
                for key, run_id, stream, rid in conn.execute(
                    f"SELECT key, run_id, stream, record_id FROM findings WHERE key IN ({marks})", chunk
                ):
                    out[key] = Citation(run_id, stream, rid)
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc
        if getattr(self._local, "snapshot", None) is None:
            self._unchanged()
        return out

    def count(self) -> int:
        """How many findings the DB holds."""
        conn = self._read_conn()
        if conn is None:
            return 0
        try:
            return int(conn.execute("SELECT count(*) FROM findings").fetchone()[0])
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc

    # -- writes (sync only) --------------------------------------------------------------------

    def upsert(self, entries: Sequence[Recalled], now_ms: int) -> None:
        """Insert or update ``entries`` (by key; a newer citation replaces an older) in one transaction."""
        conn = self._connect()
        lows: list[int] | None = None  # the full-text shards, read at the first new row
        try:
            conn.execute("BEGIN IMMEDIATE")
            for e in entries:
                tags = orjson.dumps(list(e.tags)).decode()
                cur = conn.execute(
                    "SELECT id, learned_ms, run_id, record_id FROM findings WHERE key = ?", (e.key,)
                ).fetchone()
                if cur is not None and (cur[2], cur[3]) == (e.citation.run_id, e.citation.id):
                    continue
                if cur is not None and cur[1] > e.learned_ms:
                    continue  # the DB holds a newer commit of this finding
                if cur is not None:
                    conn.execute("DELETE FROM finding_tags WHERE finding = ?", (cur[0],))
                    conn.execute("DELETE FROM finding_meta WHERE finding = ?", (cur[0],))
                # One statement for a new finding and a newer commit of a known one.
                row_id = conn.execute(
                    "INSERT INTO findings (key, scope, flow, text, source, tags, learned_ms, run_id, stream,"
                    " record_id, synced_ms, metadata, expires_ms, revision, memory, retired_ms)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
                    " (SELECT forgotten_ms FROM retirements WHERE key = ?))"
                    " ON CONFLICT (key) DO UPDATE SET scope=excluded.scope, flow=excluded.flow,"
                    " text=excluded.text, source=excluded.source, tags=excluded.tags,"
                    " learned_ms=excluded.learned_ms, run_id=excluded.run_id, stream=excluded.stream,"
                    " record_id=excluded.record_id, synced_ms=excluded.synced_ms,"
                    " metadata=excluded.metadata, expires_ms=excluded.expires_ms, revision=excluded.revision,"
                    # a key is one memory's: a newer commit of a version without the memory id (a
                    # plain learn of what a synced version holds: a learn reads no DB) keeps the row's
                    " memory=coalesce(excluded.memory, findings.memory) RETURNING id",
                    (
                        e.key,
                        e.scope,
                        e.flow,
                        e.text,
                        e.source,
                        tags,
                        e.learned_ms,
                        e.citation.run_id,
                        e.citation.stream,
                        e.citation.id,
                        now_ms,
                        _metadata_text(e),
                        e.expires_ms,
                        e.revision or None,
                        e.memory,
                        e.key,
                    ),
                ).fetchone()[0]
                conn.executemany(
                    "INSERT OR IGNORE INTO finding_tags (tag, learned_ms, finding) VALUES (?,?,?)",
                    [(t, e.learned_ms, row_id) for t in set(e.tags)],
                )
                if cur is None:  # a row's text, tags and source never change (its key hashes them)
                    if lows is None:
                        lows = _shards(conn, self.path)
                    if row_id >= lows[-1] + SHARD_ROWS:
                        conn.execute(f"CREATE VIRTUAL TABLE {_shard_table(row_id)}{_STEMS_COLUMNS}")
                        conn.execute("INSERT INTO stem_shards VALUES (?)", (row_id,))
                        lows.append(row_id)
                    conn.execute(
                        f"INSERT INTO {_shard_table(_shard_of(lows, row_id))} (rowid, text, tags, source)"
                        " VALUES (?,?,?,?)",
                        _stem_row(row_id, e.text, e.tags, e.source),
                    )
                if e.metadata:
                    conn.executemany(
                        "INSERT OR IGNORE INTO finding_meta (key, value, learned_ms, finding)"
                        " VALUES (?,?,?,?)",
                        _meta_rows(e.metadata, e.learned_ms, row_id),
                    )
            conn.execute("COMMIT")
            self._writes += 1
        except sqlite3.Error as exc:
            _rollback(conn)  # SQLite's cause is what the user needs, not a failed rollback's
            raise self._error(exc, "write", Unwritable) from exc
        except Unreachable:  # a damaged shard table
            _rollback(conn)
            raise

    def retire(self, entries: Sequence[Retired], now_ms: int) -> None:
        """Record ``entries`` (the first retirement of each key is kept) and mark the rows they
        retire, in one transaction."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            for r in entries:
                conn.execute(
                    "INSERT INTO retirements (key, scope, flow, reason, by_key, forgotten_ms, run_id, stream,"
                    " record_id, synced_ms) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT (key) DO UPDATE SET"
                    " scope=excluded.scope, flow=excluded.flow, reason=excluded.reason,"
                    " by_key=excluded.by_key, forgotten_ms=excluded.forgotten_ms, run_id=excluded.run_id,"
                    " stream=excluded.stream, record_id=excluded.record_id, synced_ms=excluded.synced_ms"
                    " WHERE (excluded.forgotten_ms, excluded.run_id) < (forgotten_ms, run_id)",
                    (
                        r.key,
                        r.scope,
                        r.flow,
                        r.reason,
                        r.by,
                        r.forgotten_ms,
                        r.citation.run_id,
                        r.citation.stream,
                        r.citation.id,
                        now_ms,
                    ),
                )
                conn.execute(
                    "UPDATE findings SET retired_ms = ? WHERE key = ? AND retired_ms IS NULL",
                    (r.forgotten_ms, r.key),
                )
            conn.execute("COMMIT")
            self._writes += 1
        except sqlite3.Error as exc:
            _rollback(conn)  # SQLite's cause is what the user needs, not a failed rollback's
            raise self._error(exc, "write", Unwritable) from exc

    def unretire(self, keys: Sequence[str]) -> None:
        """Drop the retirements recorded for ``keys`` and unmark their rows, in one transaction (what
        ``flows check --repair`` does to a mark no journal record backs)."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            for key in keys:
                conn.execute("DELETE FROM retirements WHERE key = ?", (key,))
                conn.execute("UPDATE findings SET retired_ms = NULL WHERE key = ?", (key,))
            conn.execute("COMMIT")
            self._writes += 1
        except sqlite3.Error as exc:
            _rollback(conn)
            raise self._error(exc, "write", Unwritable) from exc
        self._rows.clear()
        self._reads.clear()

    def erase(self, keys: Sequence[str]) -> int:
        """Delete the rows of ``keys`` and their index entries (tags, metadata, full text) with their
        bytes overwritten (``secure_delete``), merge each full-text shard that held one so no
        segment or page key keeps their terms (a shard holds ``SHARD_ROWS`` rows at most, so the
        merge does not grow with the DB), and truncate the write-ahead log, so no page of the DB or
        its log holds them; the retirements stay (they hold no content). How many rows went (0 when
        there is no DB)."""
        if not keys or not self.exists():
            return 0
        conn = self._connect()
        gone = 0
        try:
            conn.execute("PRAGMA secure_delete = ON")
            conn.execute("BEGIN IMMEDIATE")
            lows = _shards(conn, self.path)
            touched: set[int] = set()
            for i in range(0, len(keys), 500):
                chunk = list(keys[i : i + 500])
                marks = ",".join("?" * len(chunk))
                ids = [r[0] for r in conn.execute(f"SELECT id FROM findings WHERE key IN ({marks})", chunk)]
                if not ids:
                    continue
                by_shard: dict[int, list[int]] = {}
                for row_id in ids:
                    by_shard.setdefault(_shard_of(lows, row_id), []).append(row_id)
                for low, shard_ids in by_shard.items():
                    table = _shard_table(low)
                    conn.execute(
                        f"DELETE FROM {table} WHERE rowid IN ({','.join('?' * len(shard_ids))})", shard_ids
                    )
                touched.update(by_shard)
                id_marks = ",".join("?" * len(ids))
                conn.execute(f"DELETE FROM finding_tags WHERE finding IN ({id_marks})", ids)
                conn.execute(f"DELETE FROM finding_meta WHERE finding IN ({id_marks})", ids)
                gone += conn.execute(f"DELETE FROM findings WHERE id IN ({id_marks})", ids).rowcount
            # Each shard that held a row merged whole: FTS5's 'secure-delete' option (SQLite 3.42
            # and later) drops a row's terms from its segment, but a term that began a page stays
            # as that page's key in the index's directory (seen with SQLite 3.51): only a merge
            # rewrites both. A shard that held none of the rows holds none of their terms.
            for low in sorted(touched):
                table = _shard_table(low)
                conn.execute(f"INSERT INTO {table} ({table}) VALUES ('optimize')")
            conn.execute("COMMIT")
            self._writes += 1
            # the old pages (in the DB and earlier frames of its log) go only once the log is
            # checkpointed whole: another process's open read keeps them, and is waited for
            # (a reader found by an earlier erase of this store is not waited for again: an
            # erase by filter of many memories waited once per memory)
            self.pages_held = not _truncate_log(conn, 0 if self.pages_held else ERASE_LOG_WAIT_MS)
        except sqlite3.Error as exc:
            _rollback(conn)
            raise self._error(exc, "write", Unwritable) from exc
        except Unreachable:  # a damaged shard table
            _rollback(conn)
            raise
        self._rows.clear()  # rows read earlier by this process
        self._reads.clear()
        return gone

    def truncate_log(self, wait_ms: int = ERASE_LOG_WAIT_MS) -> bool:
        """Checkpoint the write-ahead log into the DB whole and truncate it, waiting up to
        ``wait_ms`` for readers: whether it was (False while another process's read, older than
        the log's last commit, is still open). What finishes an erasure whose old pages a reader
        kept (``pages_held``)."""
        if not self.exists():
            self.pages_held = False
            return True
        conn = self._connect()
        try:
            done = _truncate_log(conn, wait_ms)
        except sqlite3.Error as exc:
            raise self._error(exc, "write", Unwritable) from exc
        self.pages_held = not done
        return done

    def retirement(self, key: str) -> Retired | None:
        """The retirement the DB records for ``key``, or None."""
        conn = self._read_conn()
        if conn is None:
            return None
        try:
            row = conn.execute(
                "SELECT key, scope, flow, reason, by_key, forgotten_ms, run_id, stream, record_id"
                " FROM retirements WHERE key = ?",
                (key,),
            ).fetchone()
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc
        if row is None:
            return None
        return Retired(row[0], row[1], row[2], row[3], row[4], row[5], Citation(row[6], row[7], row[8]))

    def scope_of(self, key: str) -> str | None:
        """The scope of the finding ``key`` if the DB holds it (live or not), else None."""
        found = self._keys("SELECT scope FROM findings WHERE key IN ({})", [key])
        return found[0] if found else None

    def memory_of(self, key: str) -> str | None:
        """The memory id of the finding ``key`` if the DB holds it (live or not), else None."""
        found = self._keys("SELECT coalesce(memory, key) FROM findings WHERE key IN ({})", [key])
        return found[0] if found else None

    def live_versions(self, memory_id: str, now_ms: int) -> list[Recalled]:
        """The live rows that are versions of ``memory_id``, newest first."""
        return self._query(
            f"SELECT {_COLUMNS} FROM findings f WHERE (f.key = ? OR f.memory = ?) AND {_LIVE}"
            " ORDER BY f.learned_ms DESC, f.id DESC",
            (memory_id, memory_id, now_ms),
        )

    def versions(self, memory_id: str) -> list[str]:
        """The keys of every row that is a version of ``memory_id`` (live or not), oldest first."""
        conn = self._read_conn()
        if conn is None:
            return []
        try:
            rows = conn.execute(
                "SELECT key FROM findings WHERE key = ? OR memory = ? ORDER BY learned_ms, id",
                (memory_id, memory_id),
            ).fetchall()
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc
        return [r[0] for r in rows]

    def retirement_marks(self) -> list[tuple[str, str, str]]:
        """Every retirement the DB records, as (key, run id, record id) of the record it cites."""
        conn = self._read_conn()
        if conn is None:
            return []
        try:
            return [
                (str(k), str(r), str(i))
                for k, r, i in conn.execute("SELECT key, run_id, record_id FROM retirements ORDER BY key")
            ]
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc

    def retired_keys(self) -> set[str]:
        """Every key the DB records as retired."""
        conn = self._read_conn()
        if conn is None:
            return set()
        try:
            return {r[0] for r in conn.execute("SELECT key FROM retirements")}
        except sqlite3.Error as exc:
            raise self._error(exc, "read", Unreachable) from exc


_ABSENT = object()  # a snapshot of a DB that was not there when it began
_NEVER = 2**63  # later than any time a read compares (``READ_INT_MAX`` + 1)
# A bounded read's last answer (``HistoryDB._stamped``): its rows' stamps, the rows, the DB version
# it was read at (None: a read without SQLite's lock), the time it was read at, its first expiry.
_Answer = tuple[list[Any], list[Recalled], tuple[int, int] | None, int, int]


def _user_version(conn: sqlite3.Connection) -> int:
    """The DB's ``PRAGMA user_version`` (its schema version here), closing ``conn`` on failure."""
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    except BaseException:
        conn.close()
        raise


def _file_uri(path: Path) -> str:
    """``file:`` and ``path`` quoted for a URI (a path of plain characters needs no quoting)."""
    text = str(path)
    return "file:" + (text if _PLAIN_PATH.fullmatch(text) else quote(text, safe="/"))


def _size(path: str) -> int:
    """The size of the file at ``path`` (0 when there is none)."""
    try:
        return os.lstat(path).st_size
    except FileNotFoundError:
        return 0


def _rollback(conn: sqlite3.Connection) -> None:
    """End ``conn``'s transaction, if any, without letting a failure to do so replace the error
    being handled (after a full disk or an I/O error SQLite may already have rolled back)."""
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:
        pass


class _Snapshot:
    """``HistoryDB.snapshot``'s block: a read transaction on this thread's connection, begun on
    entry unless one is open already (then the block is part of it), rolled back on exit; after a
    block that ended normally, a read made without SQLite's lock is checked (``_unchanged``). A
    thread's first block may read through a connection of its own (``HistoryDB._first_snapshot``),
    which is not read through again."""

    __slots__ = ("_conn", "_db", "_first", "_outer")

    def __init__(self, db: HistoryDB) -> None:
        self._db = db
        self._outer = False
        self._first = False
        self._conn: sqlite3.Connection | None = None

    def __enter__(self) -> None:
        db = self._db
        if getattr(db._local, "snapshot", None) is not None:
            return  # inside another snapshot: part of its transaction
        conn = None
        if db.exists():
            conn = None if _has_reader(db) else db._first_snapshot()
            if conn is not None:
                self._first = True  # its transaction is begun
            else:
                conn = db._reader()
        if conn is None:
            db._local.snapshot = _ABSENT
        else:
            if not self._first:
                try:
                    conn.execute("BEGIN")
                except sqlite3.Error as exc:
                    raise db._error(exc, "read", Unreachable) from exc
            db._local.snapshot = conn
            db._local.data_version = None  # not asked yet in this snapshot (``HistoryDB.version``)
        self._conn = conn
        self._outer = True

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if not self._outer:
            return
        db = self._db
        local = db._local
        local.snapshot = None
        if self._conn is not None:
            _rollback(self._conn)
            if self._first:  # closed when the thread reads again (``HistoryDB._close_first``)
                local.first = self._conn
                # the next connection's data_version starts over: what was kept by it is stale
                db._writes += 1
        if kind is None and getattr(local, "guard", None) is not None:
            db._unchanged()  # a read made without SQLite's lock


class _PerThread(threading.local):
    """A thread's connections and read state (``HistoryDB._local``). Each attribute reads as its
    default here until the thread sets it: a read asks for several a thread never set (a reader's
    ``conn``), and an attribute missing from a bare ``threading.local`` makes every such look-up
    raise and swallow an ``AttributeError`` (about 2 µs each, several a warm recall)."""

    snapshot: Any = None  # inside ``_Snapshot``: its connection or _ABSENT
    conn: sqlite3.Connection | None = None  # the writer
    ro: sqlite3.Connection | None = None  # the reader
    guard: tuple[int, ...] | None = None  # see ``_unchanged``
    first: sqlite3.Connection | None = None  # see ``_close_first``
    first_done = False  # see ``_first_snapshot``
    data_version: int | None = None  # SQLite's, once asked inside the open snapshot (``version``)


def _has_reader(db: HistoryDB) -> bool:
    """Whether this thread has a connection open to read through already."""
    local = db._local
    return getattr(local, "conn", None) is not None or getattr(local, "ro", None) is not None


def _recall_sql(shape: tuple[int, int, bool, bool, bool, bool, bool]) -> str:
    """The ``recall`` query for a shape of filters: how many tags and metadata pairs, then whether
    scope, source, before, now and limit are given. Its parameters go in that order: the tags, the
    pairs (key, value), then scope, source, before, now and limit, each when given.

    The first tag (else the first metadata pair, else time) drives the walk through its index,
    newest first; the other tags and pairs are looked up per row by primary key.
    """
    tags, pairs, scope, source, before, now, limit = shape
    where: list[str] = [_NOT_RETIRED]
    if tags:
        sql = f"SELECT {_COLUMNS} FROM finding_tags t JOIN findings f ON f.id = t.finding"
        where.append("t.tag = ?")
        order = "t.learned_ms DESC, t.finding DESC"  # t.finding is f.id; this way the index orders
        time_col = "t.learned_ms"
    elif pairs:
        sql = f"SELECT {_COLUMNS} FROM finding_meta t JOIN findings f ON f.id = t.finding"
        where.append("t.key = ? AND t.value = ?")
        order = "t.learned_ms DESC, t.finding DESC"
        time_col = "t.learned_ms"
    else:
        sql = f"SELECT {_COLUMNS} FROM findings f"
        order = "f.learned_ms DESC, f.id DESC"
        time_col = "f.learned_ms"
    where += [
        "EXISTS (SELECT 1 FROM finding_tags x WHERE x.tag = ? AND x.learned_ms = f.learned_ms"
        " AND x.finding = f.id)"
    ] * max(0, tags - 1)
    where += [
        "EXISTS (SELECT 1 FROM finding_meta x WHERE x.key = ? AND x.value = ?"
        " AND x.learned_ms = f.learned_ms AND x.finding = f.id)"
    ] * (pairs - 1 if not tags and pairs else pairs)
    for wanted, clause in (
        (scope, "f.scope = ?"),
        (source, "f.source = ?"),
        (before, f"{time_col} < ?"),
        (now, _NOT_EXPIRED),
    ):
        if wanted:
            where.append(clause)
    sql += " WHERE " + " AND ".join(where) + f" ORDER BY {order}"
    return sql + (" LIMIT ?" if limit else "")


def _quote(term: str) -> str:
    """``term`` as an FTS5 string (a term is ``\\w`` characters, but quote it whatever it holds)."""
    return '"' + term.replace('"', '""') + '"'


def _split(script: str) -> list[str]:
    """Split a migration into statements (triggers keep their inner semicolons)."""
    out, buf = [], []
    for line in script.strip().splitlines():
        buf.append(line)
        joined = "\n".join(buf).strip()
        if joined.endswith(";") and sqlite3.complete_statement(joined):
            out.append(joined)
            buf = []
    return out


def folder_mode(file_mode: int) -> int:
    """The mode a store's folders take beside files of ``file_mode``: the same bits, plus the
    execute (search) bit wherever a read bit is set, so whoever may read the learned files (the
    DB's group, say) may also list and enter their folders: 0600 gives 0700, 0640 gives 0750,
    0660 gives 0770, 0664 gives 0775."""
    return file_mode | ((file_mode & 0o444) >> 2)


def db_mode(path: Path, st: os.stat_result | None = None) -> int:
    """The mode learned files take: the DB's permission bits (by ``stat`` only), never
    executable or world-writable; 0600 when there is no DB yet. ``st`` is the DB's ``stat`` (or,
    for a regular file, its ``lstat``) when the caller took it already."""
    if st is not None:
        return st.st_mode & 0o664
    try:
        return os.stat(path).st_mode & 0o664
    except (FileNotFoundError, NotADirectoryError):  # no DB there (a file stands for its folder)
        return 0o600
    except OSError as exc:  # a name too long, a folder this user may not search
        raise Unreachable(f"cannot look at the history DB {path}: {describe(exc)}", path=path) from exc
