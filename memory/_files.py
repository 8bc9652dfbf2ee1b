"""Reading unsynced learned files, with an index that a directory change invalidates."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import orjson

from journal import Record
from memory._errors import FindingInvalid, Unreachable
from memory._filecache import FileCache, IndexedListing, LeftMeanwhile
from memory._finding import (
    RETIRE_STREAM,
    STREAM,
    Finding,
    check_expires,
    check_metadata,
    check_revision,
    finding_id,
    is_key,
    render,
    scope_hash,
)
from memory._paths import RETIRED_LEAF
from memory._results import Citation, Recalled, frozen_metadata
from memory._safe import Folder, describe, is_damage, named, read_file
from memory._stem import terms

_KEYS = {"id", "scope", "flow", "text", "source", "tags", "learnedMs", "journal"}
_OPTIONAL = {"metadata", "expiresMs", "revision", "memory"}
RACY_S = 0.05  # directory mtimes are coarse: trust a cached listing only when the dir is older
_MEMO_BYTES = 16 * 1024 * 1024  # the bytes of files a ``ParseMemo`` keeps beside what they parsed to

P = TypeVar("P")
StatKey = tuple[int, int, int, int]  # a file's size, mtime_ns, ctime_ns and inode


def disk_id(key: str) -> int:
    """The negative id of an entry read from disk: stable, derived from the finding's id."""
    return -(int.from_bytes(hashlib.blake2b(key.encode(), digest_size=7).digest(), "big") or 1)


def _damaged(path: Path, what: str, kind: str = "learned") -> Unreachable:
    """A ``kind`` file (learned, or retired) that cannot be read as one: republished by a repair."""
    return Unreachable(
        f"{kind} file {path} is damaged ({what}); run `flows check --repair` to republish it from "
        "the journal, or move it aside",
        path=path,
    )


def parse_learned(path: Path, data: bytes) -> Recalled:
    """Return the finding a learned file holds, checking its shape and that it matches its name.

    Raises:
        Unreachable: the bytes are not JSON, the shape is wrong, or the id does not hash the scope
            and finding, or the file is not named after its id or not in its scope's directory.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise _damaged(path, "not JSON") from None
    if not isinstance(obj, dict) or not obj.keys() >= _KEYS or not obj.keys() - _KEYS <= _OPTIONAL:
        raise _damaged(path, "not a learned finding's shape")
    j = obj["journal"]
    ok = (
        isinstance(obj["text"], str)
        and obj["text"]
        and isinstance(obj["source"], str)
        and isinstance(obj["scope"], str)
        and isinstance(obj["flow"], str)
        and isinstance(obj["id"], str)
        and isinstance(obj["tags"], list)
        and all(isinstance(t, str) for t in obj["tags"])
        and isinstance(obj["learnedMs"], int)
        and isinstance(j, dict)
        and set(j) == {"runId", "stream", "id"}
        and all(isinstance(v, str) for v in j.values())
        and j["stream"] == STREAM
    )
    if not ok:
        raise _damaged(path, "a field has the wrong type")
    metadata = expires = memory = None
    revision = 0
    if len(obj) != len(_KEYS):
        memory = obj.get("memory")
        if memory is not None and (not isinstance(memory, str) or not is_key(memory) or memory == obj["id"]):
            raise _damaged(path, "its memory id is malformed")
        try:
            metadata = check_metadata(obj["metadata"]) if "metadata" in obj else None
            expires = check_expires(obj["expiresMs"]) if "expiresMs" in obj else None
        except FindingInvalid as exc:
            raise _damaged(path, f"its {exc.field} is malformed") from None
        try:
            revision = check_revision(obj["revision"]) if "revision" in obj else 0
        except ValueError:
            raise _damaged(path, "its revision is malformed") from None
    finding = Finding(
        text=obj["text"], source=obj["source"], tags=tuple(obj["tags"]), metadata=metadata, expires_ms=expires
    )
    if (
        finding_id(obj["scope"], finding, revision) != obj["id"]
        or path.name != f"{obj['id']}.json"
        or path.parent.parent.parent.name != scope_hash(obj["scope"])
    ):
        raise _damaged(path, "its citation does not match its name")
    return Recalled(
        id=disk_id(obj["id"]),
        key=obj["id"],
        text=finding.text,
        source=finding.source,
        tags=finding.tags,
        scope=obj["scope"],
        flow=obj["flow"],
        learned_ms=obj["learnedMs"],
        citation=Citation(run_id=j["runId"], stream=j["stream"], id=j["id"]),
        metadata=frozen_metadata(metadata),
        expires_ms=expires,
        revision=revision,
        memory=memory,
    )


def own_entry(record: Record, path: str | None = None) -> tuple[bytes, Recalled]:
    """The bytes of the learned file of ``record``, a commit this process made (``render``), and
    what ``parse_learned`` reads from them, built from the record's fields without parsing any
    bytes: a file found to hold exactly those bytes is read as this entry. ``path``: where this
    process published that file (``published_own``): the bytes it noted there for ``record`` are
    taken, not rendered again."""
    data = None if path is None else _OWN_FILES.rendering(path, record)
    return render(record) if data is None else data, _entry_of(record)


def _entry_of(record: Record) -> Recalled:
    """What ``parse_learned`` reads from the rendering of ``record`` (``own_entry``)."""
    p, f = record.payload, record.payload["finding"]
    metadata = f.get("metadata")
    return Recalled(
        id=disk_id(p["id"]),
        key=p["id"],
        text=f["text"],
        source=f["source"],
        tags=tuple(f["tags"]),
        scope=p["scope"],
        flow=p["flow"],
        learned_ms=p["learnedMs"],
        citation=Citation(run_id=record.run_id, stream=record.stream, id=record.id),
        # a copy, as a parse makes: the entry shares nothing with the record
        metadata=frozen_metadata(orjson.loads(orjson.dumps(metadata)) if metadata else None),
        expires_ms=f.get("expiresMs"),
        revision=p.get("revision", 0),
        memory=p.get("memory"),
    )


def unreadable(path: Path | str, exc: OSError, what: str = "learned file") -> Unreachable:
    """The ``Unreachable`` for a learned file (``what``), or a folder of them, that could not be
    opened or read: a link, a FIFO, a folder where a file belongs (damage, named with what repair
    does), or a storage failure."""
    if is_damage(exc):
        return Unreachable(
            f"{what} {path} cannot be read: {describe(exc)}; `flows check --repair` moves it to "
            "flows-quarantine/ beside the store (and republishes the finding if the journal records it)",
            path=path,
            errno=exc.errno,
        )
    return Unreachable(f"cannot read {path}: {describe(exc)}", path=path, errno=exc.errno)


def read_learned(path: Path) -> Recalled:
    """Read and parse one learned file, never through a link and never blocking.

    Raises:
        Unreachable: the file is missing, is not a regular file, cannot be read, or does not parse.
    """
    try:
        data = read_file(path)
    except OSError as exc:
        raise unreadable(path, exc) from exc
    if data is None:
        raise Unreachable(f"cannot read learned file {path}: it does not exist", path=path)
    return parse_learned(path, data)


def is_learned_name(name: str) -> bool:
    """Whether ``name`` is a learned file's name (never a stage or another hidden name)."""
    return name.endswith(".json") and not name.startswith(".")


_RETIRED_KEYS = {"id", "scope", "flow", "reason", "by", "forgottenMs", "journal"}
_HEX32 = re.compile(r"[0-9a-f]{32}")


@dataclass(frozen=True)
class Retired:
    """A retired file: the finding ``key`` (of ``scope``) was forgotten (``reason``) or superseded
    (``by`` the new key) by flow ``flow`` at ``forgotten_ms``, as the record ``citation`` says."""

    key: str
    scope: str
    flow: str
    reason: str | None
    by: str | None
    forgotten_ms: int
    citation: Citation


def parse_retired(path: Path, data: bytes) -> Retired:
    """Return what a retired file says, checking its shape and that it matches its name and folder.

    Raises:
        Unreachable: the bytes are not JSON, the shape or a type is wrong, or the file is not named
            after its key or not in its scope's retired folder.
    """
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise _damaged(path, "not JSON", "retired") from None
    if not isinstance(obj, dict) or obj.keys() != _RETIRED_KEYS:
        raise _damaged(path, "not a retired finding's shape", "retired")
    j = obj["journal"]
    reason, by = obj["reason"], obj["by"]
    ok = (
        isinstance(obj["id"], str)
        and _HEX32.fullmatch(obj["id"]) is not None
        and isinstance(obj["scope"], str)
        and isinstance(obj["flow"], str)
        and isinstance(obj["forgottenMs"], int)
        and ((isinstance(reason, str) and by is None) or (isinstance(by, str) and reason is None))
        and (by is None or _HEX32.fullmatch(by) is not None)
        and isinstance(j, dict)
        and set(j) == {"runId", "stream", "id"}
        and all(isinstance(v, str) for v in j.values())
        and (j["stream"] == RETIRE_STREAM or (j["stream"] == STREAM and by is not None))
    )
    if not ok:
        raise _damaged(path, "a field has the wrong type", "retired")
    if (
        path.name != f"{obj['id']}.json"
        or path.parent.name != "retired"
        or path.parent.parent.parent.name != scope_hash(obj["scope"])
    ):
        raise _damaged(path, "its key or scope does not match its name and folder", "retired")
    return Retired(
        key=obj["id"],
        scope=obj["scope"],
        flow=obj["flow"],
        reason=reason,
        by=by,
        forgotten_ms=obj["forgottenMs"],
        citation=Citation(run_id=j["runId"], stream=j["stream"], id=j["id"]),
    )


def read_retired(path: Path) -> Retired:
    """Read and parse one retired file, never through a link and never blocking.

    Raises:
        Unreachable: the file is missing, is not a regular file, cannot be read, or does not parse.
    """
    try:
        data = read_file(path)
    except OSError as exc:
        raise unreadable(path, exc, "retired file") from exc
    if data is None:
        raise Unreachable(f"cannot read retired file {path}: it does not exist", path=path)
    return parse_retired(path, data)


def learned_names(directory: Path) -> list[str]:
    """The learned files' names in ``directory`` (never stages); empty when it does not exist."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise Unreachable(f"cannot list {directory}: {exc.strerror or exc}", path=directory) from exc
    return [n for n in names if is_learned_name(n)]


FileRead = tuple[Path, bytes, Recalled]
"""A learned file as read: its path, its bytes, and the entry they parse to."""


def read_folder(
    base: Path, directory: Path, *, reading: bool = False
) -> tuple[os.stat_result | None, list[FileRead]]:
    """Every learned file of ``directory`` (a folder below ``base``, opened without following a link):
    the folder's own ``stat`` (None when it does not exist) and each file's path, bytes and entry.

    A file listed but gone when it is opened was removed meanwhile (``sync`` drops a file only once
    the history DB holds it) and is left out; for a read (``reading``), unless an update or a forget
    retired it meanwhile (``left_meanwhile``).

    Raises:
        Unreachable: a folder on the way or a learned file is a link or not what it should be, a
            file does not parse (each named), or the folder cannot be listed.
    """
    try:
        folder = Folder.open(base, directory)
    except OSError as exc:
        raise unreadable(exc.filename or directory, exc) from exc
    if folder is None:
        return None, []
    with folder:
        try:
            st = folder.stat()
            names = [n for n in folder.names() if is_learned_name(n)]
        except OSError as exc:
            raise unreadable(directory, exc) from exc
        out = []
        for name in names:
            path = directory / name
            try:
                data = folder.read(name, str(path))
            except OSError as exc:
                raise unreadable(path, exc) from exc
            if data is not None:
                out.append((path, data, _PARSED_LEARNED(path, data)))
            elif reading:
                left_meanwhile(directory, name)
    return st, out


def left_meanwhile(directory: Path, name: str) -> None:
    """For a read that listed the learned file ``name`` of ``directory`` and found it gone when it
    opened it: when the finding's retired file is there now, an update or a forget retired it since
    the listing (an update retires the old version, then renames the new one in: a listing taken
    before that rename lacks the new version), and the read must start again (``LeftMeanwhile``).
    Without one, a sync moved the file into the history DB, which the read looks at after its
    files (one ``lstat``, only for a file gone under a read)."""
    if named(directory.parent / RETIRED_LEAF / name):
        raise LeftMeanwhile(directory)


_WORD = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class Terms:
    """The lower-cased words of a finding's text, of its tags, and of its source (what ``why`` matches)."""

    text: frozenset[str]
    tags: frozenset[str]
    source: frozenset[str]

    @property
    def every(self) -> frozenset[str]:
        """Every word of the finding."""
        return self.text | self.tags | self.source


def words(text: str) -> list[str]:
    """The lower-cased words of ``text``."""
    return [w.lower() for w in _WORD.findall(text)]


def index_terms(text: str) -> list[str]:
    """The index terms of ``text``: the terms (``_stem.terms``) of each of its words, in order."""
    return [t for w in words(text) for t in terms(w)]


def terms_of(entry: Recalled) -> Terms:
    """The terms ``why`` matches in ``entry``: the stems of its words, and the second term of a
    comparative or superlative (see ``memory._stem``)."""
    return Terms(
        text=frozenset(index_terms(entry.text)),
        tags=frozenset(t for tag in entry.tags for t in index_terms(tag)),
        source=frozenset(index_terms(entry.source)),
    )


def newest_first(entry: Recalled) -> tuple[int, str]:
    """The sort key of unsynced entries, newest first when reversed."""
    return (entry.learned_ms, entry.key)


class Listing:
    """One directory's parsed entries, newest first, with a tag index and a word index.

    The indexes are built on first use and live as long as the listing, so a warm ``recall(tag=)``
    reads only the entries with that tag, and ``why`` scores only the entries sharing a word.
    """

    def __init__(self, mtime_ns: int, ino: int, entries: tuple[Recalled, ...]) -> None:
        self.mtime_ns = mtime_ns
        self.ino = ino
        self.entries = tuple(sorted(entries, key=newest_first, reverse=True))
        self.expiring = any(e.expires_ms is not None for e in self.entries)
        self._by_tag: dict[str, tuple[Recalled, ...]] | None = None
        self._by_key: dict[str, Recalled] | None = None
        self._postings: dict[str, list[int]] | None = None
        self._terms: list[Terms] = []
        self._mutex = threading.Lock()

    def with_tag(self, tag: str) -> tuple[Recalled, ...]:
        """The entries carrying ``tag``, newest first."""
        with self._mutex:
            if self._by_tag is None:
                by_tag: dict[str, list[Recalled]] = {}
                for e in self.entries:
                    for t in dict.fromkeys(e.tags):
                        by_tag.setdefault(t, []).append(e)
                self._by_tag = {t: tuple(v) for t, v in by_tag.items()}
            return self._by_tag.get(tag, ())

    def scopes(self) -> set[str]:
        """The scopes of the entries."""
        return {e.scope for e in self.entries}

    def check(self, entries: Iterable[Recalled]) -> None:
        """Nothing to check: every entry of a listing read in full was read (see ``IndexedListing``)."""

    def by_key(self, key: str) -> Recalled | None:
        """The entry of the finding ``key``, or None."""
        with self._mutex:
            if self._by_key is None:
                self._by_key = {e.key: e for e in self.entries}
            return self._by_key.get(key)

    def sharing(
        self,
        wanted: Mapping[str, Collection[str]],
        best: int | None = None,
        keep: Callable[[Recalled], bool] | None = None,
    ) -> list[tuple[Recalled, Terms]]:
        """The entries that share a term with one of the words of ``wanted`` (each word mapped to its
        terms), and that ``keep`` keeps, with their terms, newest first.

        With ``best``, only the ``best`` entries that match the most words (newest first among
        equals), plus every entry tied with the last of them: what ``why`` can rank in its top.
        """
        with self._mutex:  # built once; ``keep`` is asked outside it (it may read this listing)
            if self._postings is None:
                postings: dict[str, list[int]] = {}
                every = [terms_of(e) for e in self.entries]
                for i, found in enumerate(every):
                    for w in found.every:
                        postings.setdefault(w, []).append(i)
                self._terms, self._postings = every, postings
            built, terms = self._postings, self._terms
        counts: dict[int, int] = {}
        for word_terms in wanted.values():
            hit: set[int] = set()
            for term in word_terms:
                hit.update(built.get(term, ()))
            for i in hit:
                counts[i] = counts.get(i, 0) + 1
        hits = sorted(counts)  # entries are newest first, so index order is
        if best is not None and len(hits) > best:
            # Best first (stable: newest first among equals); ``keep`` is asked only of the
            # entries that can still make the cut, not of every entry sharing a word.
            kept: list[int] = []
            floor = 0
            for i in sorted(hits, key=lambda i: -counts[i]):
                if counts[i] < floor:
                    break
                if keep is None or keep(self.entries[i]):
                    kept.append(i)
                    if len(kept) == best:
                        floor = counts[i]
            hits = sorted(kept)
        elif keep is not None:
            hits = [i for i in hits if keep(self.entries[i])]
        return [(self.entries[i], terms[i]) for i in hits]


def read_retired_folder(base: Path, directory: Path) -> tuple[os.stat_result | None, dict[str, Retired]]:
    """Every retired file of ``directory`` (a folder below ``base``, opened without following a
    link), by key, with the folder's own ``stat`` (None when it does not exist). The folder is
    listed each time; of its files, only those added or changed since this process last read it
    are read (``_RetiredReads``).

    Raises:
        Unreachable: a folder on the way or a retired file is a link or not what it should be, a
            file does not parse (each named), or the folder cannot be listed.
    """
    try:
        folder = Folder.open(base, directory)
    except OSError as exc:
        raise unreadable(exc.filename or directory, exc, "retired folder") from exc
    if folder is None:
        return None, {}
    with folder:
        try:
            st = folder.stat()
            names = [n for n in folder.names() if is_learned_name(n)]
        except OSError as exc:
            raise unreadable(directory, exc, "retired folder") from exc
        files = _RETIRED_READS.read(folder, directory, names)
    return st, {r.key: r for _, r in files.values()}


def read_new_retired(base: Path, directory: Path, known: AbstractSet[str]) -> list[Retired]:
    """The retired files of ``directory`` (a folder below ``base``, opened without following a link)
    whose key is not in ``known``: the folder is listed, and only those files are looked at (a
    stat each, and a read of each one added or changed since this process last read it, as
    ``read_retired_folder`` does). A file is named after its key (``parse_retired`` checks that),
    so the others are known by their names alone.

    Raises:
        Unreachable: as ``read_retired_folder``, for the files it looks at.
    """
    try:
        folder = Folder.open(base, directory)
    except OSError as exc:
        raise unreadable(exc.filename or directory, exc, "retired folder") from exc
    if folder is None:
        return []
    with folder:
        try:
            names = [n for n in folder.names() if n[:-5] not in known and is_learned_name(n)]
        except OSError as exc:
            raise unreadable(directory, exc, "retired folder") from exc
        if not names:
            return []
        files = _RETIRED_READS.read(folder, directory, names, merge=True)
    return [r for _, r in files.values()]


class ParseMemo(Generic[P]):
    """``parse(path, data)`` for files read again and again, parsing only bytes not seen before at
    that path: parsing is a pure function of the path and the bytes, so the file is still read
    each time (what it holds now is what is judged) and bytes equal to the last read's give the
    same result. Keeps at most ``_MEMO_BYTES`` of file bytes, then starts again."""

    def __init__(self, parse: Callable[[Path, bytes], P]) -> None:
        self._parse = parse
        self._seen: dict[str, tuple[bytes, P]] = {}
        self._bytes = 0
        self._mutex = threading.Lock()

    def __call__(self, path: Path, data: bytes) -> P:
        key = str(path)
        hit = self._seen.get(key)
        if hit is not None and hit[0] == data:
            return hit[1]
        parsed = self._parse(path, data)  # raises on damage, and nothing is remembered
        with self._mutex:
            if self._bytes + len(data) > _MEMO_BYTES:
                self._seen.clear()
                self._bytes = 0
            old = self._seen.get(key)
            self._bytes += len(data) - (len(old[0]) if old is not None else 0)
            self._seen[key] = (data, parsed)
        return parsed


class _OwnFiles:
    """The learned files this process published from commits it made, by path: the bytes rendered
    from each commit, and the commit (``published_own``). Keeps at most ``_MEMO_BYTES`` of file
    bytes, then starts again."""

    def __init__(self) -> None:
        self._files: dict[str, tuple[bytes, Record]] = {}
        self._bytes = 0
        self._mutex = threading.Lock()

    def note(self, path: Path, data: bytes, record: Record) -> None:
        key = str(path)
        with self._mutex:
            if self._bytes + len(data) > _MEMO_BYTES:
                self._files.clear()
                self._bytes = 0
            old = self._files.get(key)
            self._bytes += len(data) - (len(old[0]) if old is not None else 0)
            self._files[key] = (data, record)

    def commit(self, path: Path, data: bytes) -> Record | None:
        hit = self._files.get(str(path))
        return hit[1] if hit is not None and hit[0] == data else None

    def rendering(self, path: str, record: Record) -> bytes | None:
        """The bytes noted at ``path`` as the rendering of ``record`` itself (that very object)."""
        hit = self._files.get(path)
        return hit[0] if hit is not None and hit[1] is record else None


_OWN_FILES = _OwnFiles()


def published_own(path: Path, data: bytes, record: Record) -> None:
    """Note that this process published ``data``, the rendering of ``record`` (a commit it made
    from a finding it validated), as the learned file ``path``: a read of exactly those bytes
    there takes them as that commit's entry without parsing them (``_entry_of``: what the parse
    gives), and ``own_commit`` answers with ``record``."""
    _OWN_FILES.note(path, data, record)


def own_commit(path: Path, data: bytes) -> Record | None:
    """The commit whose rendering this process published as ``path`` (``published_own``), when
    ``data`` is exactly that rendering; else None."""
    return _OWN_FILES.commit(path, data)


def _parse_learned_or_own(path: Path, data: bytes) -> Recalled:
    """``parse_learned``, for bytes this process rendered from its own commit without parsing them."""
    record = _OWN_FILES.commit(path, data)
    return _entry_of(record) if record is not None else parse_learned(path, data)


_PARSED_LEARNED = ParseMemo(_parse_learned_or_own)
"""``parse_learned`` as every reader of this process calls it (a path names one file of one store)."""
_PARSED_RETIRED = ParseMemo(parse_retired)
"""``parse_retired`` likewise."""


RetiredFile = tuple[StatKey | None, Retired]
"""A retired file as last read: its stat key when it was settled then (else None), and what it says."""


def _reread_retired(
    folder: Folder,
    directory: Path,
    names: Iterable[str],
    known: Mapping[str, RetiredFile],
    parse: Callable[[Path, bytes], Retired],
) -> dict[str, RetiredFile]:
    """The retired files ``names`` of the open ``folder`` (at ``directory``), by name: a file whose
    stat key is the settled one it had when last read (``known``) is not read again; every other
    file is read (a damaged one raises ``Unreachable``, as a full read would)."""
    settled_ns = time.time_ns() - int(RACY_S * 1e9)
    out: dict[str, RetiredFile] = {}
    for name in names:
        try:
            st = os.stat(name, dir_fd=folder.fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # gone since the listing
        except OSError as exc:
            raise unreadable(directory / name, exc, "retired file") from exc
        key = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        hit = known.get(name)
        if hit is not None and hit[0] == key:
            out[name] = hit
            continue
        path = directory / name
        try:
            data = folder.read(name, str(path))
        except OSError as exc:
            raise unreadable(path, exc, "retired file") from exc
        if data is None:
            continue
        settled = st.st_mtime_ns < settled_ns and st.st_ctime_ns < settled_ns
        # a file replaced between the stat and the read is keyed by the stat: read again next time
        out[name] = (key if settled else None, parse(path, data))
    return out


class _RetiredReads:
    """What each retired folder of this process's stores held when last read, by folder: its files'
    settled stat keys and what they say, so a folder read again costs a stat per file and a read
    of each file added or changed since (it grows by one file per retirement, for good). A change
    in place changes a file's ctime, which nothing can set back; a file too fresh for its times to
    tell a later change apart (``RACY_S``) is read again each time."""

    _MAX_FOLDERS = 4096

    def __init__(self) -> None:
        self._known: dict[Path, dict[str, RetiredFile]] = {}
        self._mutex = threading.Lock()

    def read(
        self, folder: Folder, directory: Path, names: Iterable[str], *, merge: bool = False
    ) -> dict[str, RetiredFile]:
        """The retired files ``names`` of the open ``folder`` at ``directory``, by name (raising
        ``Unreachable`` on a damaged one, as a full read does). ``merge``: ``names`` are some of
        the folder's files, and what is kept of the others stays."""
        with self._mutex:
            known = self._known.get(directory, {})
        files = _reread_retired(folder, directory, names, known, _PARSED_RETIRED)
        with self._mutex:
            if len(self._known) >= self._MAX_FOLDERS and directory not in self._known:
                self._known.clear()
            kept = self._known.get(directory) if merge else None
            if kept is None:
                self._known[directory] = files
            else:
                kept.update(files)
        return files


_RETIRED_READS = _RetiredReads()


class RetiredListing:
    """One retired folder's parsed files, by key."""

    def __init__(self, mtime_ns: int, ino: int, by_key: dict[str, Retired]) -> None:
        self.mtime_ns = mtime_ns
        self.ino = ino
        self.by_key = by_key


_NO_RETIRED = RetiredListing(0, 0, {})


class DiskIndex:
    """Parsed unsynced entries per scope directory, reused until the directory changes.

    Every write of the engine reaches a learned file by rename, which changes the directory's
    mtime, so a new, replaced or removed file invalidates the cached listing. A listing made within
    ``RACY_S`` of the directory's mtime is not trusted (mtimes are coarse). A fresh process starts
    from the files' index (``memory._filecache``): while the folder's stamp is the one the index was
    written under, the index lists the folder's files and each read checks only the files it
    returns (an ``IndexedListing``); otherwise it stats every file and reads the changed ones, so
    a damaged file fails every read that would return it. A file rewritten in place (not by the
    engine, which never does that) is seen by the next read that would return it, or after the
    next change to its directory. Folders are opened without following links (``read_folder``); the
    cheap check of a cached listing is an ``lstat``, so a link put in the folder's place is never
    mistaken for it. A retired folder that changed is listed again, but only its files added or
    changed since are read (``read_retired_folder``). A file's bytes equal to the ones it held when
    last parsed are not parsed again (``ParseMemo``).
    """

    def __init__(self, base: Path, files: FileCache | None = None) -> None:
        self._base = base
        self._cache: dict[Path, Listing | IndexedListing] = {}
        self._retired: dict[Path, RetiredListing] = {}
        self._distrusted: set[Path] = set()
        self._mutex = threading.Lock()
        self._files = files  # the index a fresh process starts from (None: read every file)

    def distrust(self, directory: Path) -> None:
        """Read ``directory`` from every file from now on (its index listed a file that changed)."""
        with self._mutex:
            self._distrusted.add(directory)
            hit = self._cache.get(directory)
            if isinstance(hit, IndexedListing):
                del self._cache[directory]

    def retired(self, directory: Path) -> RetiredListing:
        """The retired files of ``directory``, by key, cached like a listing (raising
        ``Unreachable`` on a damaged one: a damaged marker could let a forgotten finding through)."""
        # The common case (nothing retired) without an exception. A folder above it that cannot be
        # searched makes the scope's learned files unreadable too, and that read fails closed.
        if not os.access(directory, os.F_OK, follow_symlinks=False):
            return _NO_RETIRED
        try:
            st = os.stat(directory, follow_symlinks=False)
        except FileNotFoundError:
            return _NO_RETIRED
        except OSError as exc:
            raise unreadable(directory, exc, "retired folder") from exc
        with self._mutex:
            hit = self._retired.get(directory)
        if hit is not None and hit.mtime_ns == st.st_mtime_ns and hit.ino == st.st_ino:
            return hit
        scanned_at = time.time_ns()
        seen, found = read_retired_folder(self._base, directory)  # the files changed since, only
        if seen is None:
            return _NO_RETIRED
        st = seen
        listing = RetiredListing(st.st_mtime_ns, st.st_ino, found)
        if scanned_at - st.st_mtime_ns > RACY_S * 1e9:
            with self._mutex:
                self._retired[directory] = listing
        return listing

    def listing(
        self, directory: Path, *, whole: bool = False, scanned: os.stat_result | None = None
    ) -> Listing | IndexedListing:
        """Return the listing of ``directory`` (raising ``Unreachable`` on a damaged file): read from
        the files' index while it lists the folder as it is, unless ``whole`` asks for every entry
        parsed (``why``'s word index).

        ``scanned`` is the folder's ``lstat`` from a scan that has just found it, and every folder
        on its way, a real folder and no link (``scope_tree``): it stands for the folder's own
        ``stat`` (no other is taken), and the index is matched against it without opening the
        folder again one component at a time. The index's stamp names the folder's device and
        inode, so it matches only the very folder it was written for, unchanged."""
        if scanned is not None:
            st = scanned
        else:
            try:
                st = os.stat(directory, follow_symlinks=False)
            except FileNotFoundError:
                return Listing(0, 0, ())
            except OSError as exc:
                raise unreadable(directory, exc) from exc
        with self._mutex:
            hit = self._cache.get(directory)
            trusted = directory not in self._distrusted
        if (
            hit is not None
            and hit.mtime_ns == st.st_mtime_ns
            and hit.ino == st.st_ino
            and not (whole and isinstance(hit, IndexedListing))
        ):
            return hit
        scanned_at = time.time_ns()
        if self._files is not None and trusted and not whole and self._files.may_list(st, scanned_at):
            indexed = self._indexed(directory) if scanned is None else self._files.listing(directory, st)
            if indexed is not None:
                if scanned_at - indexed.mtime_ns > RACY_S * 1e9:
                    with self._mutex:
                        self._cache[directory] = indexed
                return indexed
        seen, entries = self._read(directory)
        if seen is None:
            return Listing(0, 0, ())
        listing = Listing(seen.st_mtime_ns, seen.st_ino, entries)
        if scanned_at - seen.st_mtime_ns > RACY_S * 1e9:
            with self._mutex:
                self._cache[directory] = listing
        return listing

    def _indexed(self, directory: Path) -> IndexedListing | None:
        """The folder's index as a listing, when it was written under the folder's present stamp
        (the folder opened without following a link, as a full read opens it)."""
        assert self._files is not None
        try:
            folder = Folder.open(self._base, directory)
        except OSError as exc:
            raise unreadable(exc.filename or directory, exc) from exc
        if folder is None:
            return None
        with folder:
            try:
                st = folder.stat()
            except OSError as exc:
                raise unreadable(directory, exc) from exc
        return self._files.listing(directory, st)

    def _read(self, directory: Path) -> tuple[os.stat_result | None, tuple[Recalled, ...]]:
        """Every entry of ``directory`` (opened without following a link) and its ``stat``: through
        the files' index when there is one, else by reading every file."""
        if self._files is None:
            seen, files = read_folder(self._base, directory, reading=True)
            return seen, tuple(entry for _, _, entry in files)
        try:
            folder = Folder.open(self._base, directory)
        except OSError as exc:
            raise unreadable(exc.filename or directory, exc) from exc
        if folder is None:
            return None, ()
        with folder:
            try:
                st = folder.stat()
                names = [n for n in folder.names() if is_learned_name(n)]
            except OSError as exc:
                raise unreadable(directory, exc) from exc

            def read(path: Path) -> tuple[Recalled | None, os.stat_result | None]:
                try:
                    got = folder.read_stat(path.name, str(path))
                except OSError as exc:
                    raise unreadable(path, exc) from exc
                if got is None:
                    left_meanwhile(directory, path.name)
                    return None, None  # sync dropped it
                return _PARSED_LEARNED(path, got[0]), got[1]

            with self._mutex:
                distrusted = directory in self._distrusted
            # an index a read found stale is written again, so the next process can trust it
            return st, self._files.read(directory, st, names, read, rewrite=distrusted)

    def entries(self, directory: Path) -> tuple[Recalled, ...]:
        """Return every entry of ``directory``, newest first (raising ``Unreachable`` on damage)."""
        return tuple(self.listing(directory, whole=True).entries)
