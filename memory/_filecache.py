"""The unsynced learned files' index, so a fresh process need not look at every file.

A fresh process's first read used to open and parse every unsynced learned file, and then (with the
stat-keyed index this module first held) still ``lstat`` every file and build every entry. The
index now answers "which files could be in this answer" on its own, and a read looks only at the
files it is about to return. One index per scope directory, in ``<db-dir>/flows-cache/``
(``flows-memory/`` holds learned files only):

* what a full read of each file returned, keyed by the file's size, mtime, ctime and inode (as
  git's index does, plus ctime, which ``touch -d`` cannot set back), stored newest first in pages
  of ``_PAGE`` rows (one JSON array a line, so a read decodes only the rows it reaches, after
  checking the page's digest), with a posting list per tag and a key-to-position map, each its own
  section read only when a read needs it; the tags' map and the first pages sit right after the
  header, so the first read of the file usually holds them;
* the directory's stamp at the scan that wrote it (device, inode, mtime, ctime), when the
  directory was settled then (older than ``_RACY_NS``) and every file was indexed. Learned files
  are content-addressed and only ever created, replaced or dropped by rename or unlink, each of
  which changes the directory's ctime: while the stamp matches, the index's rows are exactly the
  directory's learned files. A read then trusts the index for which files exist and in what order,
  and ``lstat``s only the files it returns (``IndexedListing``): one whose stat key differs
  (rewritten in place, which the engine never does: damage), or that is gone, makes the read start
  again from every file (``StaleIndex``), where a damaged file fails it. A file changed in place
  that a read does not return is not looked at by that read (it is judged by what it held when
  indexed), and it fails every read that would return it;
* when the stamp does not match (a file added, dropped or replaced since), a read stats every
  file, re-reads the changed ones, and writes the index again.

The index is derived and never trusted over the files: it is replaced atomically (temporary file,
then rename); its header carries a keyed BLAKE2b tag (the key is ``flows-cache/key``: 32 random
bytes, a regular file of this user, mode 0600) and names each section's BLAKE2b digest, checked
when the section is read. An index that is damaged, truncated, of another version, for another
directory, or not tagged with that key is ignored (never an error) and rebuilt; a section that does
not match its digest makes the read start again from every file. A file modified within
``_RACY_NS`` of the scan is not indexed (mtimes are coarse), and the index then carries no
stamp. Writing it is best effort: a read-only store, a full disk or a missing folder skip it, and
the read goes on from the files.

What it does not promise: a process that can write ``flows-cache/key`` as this user can forge an
index, exactly as it could rewrite the learned files and the journal themselves.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from memory._results import Citation, Recalled, frozen_metadata
from memory._safe import write_beside

CACHE_DIR = "flows-cache"
"""``<db-dir>/flows-cache``: derived indexes, safe to delete at any time."""

_MAGIC = b"FLOWSIX3"
_HINTS_MAGIC = b"FLOWSJH2"  # a run's journal hints (``journal_hint``): this, then the entries
_HINT_ID = 8  # an entry: the record id's digest (the table's order), the hint, and its keyed tag
_HINT_TAG = 16
_HINT_SLOT = _HINT_ID + 8 + _HINT_TAG
_HINTS_WHOLE = 128 * 1024  # a hints file up to this size (4,000 entries) is read whole, not probed
_HINT_TABLES = 64  # hints files read whole kept in memory (a table is what the file held then)
_HINT_WRITERS = 8  # runs whose saved entries are kept for their next save (a store writes to few)
_MAX_HINTS = 64 * 1024 * 1024  # a hints file larger than this is not read (nor written)
_VERSION = 5
_PAGE = 64  # rows per page: a tag query with a small limit decodes a few pages
_KEY_BYTES = 32
_TAG_BYTES = 32
_DIGEST_BYTES = 16
_PREFIX = len(_MAGIC) + 4 + _TAG_BYTES  # magic, header length, header tag
_FIRST_READ = 65536  # one read usually holds the header and the small sections after it
_NO_METADATA = frozen_metadata(None)  # read-only and empty: one shared by every entry without any
_RACY_NS = 2_000_000_000  # a file or folder changed this recently may change again within one tick

StatKey = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode
Stamp = tuple[int, int, int, int]  # a folder's device, inode, mtime_ns, ctime_ns
Section = tuple[int, int, str]  # offset after the header, length, BLAKE2b digest (hex)

# The fields of an entry row (``_entry_row``), by position.
_KEY, _TAGS, _SCOPE, _LEARNED, _EXPIRES = 1, 4, 5, 7, 12


class StaleIndex(Exception):
    """A file the index lists changed or went away since the index was written (or a section of
    the index does not match its digest): the read must start again from every file."""

    def __init__(self, directory: Path) -> None:
        super().__init__(str(directory))
        self.directory = directory


class LeftMeanwhile(StaleIndex):
    """A finding a read listed left while the read ran: its file was gone, and its commit erased,
    by the time the read checked it against that commit (an erase ran meanwhile); or its file was
    gone when the read opened it and its retired file is there now (an update or a forget ran
    meanwhile, and the listing may lack the version that replaced it). The read starts again, and
    the folder's files' index stays trusted."""


def cache_dir(db_path: Path) -> Path:
    """``<db-dir>/flows-cache``: where the derived indexes of a store live."""
    return db_path.parent / CACHE_DIR


def stamp_of(st: os.stat_result) -> Stamp:
    """The stamp of a folder: every rename or unlink in it changes it (ctime cannot be set back)."""
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def _stat_key(st: os.stat_result) -> StatKey:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=_DIGEST_BYTES).hexdigest()


def _hint_id(record_id: str) -> bytes:
    """Where a record's hint sorts in a hints file: a digest of its id (ids are any strings)."""
    return hashlib.blake2b(record_id.encode(errors="surrogatepass"), digest_size=_HINT_ID).digest()


def _hint_tag(key: bytes, of: tuple[str, str, str], record_id: str, at: int) -> bytes:
    """The keyed tag of one hint: binds the offset ``at`` to that record of the stream ``of``
    (journal location, run id, stream), so an entry copied from another file, store or journal,
    or edited, is not taken."""
    tag = hashlib.blake2b(_HINTS_MAGIC, key=key, digest_size=_HINT_TAG)
    for part in (*of, record_id):
        data = part.encode(errors="surrogatepass")
        tag.update(len(data).to_bytes(4, "big") + data)
    tag.update(at.to_bytes(8, "big"))
    return tag.digest()


def _hint_slot(read: Callable[[int, int], bytes], size: int, want: bytes) -> bytes | None:
    """The entry whose id is ``want`` of the hints file of ``size`` bytes that ``read(length,
    offset)`` reads, found by bisection; None when the file is not a table of entries or has none
    such."""
    count, rest = divmod(size - len(_HINTS_MAGIC), _HINT_SLOT)
    if count <= 0 or rest or size > _MAX_HINTS or read(len(_HINTS_MAGIC), 0) != _HINTS_MAGIC:
        return None
    lo, hi = 0, count
    while lo < hi:  # the first entry whose id is not below ``want``
        mid = (lo + hi) // 2
        if read(_HINT_ID, len(_HINTS_MAGIC) + mid * _HINT_SLOT) < want:
            lo = mid + 1
        else:
            hi = mid
    slot = read(_HINT_SLOT, len(_HINTS_MAGIC) + lo * _HINT_SLOT) if lo < count else b""
    return slot if len(slot) == _HINT_SLOT and slot[:_HINT_ID] == want else None


def _open_regular(path: str | Path) -> int | None:
    """A descriptor of ``path`` when it is a regular file (never a link, FIFO or device), else None."""
    opened = _open_regular_stat(path)
    return None if opened is None else opened[0]


def _open_regular_stat(path: str | Path) -> tuple[int, int] | None:
    """``_open_regular``'s descriptor, and the file's size as it was opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            return fd, st.st_size
    except OSError:
        pass
    os.close(fd)
    return None


def _pread(fd: int, length: int, offset: int) -> bytes:
    chunks = []
    while length > 0:
        chunk = os.pread(fd, length, offset)
        if not chunk:
            break
        chunks.append(chunk)
        length -= len(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _read_small(path: str | Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` when it holds at most ``limit``; else (or when it
    cannot be read) nothing."""
    fd = _open_regular(path)
    if fd is None:
        return b""
    try:
        size = os.fstat(fd).st_size
        return _pread(fd, size, 0) if size <= limit else b""
    except OSError:
        return b""
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
        e.revision,
        e.memory,
    ]


def _row_entry(row: Any) -> Recalled:
    """The entry of an index row (``ValueError`` or ``TypeError`` when it is not that shape).

    The row's types are not checked one by one: the index's tag shows this code wrote it, from an
    entry a full read returned, and a row of the wrong shape fails here and is read from its file.
    """
    eid, key, text, source, tags, scope, flow, ms, run_id, stream, rid, meta, expires, revision, memory = row
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
        revision=revision,
        memory=memory,
    )


def _read_head(path: str | Path) -> tuple[bytes, int] | None:
    """The first bytes of the index at ``path``, up to the end of its header at least, and the
    file's size; None when it is not a regular file of this format or is shorter than its header."""
    opened = _open_regular_stat(path)
    if opened is None:
        return None
    fd, size = opened
    try:
        head = _pread(fd, _FIRST_READ, 0)
        if len(head) < _PREFIX or head[: len(_MAGIC)] != _MAGIC:
            return None
        base = _PREFIX + int.from_bytes(head[len(_MAGIC) : len(_MAGIC) + 4], "big")
        if len(head) < base:
            head += _pread(fd, base - len(head), len(head))
    except OSError:
        return None
    finally:
        os.close(fd)
    return (head, size) if len(head) >= base else None


class _Index:
    """One index file as read: its checked header, and its sections read (and checked) on demand.

    Each section is read through a descriptor opened again for it, so nothing stays open; a section
    that no longer matches its digest (the index was replaced meanwhile) raises ``StaleIndex``.
    """

    def __init__(self, path: str, directory: Path, header: dict[str, Any], base: int, head: bytes) -> None:
        self.path = path
        self.directory = directory
        self.header = header
        self._base = base
        self._head = head  # the bytes the first read got, often holding the small sections too

    def _bytes(self, start: int, length: int) -> bytes:
        """``length`` bytes of the file at ``start`` (from the first read when it holds them)."""
        if start + length <= len(self._head):
            return self._head[start : start + length]
        fd = _open_regular(self.path)
        if fd is None:
            raise StaleIndex(self.directory)
        try:
            return _pread(fd, length, start)
        finally:
            os.close(fd)

    def section(self, where: Any, base: int = 0) -> Any:
        """The decoded section ``where`` (offset from ``base`` in the body, length, digest), or
        ``StaleIndex`` when it is not what the header says."""
        try:
            offset, length, digest = where
            data = self._bytes(self._base + base + offset, length)
            if not hmac.compare_digest(_digest(data), digest):
                raise StaleIndex(self.directory)
            return orjson.loads(data)
        except (OSError, ValueError, TypeError) as exc:
            raise StaleIndex(self.directory) from exc

    def page(self, number: int) -> list[bytes]:
        """Page ``number``'s rows, one JSON array each, undecoded (``StaleIndex`` when the page is
        not what the header says): a read decodes only the rows it reaches."""
        try:
            bounds = self.header["pages"]
            start, end = bounds[number], bounds[number + 1]
            digest = self.header["page_digests"][
                number * 2 * _DIGEST_BYTES : (number + 1) * 2 * _DIGEST_BYTES
            ]
            if type(start) is not int or type(end) is not int or not 0 <= start <= end or number < 0:
                raise StaleIndex(self.directory)
            data = self._bytes(self._base + start, end - start)
            if len(data) != end - start or not hmac.compare_digest(_digest(data), digest):
                raise StaleIndex(self.directory)
        except (OSError, LookupError, TypeError) as exc:
            raise StaleIndex(self.directory) from exc
        return data.split(b"\n")

    def rows(self) -> Iterator[list[Any]]:
        """Every row, newest first (each ``[size, mtime, ctime, inode, *entry row]``)."""
        try:
            count = len(self.header["pages"]) - 1
        except TypeError as exc:
            raise StaleIndex(self.directory) from exc
        for number in range(count):
            for line in self.page(number):
                try:
                    yield orjson.loads(line)
                except ValueError as exc:
                    raise StaleIndex(self.directory) from exc


class FileCache:
    """The stat-keyed indexes of one store's unsynced learned files (see the module docstring)."""

    def __init__(self, root: Path, learned_root: Path) -> None:
        self._root = root
        self._learned_root = learned_root
        self._key: bytes | None = None
        self._hint_tables: dict[str, bytes] = {}  # small hints files read whole, by path
        # the entries this object last wrote to each hints file, by (record id, offset): a run's
        # hints are written again whole as it grows, and each entry's keyed tag is made once
        self._hint_slots: dict[str, tuple[tuple[bytes, str], dict[tuple[str, int], bytes]]] = {}
        self._hints_mutex = threading.Lock()

    # -- the key ---------------------------------------------------------------------------------

    def _usable(self) -> bool:
        """Whether the cache folder is a real folder, or absent (a link there is never followed:
        the index is then not used, and reads go on from the files)."""
        st = _lstat(self._root)
        return st is None or stat.S_ISDIR(st.st_mode)

    def _load_key(self, create: bool) -> bytes | None:
        if self._key is not None or not self._usable():
            return self._key
        path = os.path.join(self._root, "key")
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

    def _create_key(self, path: str) -> bytes | None:
        key = secrets.token_bytes(_KEY_BYTES)
        if not self._write_atomically(path, key, exclusive=True):
            return self._load_key(create=False)  # another process made it first, or no room
        self._key = key
        return key

    def _write_atomically(self, path: str | Path, data: bytes, *, exclusive: bool = False) -> bool:
        """Write ``data`` to ``path`` (a file of the cache folder) through a temporary file
        (``write_beside``); False (nothing left) on any failure."""
        return write_beside(self._root, os.path.basename(path), data, exclusive=exclusive)

    # -- where the journal's records are -------------------------------------------------------

    def _hints_path(self, run_id: str, stream: str) -> str:
        digest = hashlib.blake2b(f"{run_id}/{stream}".encode(), digest_size=12).hexdigest()
        return os.path.join(self._root, f"cites-{digest}.idx")

    def journal_hint(self, location: str, run_id: str, stream: str, record_id: str) -> int | None:
        """The hint the journal gave (``JournalBackend.hints``) for the record ``record_id`` of
        ``stream`` of ``run_id`` in the journal at ``location``, as last saved; None when there is
        none, or its entry is not one this code wrote with this store's key for that record of that
        stream of that journal (never an error).

        The file is a table of fixed-size entries sorted by the record id's digest (``_hint_id``),
        each with its own keyed tag: the one entry is found by bisection and checked alone, never
        the whole table. A table kept from an earlier read may lack entries saved since by another
        process, or hold offsets since gone stale: a hint is only a hint (``Citations``).
        """
        key = self._load_key(create=False)
        if key is None:
            return None
        path = self._hints_path(run_id, stream)
        want = _hint_id(record_id)
        table = self._hint_tables.get(path)
        if table is not None:  # read whole by an earlier check: the entries are checked as they are used
            slot = _hint_slot(lambda n, at: table[at : at + n], len(table), want)
        else:
            slot = self._hint_from_file(path, want)
        if slot is None:
            return None
        at = int.from_bytes(slot[_HINT_ID : _HINT_ID + 8], "big")
        tag = _hint_tag(key, (location, run_id, stream), record_id, at)
        return at if hmac.compare_digest(slot[_HINT_ID + 8 :], tag) else None

    def _hint_from_file(self, path: str, want: bytes) -> bytes | None:
        """``_hint_slot`` of the hints file at ``path``: a small one is read whole (one read costs
        less than the probes) and kept for the next checks of the run (at most ``_HINT_TABLES``
        files); a large one is probed an id at a time."""
        opened = _open_regular_stat(path)
        if opened is None:
            return None
        fd, size = opened
        try:
            if size > _HINTS_WHOLE:
                return _hint_slot(lambda n, at: os.pread(fd, n, at), size, want)
            table = _pread(fd, size, 0)
        except OSError:
            return None
        finally:
            os.close(fd)
        if len(table) != size:
            return None
        if len(self._hint_tables) >= _HINT_TABLES:
            self._hint_tables.clear()
        self._hint_tables[path] = table
        return _hint_slot(lambda n, at: table[at : at + n], size, want)

    def save_journal_hints(self, location: str, run_id: str, stream: str, hints: dict[str, int]) -> None:
        """Keep ``hints`` for ``stream`` of ``run_id`` (best effort: nothing happens on failure)."""
        key = self._load_key(create=True)
        if key is None or not hints:
            return
        if len(_HINTS_MAGIC) + len(hints) * _HINT_SLOT > _MAX_HINTS:
            return
        path = self._hints_path(run_id, stream)
        with self._hints_mutex:
            tagged_with, made = self._hint_slots.pop(path, ((key, location), {}))
        if tagged_with != (key, location):  # the key file was made again since, or another journal
            made = {}
        of = (location, run_id, stream)
        entries = {
            (rid, at): made.get((rid, at))
            or _hint_id(rid) + at.to_bytes(8, "big") + _hint_tag(key, of, rid, at)
            for rid, at in hints.items()
            if type(at) is int and 0 <= at < 1 << 63
        }
        self._hint_tables.pop(path, None)
        self._write_atomically(path, _HINTS_MAGIC + b"".join(sorted(entries.values())))
        with self._hints_mutex:
            if len(self._hint_slots) >= _HINT_WRITERS:
                self._hint_slots.clear()
            self._hint_slots[path] = ((key, location), entries)

    # -- one directory's index -------------------------------------------------------------------

    def _index_path(self, directory: Path) -> tuple[str, str]:
        path, root = str(directory), str(self._learned_root)
        rest = path[len(root) + 1 :] if path.startswith(root + os.sep) else ""
        parts = rest.split(os.sep)
        # A folder under the root, named plainly (as ``learned_dir`` makes it), is its own relative
        # path; anything else is resolved.
        name = rest if rest and "." not in parts and ".." not in parts else os.path.relpath(path, root)
        digest = hashlib.blake2b(name.encode(), digest_size=12).hexdigest()
        return os.path.join(self._root, f"files-{digest}.idx"), name

    def _open(self, directory: Path) -> _Index | None:
        """The directory's index with its header checked; None when absent or not valid."""
        key = self._load_key(create=False)
        if key is None:
            return None
        path, name = self._index_path(directory)
        found = _read_head(path)
        if found is None:
            return None
        head, size = found
        base = _PREFIX + int.from_bytes(head[len(_MAGIC) : len(_MAGIC) + 4], "big")
        mine = hashlib.blake2b(head[: len(_MAGIC) + 4], key=key, digest_size=_TAG_BYTES)
        mine.update(head[_PREFIX:base])
        if not hmac.compare_digest(head[len(_MAGIC) + 4 : _PREFIX], mine.digest()):
            return None
        try:
            header = orjson.loads(head[_PREFIX:base])
        except orjson.JSONDecodeError:
            return None
        if (
            not isinstance(header, dict)
            or header.get("v") != _VERSION
            or header.get("dir") != name
            or header.get("size") != size - base  # truncated or grown: not the file written
        ):
            return None
        return _Index(path, directory, header, base, head)

    def _load(self, directory: Path) -> dict[str, tuple[StatKey, list[Any]]]:
        """The directory's index as {file name: (stat key, entry row)}; empty when absent or not valid."""
        index = self._open(directory)
        if index is None:
            return {}
        try:
            return {f"{row[4 + _KEY]}.json": (tuple(row[:4]), row[4:]) for row in index.rows()}
        except (StaleIndex, IndexError, TypeError):
            return {}

    @staticmethod
    def may_list(st: os.stat_result, now_ns: int) -> bool:
        """Whether an index could list a folder whose ``stat`` is ``st`` at ``now_ns``: a stamp is
        written only for a folder settled at that scan, so a folder changed within ``_RACY_NS``
        has changed since any stamp (a read need not open the folder to look for its index)."""
        return max(st.st_mtime_ns, st.st_ctime_ns) < now_ns - _RACY_NS

    def listing(self, directory: Path, st: os.stat_result) -> IndexedListing | None:
        """The index of ``directory`` as a listing, when it was written while the folder had the
        stamp it has now (``st``): its rows are then exactly the folder's learned files. None when
        there is no such index."""
        if not stat.S_ISDIR(st.st_mode):
            return None
        index = self._open(directory)
        if index is None:
            return None
        h = index.header
        stamp = h.get("stamp")
        if not isinstance(stamp, list) or tuple(stamp) != stamp_of(st):
            return None
        try:
            return IndexedListing(index, st.st_mtime_ns, st.st_ino, int(h["n"]), bool(h["expiring"]))
        except (KeyError, TypeError, ValueError):
            return None

    def _save(
        self, directory: Path, rows: Sequence[tuple[str, StatKey, list[Any]]], stamp: Stamp | None
    ) -> None:
        key = self._load_key(create=True)
        if key is None:
            return
        path, name = self._index_path(directory)
        ordered = sorted(rows, key=lambda r: (r[2][_LEARNED], r[2][_KEY]), reverse=True)
        # The body: the tags' map (where each tag's posting list is, from the postings' start),
        # the pages (rows newest first, one JSON array a line), the posting lists, the keys' map.
        # The map and the first pages come first, so a read's first read of the file holds them.
        pages = [
            b"\n".join(orjson.dumps([*k, *row]) for _, k, row in ordered[i : i + _PAGE])
            for i in range(0, len(ordered), _PAGE)
        ]
        positions_of: dict[str, list[int]] = {}
        for pos, (_, _, row) in enumerate(ordered):
            for t in dict.fromkeys(row[_TAGS]):
                positions_of.setdefault(t, []).append(pos)
        postings = bytearray()
        tags: dict[str, str] = {}  # "offset length digest": a string each, cheap to decode
        for t, positions in positions_of.items():
            data = orjson.dumps(positions)
            tags[t] = f"{len(postings)} {len(data)} {_digest(data)}"
            postings.extend(data)
        tags_map = orjson.dumps(tags)
        keys = orjson.dumps({row[_KEY]: pos for pos, (_, _, row) in enumerate(ordered)})
        bounds = [len(tags_map)]
        for page in pages:
            bounds.append(bounds[-1] + len(page))
        body = b"".join([tags_map, *pages, postings, keys])
        header = {
            "v": _VERSION,
            "dir": name,
            "stamp": list(stamp) if stamp is not None else None,
            "n": len(ordered),
            "scopes": sorted({row[_SCOPE] for _, _, row in ordered}),
            "expiring": any(row[_EXPIRES] is not None for _, _, row in ordered),
            "tags": [0, len(tags_map), _digest(tags_map)],
            "postings": bounds[-1],
            "pages": bounds,
            "page_digests": "".join(_digest(page) for page in pages),
            "keys": [bounds[-1] + len(postings), len(keys), _digest(keys)],
            "size": len(body),
        }
        hb = orjson.dumps(header)
        lead = _MAGIC + len(hb).to_bytes(4, "big")
        tag = hashlib.blake2b(lead, key=key, digest_size=_TAG_BYTES)
        tag.update(hb)
        self._write_atomically(path, lead + tag.digest() + hb + body)

    def read(
        self,
        directory: Path,
        st: os.stat_result,
        names: Sequence[str],
        read: Callable[[Path], tuple[Recalled | None, os.stat_result | None]],
        *,
        rewrite: bool = False,
    ) -> tuple[Recalled, ...]:
        """Every entry of ``names`` in ``directory`` (whose ``stat``, taken before ``names`` was
        listed, is ``st``): from the index where a file's stat key is unchanged, else through
        ``read``, which answers a file's entry and the ``fstat`` of what it read (its errors
        propagate: a damaged file fails the read; an entry of None, a file gone since the listing,
        is left out).

        Rewrites the index when it disagreed with the files, its stamp is not the folder's, or
        ``rewrite`` says a read found it stale (a section unlike its digest or of the wrong shape,
        which this read does not look at), unless that cannot be done. The stamp is written only
        when the folder and every file were settled and indexed, so the index then lists exactly
        the folder's learned files.
        """
        scanned_ns = time.time_ns()
        index = self._open(directory)
        old: dict[str, tuple[StatKey, list[Any]]] = {}
        if index is not None:
            try:
                old = {f"{row[4 + _KEY]}.json": (tuple(row[:4]), row[4:]) for row in index.rows()}
            except (StaleIndex, IndexError, TypeError):
                index = None
        settled_ns = scanned_ns - _RACY_NS
        entries: list[Recalled] = []
        rows: list[tuple[str, StatKey, list[Any]]] = []
        stale = rewrite or index is None or len(old) != len(names)
        complete = True
        prefix = os.path.join(directory, "")
        for fname in names:
            hit = old.get(fname)
            # a file the index has a row for is looked at first (``lstat``): read only if changed
            fst = _lstat(prefix + fname) if hit is not None else None
            entry = _served(hit, fst, fname)
            served = entry is not None
            if entry is None:
                stale = True
                # every check of a read, and its errors; keyed by the ``fstat`` of the very file
                # read, so a file replaced since the listing is keyed as what was read
                entry, fst = read(directory / fname)
                if entry is None:
                    complete = False
                    continue
            entries.append(entry)
            if fst is not None and fst.st_mtime_ns < settled_ns and fst.st_ctime_ns < settled_ns:
                row = hit[1] if served else _entry_row(entry)  # type: ignore[index]
                rows.append((fname, _stat_key(fst), row))
            else:
                stale = complete = False  # a racy file: not indexed, read again next time
        settled = max(st.st_mtime_ns, st.st_ctime_ns) < settled_ns
        stamp = stamp_of(st) if complete and settled else None
        had = index.header.get("stamp") if index is not None else None
        changed = stale or (list(stamp) if stamp is not None else None) != had
        if changed and (rows or stamp is not None or index is not None):
            self._save(directory, rows, stamp)
        return tuple(entries)


class IndexedListing:
    """A scope folder's learned files as its index lists them, newest first, decoded lazily.

    Built only while the folder's stamp is the one the index was written under (``FileCache.listing``),
    so the index's rows are the folder's files. An entry is decoded from its page when a read
    reaches it; before a read returns entries, ``check`` ``lstat``s their files: a file gone, or
    whose stat key is not the one indexed, raises ``StaleIndex`` (the read starts again from every
    file, where a damaged file fails it). An entry checked once is trusted for the life of the
    listing, as a listing read in full is (the folder's stamp is checked on each read).
    """

    def __init__(self, index: _Index, mtime_ns: int, ino: int, n: int, expiring: bool) -> None:
        self.mtime_ns = mtime_ns
        self.ino = ino
        self.expiring = expiring
        self._index = index
        self._n = n
        self._prefix = os.path.join(index.directory, "")
        self._pages: dict[int, list[bytes]] = {}
        self._entries: dict[int, Recalled] = {}  # by position, each entry decoded so far
        self._stat_keys: dict[str, StatKey] = {}  # by finding key, of each entry decoded
        self._checked: set[str] = set()
        self._tags: dict[str, Any] | None = None
        self._postings: dict[str, list[int]] = {}
        self._keys: dict[str, int] | None = None
        self._mutex = threading.Lock()

    def _stale(self) -> StaleIndex:
        return StaleIndex(self._index.directory)

    def _entry(self, pos: int) -> Recalled:
        found = self._entries.get(pos)
        if found is not None:
            return found
        if type(pos) is not int or not 0 <= pos < self._n:
            raise self._stale()
        with self._mutex:
            number = pos // _PAGE
            page = self._pages.get(number)
            if page is None:
                page = self._pages[number] = self._index.page(number)
            try:
                size, mtime, ctime, ino, *row = orjson.loads(page[pos % _PAGE])
                entry = _row_entry(row)
            except (IndexError, TypeError, ValueError):
                raise self._stale() from None
            self._stat_keys[entry.key] = (size, mtime, ctime, ino)
            self._entries[pos] = entry
            return entry

    def check(self, entries: Iterable[Recalled]) -> None:
        """Check the file of each of ``entries`` that came from this listing, before a read returns
        it: ``StaleIndex`` when one is gone or its stat key is not the one indexed."""
        for e in entries:
            indexed = self._stat_keys.get(e.key)
            if indexed is None or e.key in self._checked:
                continue
            st = _lstat(f"{self._prefix}{e.key}.json")
            if st is None or not stat.S_ISREG(st.st_mode) or _stat_key(st) != indexed:
                raise self._stale()  # gone (a sync or a forget) or changed: look at every file
            with self._mutex:
                self._checked.add(e.key)

    @property
    def entries(self) -> Iterator[Recalled]:
        """Every entry, newest first (unchecked: see ``check``)."""
        return map(self._entry, range(self._n))

    def with_tag(self, tag: str) -> Iterator[Recalled]:
        """The entries carrying ``tag``, newest first (unchecked: see ``check``)."""
        positions = self._postings.get(tag)
        if positions is None:
            with self._mutex:
                if self._tags is None:
                    self._tags = self._index.section(self._index.header["tags"])
                where = self._tags.get(tag) if isinstance(self._tags, dict) else None
                base = self._index.header.get("postings")
            if type(base) is not int:
                raise self._stale()
            if where is None:
                positions = []
            else:
                try:
                    offset, length, digest = where.split(" ")
                    found = (int(offset), int(length), digest)
                except (AttributeError, ValueError):
                    raise self._stale() from None
                positions = self._index.section(found, base)
            try:  # positions of entries: ints within the index (a wrong type fails the comparison)
                if not isinstance(positions, list) or (
                    positions and not (min(positions) >= 0 and max(positions) < self._n)
                ):
                    raise self._stale()
            except TypeError:
                raise self._stale() from None
            self._postings[tag] = positions
        return map(self._entry, positions)

    def by_key(self, key: str) -> Recalled | None:
        """The entry of the finding ``key``, or None (unchecked: see ``check``)."""
        with self._mutex:
            if self._keys is None:
                keys = self._index.section(self._index.header["keys"])
                if not isinstance(keys, dict):
                    raise self._stale()
                self._keys = keys
            pos = self._keys.get(key)
        if pos is None:
            return None
        if type(pos) is not int or not 0 <= pos < self._n:
            raise self._stale()
        entry = self._entry(pos)
        if entry.key != key:
            raise self._stale()
        return entry

    def scopes(self) -> set[str]:
        """The scopes of the entries."""
        scopes = self._index.header.get("scopes")
        if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
            raise self._stale()
        return set(scopes)


def _served(hit: tuple[StatKey, list[Any]] | None, st: os.stat_result | None, fname: str) -> Recalled | None:
    """The index's entry for a file, when its stat key still matches a regular file of that name."""
    if hit is None or st is None or not stat.S_ISREG(st.st_mode) or hit[0] != _stat_key(st):
        return None
    try:
        entry = _row_entry(hit[1])
    except (ValueError, TypeError):
        return None
    return entry if f"{entry.key}.json" == fname else None
