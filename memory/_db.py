"""The history DB: SQLite, owned by this package, written only by ``sync``.

WAL and a busy timeout let several processes read while ``sync`` writes. The schema is migrated by
``PRAGMA user_version``. ``learn`` never opens the DB; it only stats it for its mode.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from memory._errors import Unreachable, Unwritable
from memory._files import Retired, index_terms
from memory._finding import meta_value_key
from memory._results import Citation, Recalled, frozen_metadata

SCHEMA_VERSION = 5
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

_STEMS_TABLE = (
    "CREATE VIRTUAL TABLE findings_stems USING fts5 (text, tags, source,"
    " tokenize = 'unicode61 remove_diacritics 0 tokenchars _')"
)


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

_COLUMNS = (
    "f.id, f.key, f.text, f.source, f.tags, f.scope, f.flow, f.learned_ms, f.run_id, f.stream, f.record_id,"
    " f.metadata, f.expires_ms"
)
_NOT_RETIRED = "f.retired_ms IS NULL"
_NOT_EXPIRED = "(f.expires_ms IS NULL OR f.expires_ms > ?)"
_LIVE = f"{_NOT_RETIRED} AND {_NOT_EXPIRED}"


def _row(row: Sequence[Any]) -> Recalled:
    return Recalled(
        id=row[0],
        key=row[1],
        text=row[2],
        source=row[3],
        tags=tuple(orjson.loads(row[4])),
        scope=row[5],
        flow=row[6],
        learned_ms=row[7],
        citation=Citation(run_id=row[8], stream=row[9], id=row[10]),
        metadata=frozen_metadata(orjson.loads(row[11]) if row[11] else None),
        expires_ms=row[12],
    )


def _metadata_text(entry: Recalled) -> str | None:
    if not entry.metadata:
        return None
    return orjson.dumps(dict(entry.metadata), option=orjson.OPT_SORT_KEYS).decode()


class HistoryDB:
    """The SQLite history DB at ``path``; opened lazily, one connection per thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._local = threading.local()
        self._writes = 0
        self._seen = False
        # Rows already turned into results, by row id. A row's finding never changes (its key is
        # the finding's hash); a newer commit changes its citation and time, which are compared.
        self._rows: dict[int, Recalled] = {}
        self._recall_sql: dict[tuple[Any, ...], str] = {}

    def exists(self) -> bool:
        """True when the DB file exists (reads of a missing DB see no rows, and create nothing)."""
        if not self._seen:  # once there, a DB stays (an open connection keeps reading it anyway)
            self._seen = self.path.exists()
        return self._seen

    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA foreign_keys = ON")
            self._migrate(conn)
        except sqlite3.Error as exc:
            raise Unreachable(
                f"cannot open the history DB {self.path}: {exc}; check the path, or move a damaged DB "
                "aside and run `flows sync`",
                path=self.path,
            ) from exc
        except OSError as exc:
            raise Unwritable(
                f"cannot create {self.path.parent}: {exc.strerror or exc}", path=self.path
            ) from exc
        self._local.conn = conn
        return conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise Unreachable(
                f"the history DB {self.path} has schema {version}, newer than this flows-memory "
                f"({SCHEMA_VERSION}); upgrade flows-memory",
                path=self.path,
            )
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
                conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        """Close this thread's connection (safe twice)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # -- reads -------------------------------------------------------------------------------

    def _query(self, sql: str, params: Sequence[Any]) -> list[Recalled]:
        if not self.exists():
            return []
        try:
            raw = self._connect().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise Unreachable(f"cannot read the history DB {self.path}: {exc}", path=self.path) from exc
        out = []
        rows = self._rows
        for r in raw:
            hit = rows.get(r[0])
            if (
                hit is None
                or hit.learned_ms != r[7]
                or hit.citation.id != r[10]
                or hit.citation.run_id != r[8]
            ):
                if len(rows) > 100_000:
                    rows.clear()
                hit = rows[r[0]] = _row(r)
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
        sql = self._recall_sql.get(shape)
        if sql is None:
            sql = self._recall_sql[shape] = _recall_sql(shape)
        params: list[Any] = wanted
        for pair in pairs:
            params.extend(pair)
        if scope is not None:
            params.append(scope)
        if source is not None:
            params.append(source)
        if before_ms is not None:
            params.append(before_ms)
        if now_ms is not None:
            params.append(now_ms)
        if limit is not None:
            params.append(limit)
        return self._query(sql, params)

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
        if not words or not self.exists():
            return []
        quoted = ["(" + " OR ".join(_quote(t) for t in group) + ")" for group in words if group]
        queries = [" AND ".join(quoted)] if len(quoted) > 1 else []
        queries += quoted
        ids: set[int] = set()
        conn = self._connect()
        try:
            for match in queries:
                ids.update(
                    r[0]
                    for r in conn.execute(
                        "SELECT rowid FROM findings_stems WHERE findings_stems MATCH ?"
                        " ORDER BY rowid DESC LIMIT ?",
                        (match, limit),
                    )
                )
        except sqlite3.Error as exc:
            raise Unreachable(f"cannot read the history DB {self.path}: {exc}", path=self.path) from exc
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
        if not keys or not self.exists():
            return []
        out: list[str] = []
        conn = self._connect()
        try:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                out.extend(r[0] for r in conn.execute(template.format(",".join("?" * len(chunk))), chunk))
        except sqlite3.Error as exc:
            raise Unreachable(f"cannot read the history DB {self.path}: {exc}", path=self.path) from exc
        return out

    def scopes(self) -> list[str]:
        """The scopes the DB holds findings not retired of, sorted."""
        if not self.exists():
            return []
        try:
            rows = (
                self._connect()
                .execute("SELECT DISTINCT scope FROM findings WHERE retired_ms IS NULL ORDER BY scope")
                .fetchall()
            )
        except sqlite3.Error as exc:
            raise Unreachable(f"cannot read the history DB {self.path}: {exc}", path=self.path) from exc
        return [r[0] for r in rows]

    def version(self) -> tuple[int, int]:
        """Changes when the DB's content may have changed: another connection's commit moves
        SQLite's ``data_version``; this object's own writes move the second number."""
        if not self.exists():
            return (-1, self._writes)
        try:
            return (int(self._connect().execute("PRAGMA data_version").fetchone()[0]), self._writes)
        except sqlite3.Error as exc:
            raise Unreachable(f"cannot read the history DB {self.path}: {exc}", path=self.path) from exc

    def held(self, keys: Iterable[str]) -> dict[str, Citation]:
        """The citation the DB holds for each of ``keys`` that it has."""
        keys = list(keys)
        if not keys or not self.exists():
            return {}
        out: dict[str, Citation] = {}
        conn = self._connect()
        try:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                marks = ",".join("?" * len(chunk))
                for key, run_id, stream, rid in conn.execute(
                    f"SELECT key, run_id, stream, record_id FROM findings WHERE key IN ({marks})", chunk
                ):
                    out[key] = Citation(run_id, stream, rid)
        except sqlite3.Error as exc:
            raise Unreachable(f"cannot read the history DB {self.path}: {exc}", path=self.path) from exc
        return out

    def count(self) -> int:
        """How many findings the DB holds."""
        if not self.exists():
            return 0
        return int(self._connect().execute("SELECT count(*) FROM findings").fetchone()[0])

    # -- writes (sync only) --------------------------------------------------------------------

    def upsert(self, entries: Sequence[Recalled], now_ms: int) -> None:
        """Insert or update ``entries`` (by key; a newer citation replaces an older) in one transaction."""
        conn = self._connect()
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
                    " record_id, synced_ms, metadata, expires_ms, retired_ms)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,(SELECT forgotten_ms FROM retirements WHERE key = ?))"
                    " ON CONFLICT (key) DO UPDATE SET scope=excluded.scope, flow=excluded.flow,"
                    " text=excluded.text, source=excluded.source, tags=excluded.tags,"
                    " learned_ms=excluded.learned_ms, run_id=excluded.run_id, stream=excluded.stream,"
                    " record_id=excluded.record_id, synced_ms=excluded.synced_ms,"
                    " metadata=excluded.metadata, expires_ms=excluded.expires_ms"
                    " RETURNING id",
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
                        e.key,
                    ),
                ).fetchone()[0]
                conn.executemany(
                    "INSERT OR IGNORE INTO finding_tags (tag, learned_ms, finding) VALUES (?,?,?)",
                    [(t, e.learned_ms, row_id) for t in set(e.tags)],
                )
                if cur is None:  # a row's text, tags and source never change (its key hashes them)
                    conn.execute(
                        "INSERT INTO findings_stems (rowid, text, tags, source) VALUES (?,?,?,?)",
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
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise Unwritable(f"cannot write the history DB {self.path}: {exc}", path=self.path) from exc

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
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise Unwritable(f"cannot write the history DB {self.path}: {exc}", path=self.path) from exc

    def retirement(self, key: str) -> Retired | None:
        """The retirement the DB records for ``key``, or None."""
        if not self.exists():
            return None
        try:
            row = (
                self._connect()
                .execute(
                    "SELECT key, scope, flow, reason, by_key, forgotten_ms, run_id, stream, record_id"
                    " FROM retirements WHERE key = ?",
                    (key,),
                )
                .fetchone()
            )
        except sqlite3.Error as exc:
            raise Unreachable(f"cannot read the history DB {self.path}: {exc}", path=self.path) from exc
        if row is None:
            return None
        return Retired(row[0], row[1], row[2], row[3], row[4], row[5], Citation(row[6], row[7], row[8]))

    def scope_of(self, key: str) -> str | None:
        """The scope of the finding ``key`` if the DB holds it (live or not), else None."""
        found = self._keys("SELECT scope FROM findings WHERE key IN ({})", [key])
        return found[0] if found else None

    def retired_keys(self) -> set[str]:
        """Every key the DB records as retired."""
        if not self.exists():
            return set()
        try:
            return {r[0] for r in self._connect().execute("SELECT key FROM retirements")}
        except sqlite3.Error as exc:
            raise Unreachable(f"cannot read the history DB {self.path}: {exc}", path=self.path) from exc


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


def db_mode(path: Path) -> int:
    """The mode learned files take: the DB's permission bits (by ``stat`` only), never
    executable or world-writable; 0600 when there is no DB yet."""
    try:
        return os.stat(path).st_mode & 0o664
    except FileNotFoundError:
        return 0o600
