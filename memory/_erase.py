"""Erasure: a memory's content removed from everything the store writes, with an audit record.

``erase(key)`` takes the memory ``key`` names (every version of it): it forgets the live version,
commits one ``memory-erase`` record (the memory id, the keys, when, by which flow, why, and a
digest of each erased commit; no content), then removes the content from every derived place (the
history DB's rows and their full-text index, with SQLite's ``secure_delete`` and the write-ahead log
truncated; learned files; stages; the files' index; the vectors) and last rewrites each
``memory-learn`` record of it in the journal as a *tombstone*: the same id, sequence number, key and
time, the payload reduced to ``{id, scope, flow, learnedMs, erased: digest}`` (with ``memory`` and
``revision`` when the commit had them), padded to the line's length on a file journal
(``JournalBackend.rewrite_payloads``). Every reader treats a tombstone as a commit of nothing
(``is_erased``): it is never rendered, materialised or returned.

A crash anywhere leaves the memory forgotten (the forget is the first step) and either fully erased
or reported: ``flows check`` finds an erase record whose memory still has content somewhere
(``erase_incomplete``) and ``--repair`` (or the same ``erase`` again) finishes it. Erasing again
appends no second record.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from journal import JournalBackend, JournalCorrupt, Lease, Record, record_id
from memory._db import db_mode, folder_mode
from memory._errors import Unwritable
from memory._finding import (
    ERASE_STREAM,
    PAD,
    RETIRE_STREAM,
    STREAM,
    TOMBSTONE_OPTIONAL,
    checked_commit,
    filter_holds_content,
    is_erased,
    meta_value_key,
)
from memory._safe import describe, kind_of, regular_prefix
from staging import fsync_dir

_KEY = re.compile(r"[0-9a-f]{32}")
_AUDIT = frozenset({"memory", "keys", "reason", "flow", "erasedMs", "records"})


def digest(payload: Mapping[str, Any]) -> str:
    """A short digest of what a commit held (its canonical JSON): what the audit keeps of it."""
    return hashlib.sha256(orjson.dumps(dict(payload), option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def tombstone(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The payload a ``memory-learn`` commit keeps once erased: who and when, not what."""
    out: dict[str, Any] = {
        "id": payload["id"],
        "scope": payload["scope"],
        "flow": payload["flow"],
        "learnedMs": payload["learnedMs"],
        "erased": digest(payload),
    }
    for name in TOMBSTONE_OPTIONAL:
        if name in payload:
            out[name] = payload[name]
    return out


def audit_key(memory: str, keys: Iterable[str]) -> str:
    """The key of a memory's erase record (one per memory and set of keys in a run)."""
    return hashlib.sha256(("\n".join([memory, *sorted(keys)])).encode()).hexdigest()[:32]


def audit_payload(
    memory: str, keys: Sequence[str], targets: Sequence[Record], *, reason: str, flow: str, erased_ms: int
) -> dict[str, Any]:
    """The erase record: the memory, its keys, each erased commit (run, sequence, digest), why, by
    which flow, when. No content."""
    return {
        "memory": memory,
        "keys": sorted(keys),
        "reason": reason,
        "flow": flow,
        "erasedMs": erased_ms,
        "records": [[r.run_id, r.seq, digest(r.payload)] for r in targets],
    }


def _run_ids(backend: JournalBackend, runs: Iterable[str] | None) -> Iterable[str]:
    return [r.run_id for r in backend.runs()] if runs is None else sorted(runs)


def _is_audit(rec: Record) -> bool:
    """Whether ``rec`` has the shape ``audit_payload`` gives an erase record."""
    p = rec.payload
    return (
        isinstance(p, Mapping)
        and set(p) == _AUDIT
        and isinstance(p["memory"], str)
        and isinstance(p["keys"], list)
        and all(isinstance(k, str) and _KEY.fullmatch(k) for k in p["keys"])
        and isinstance(p["reason"], str)
        and isinstance(p["flow"], str)
        and type(p["erasedMs"]) is int
        and isinstance(p["records"], list)
        and all(_is_erased_record(r) for r in p["records"])
        and rec.id == record_id(rec.run_id, rec.stream, str(rec.key))
    )


def _is_erased_record(entry: object) -> bool:
    """Whether ``entry`` is an erase record's ``[run, seq, digest]`` of one erased commit."""
    return (
        isinstance(entry, list)
        and len(entry) == 3
        and isinstance(entry[0], str)
        and type(entry[1]) is int
        and isinstance(entry[2], str)
    )


def checked_audit(rec: Record, location: str) -> Record:
    """``rec`` when it is an erase record of the shape ``audit_payload`` gives (``_is_audit``).

    Raises:
        JournalCorrupt: it is anything else; names the run, the stream and the line. Nothing is
            done from it: every read ignores it, and ``flows check`` reports it.
    """
    if _is_audit(rec):
        return rec
    raise JournalCorrupt(
        f"record {rec.id!r} (line {rec.seq}) of stream {rec.stream} of root run {rec.run_id} in the journal "
        f"{location} is not an erase record ({{memory, keys, reason, flow, erasedMs, records}}); nothing "
        "is done from it. Restore the journal from a backup; `flows check` lists every such record",
        path=location,
        line=rec.seq,
        run_id=rec.run_id,
        stream=rec.stream,
        reason="not an erase record",
    )


def audits(backend: JournalBackend, runs: Iterable[str] | None = None) -> list[Record]:
    """Every erase record of the journal (of ``runs``, when given) that has the shape
    ``audit_payload`` gives."""
    runs = _run_ids(backend, runs)
    return [rec for run_id in runs for rec in backend.read(run_id, ERASE_STREAM) if _is_audit(rec)]


def audits_after(backend: Any, seen: dict[str, int]) -> list[Record]:
    """The erase records of a journal hosts share appended since ``seen`` (run id -> the number of
    the last one read, updated here): one query for the stream's heads, then each run that grew
    read from where it was left. A store that has read none reads the runs holding any."""
    found: list[Record] = []
    for run_id, head in backend.stream_heads(ERASE_STREAM).items():
        after = seen.get(run_id, 0)
        if head > after:
            found.extend(rec for rec in backend.read_after(run_id, ERASE_STREAM, after) if _is_audit(rec))
            seen[run_id] = head
    return found


def commits_of(backend: JournalBackend, keys: set[str], runs: Iterable[str] | None = None) -> list[Record]:
    """Every ``memory-learn`` commit of ``keys`` still holding content (not a tombstone), in every
    run or in ``runs``."""
    out = []
    for run_id in _run_ids(backend, runs):
        for rec in backend.read(run_id, STREAM):
            if isinstance(rec.payload, Mapping) and rec.payload.get("id") in keys and not is_erased(rec):
                out.append(rec)
    return out


def batches_of(backend: JournalBackend, keys: set[str], runs: Iterable[str] | None = None) -> list[Record]:
    """Every forget by filter (in every run or in ``runs``) that retired one of ``keys`` and whose
    filter still names content: its tags, metadata or source are values the finding held."""
    out = []
    for run_id in _run_ids(backend, runs):
        for rec in backend.read(run_id, RETIRE_STREAM):
            ids = rec.payload.get("ids") if isinstance(rec.payload, Mapping) else None
            if (
                isinstance(ids, list)
                and filter_holds_content(rec)
                and any(isinstance(pair, list) and pair and pair[0] in keys for pair in ids)
            ):
                out.append(rec)
    return out


def commits_matching(
    backend: JournalBackend,
    *,
    scope: str | None,
    tags: Sequence[str],
    meta: Mapping[str, str],
    source: str | None,
    before_ms: int | None,
) -> dict[str, str | None]:
    """The keys of every commit still holding content that the filter matches (every tag, every
    metadata pair compared as ``meta_value_key`` compares them, the scope, the source, committed
    before ``before_ms``), in journal order, each once, with the memory its commit names (None for
    a first version's, whose key is its memory id). Each record is checked before it is read."""
    out: dict[str, str | None] = {}
    for run in backend.runs():
        for rec in backend.read(run.run_id, STREAM):
            if is_erased(rec):
                continue
            p = checked_commit(rec, backend.location).payload
            finding = p["finding"]
            got = finding.get("metadata") or {}
            if (
                (scope is None or p["scope"] == scope)
                and (source is None or finding["source"] == source)
                and (before_ms is None or p["learnedMs"] < before_ms)
                and all(t in finding["tags"] for t in tags)
                and all(k in got and meta_value_key(got[k]) == v for k, v in meta.items())
            ):
                out[p["id"]] = p.get("memory")
    return out


def rewrite(
    backend: JournalBackend,
    targets: Sequence[Record],
    payload_of: Callable[[Mapping[str, Any]], dict[str, Any]] = tombstone,
    lease: Lease | None = None,
) -> int:
    """Replace the payload of each of ``targets`` in the journal with ``payload_of`` it (default:
    its tombstone; ``filter_erased`` for a forget by filter); how many were rewritten. ``lease``:
    the erase's own root run's, whose holder rewrites that run's records while it runs (a session
    or a flow erasing what it learned itself); another running run's are ``JournalLeaseHeld``."""
    by_run: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for rec in targets:
        by_run.setdefault((rec.run_id, rec.stream), {})[rec.seq] = payload_of(rec.payload)
    done = 0
    # on PostgreSQL the erase prunes once, as it settles (``MemoryStore._erasure_held``): each
    # rewrite pruning for itself rewrote the whole table once per run
    deferred = getattr(backend, "deferred_prune", None)
    with contextlib.nullcontext() if deferred is None else deferred():
        for (run_id, stream), payloads in sorted(by_run.items()):
            own = lease if lease is not None and lease.run_id == run_id else None
            done += backend.rewrite_payloads(run_id, stream, payloads, pad=PAD, lease=own)
    return done


def stages_holding(folders: Iterable[Path], keys: set[str]) -> list[Path]:
    """The hidden stage files in ``folders`` that hold a commit of any of ``keys`` (a learn or a
    publish a crash left behind, a removed file not yet unlinked), read without following links."""
    return [path for path, _ in _stages_holding(folders, keys)]


def keys_in_stages(folders: Iterable[Path], keys: set[str]) -> set[str]:
    """Which of ``keys`` a hidden stage file in ``folders`` holds (``stages_holding``)."""
    return {k for _, found in _stages_holding(folders, keys) for k in found}


_SCAN_CHUNK = 1 << 20


def keys_in_file(path: Path, keys: Iterable[str]) -> set[str]:
    """Which of ``keys`` the regular file ``path`` mentions, read to its end a megabyte at a time
    (never whole, never skipped for its size: a finding of control characters is six times longer as
    JSON), opened without following a link or blocking; none for anything else or an unreadable
    file."""
    wanted = {k: k.encode() for k in keys}
    if not wanted:
        return set()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return set()
    found: set[str] = set()
    overlap = max(len(k) for k in wanted.values()) - 1  # a key split across two reads is found too
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return set()
        tail = b""
        while len(found) < len(wanted):
            chunk = os.read(fd, _SCAN_CHUNK)
            if not chunk:
                break
            window = tail + chunk
            found.update(k for k, b in wanted.items() if k not in found and b in window)
            tail = window[-overlap:] if overlap else b""
    except OSError:
        return found
    finally:
        os.close(fd)
    return found


def _stages_holding(folders: Iterable[Path], keys: set[str]) -> Iterator[tuple[Path, set[str]]]:
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            if not name.startswith("."):
                continue
            found = keys_in_file(folder / name, keys)
            if found:
                yield folder / name, found


def cache_files_holding(folder: Path, keys: set[str], keep: Iterable[str]) -> list[Path]:
    """The regular files of the derived-index folder that mention any of ``keys`` (the files'
    index of unsynced findings), but not those named in ``keep`` (handled on their own)."""
    kept = set(keep)
    found = []
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    for name in names:
        if name in kept or any(name.startswith(k) for k in kept):
            continue
        if keys_in_file(folder / name, keys):
            found.append(folder / name)
    return found


def quarantined_holding(folder: Path, keys: set[str]) -> list[Path]:
    """The files ``flows check --repair`` moved aside under ``folder`` that are (or hold) a finding
    of ``keys``: a learned file named after its key, or any file that mentions one."""
    found = []
    for dirpath, _, names in os.walk(folder):  # never follows links
        for name in names:
            path = Path(dirpath) / name
            try:
                if not stat.S_ISREG(os.lstat(path).st_mode):
                    continue
            except OSError:
                continue
            if name[: -len(".json")] in keys or keys_in_file(path, keys):
                found.append(path)
    return found


def sync_folders(folders: Iterable[Path]) -> None:
    """Make the removals made in ``folders`` durable (one fsync each), so that no power loss brings
    back an erased copy after the journal's commits have become tombstones.

    Raises:
        Unwritable: a folder could not be fsync'd.
    """
    for folder in sorted(folders):
        try:
            fsync_dir(folder)
        except FileNotFoundError:
            continue  # the folder went with what it held
        except OSError as exc:
            raise Unwritable(
                f"cannot make the erasure's removals in {folder} durable: {describe(exc)}",
                path=folder,
                errno=exc.errno,
            ) from exc


PENDING_DIR = "flows-erase-pending"
"""The folder, beside the history DB, of markers of erasures whose old copies someone still keeps."""


def pending_dir(db_path: Path) -> Path:
    """``<db-dir>/flows-erase-pending``: one marker per erasure whose old copies a reader kept."""
    return db_path.parent / PENDING_DIR


def mark_pending(db_path: Path, memories: Sequence[str], held: Sequence[str], now_ms: int) -> Path:
    """Write a marker (``<ms>-<pid>-<random>.json``: the memories, what keeps their old copies,
    when; no content) into ``pending_dir``, durably (the file and its folder fsync'd): the erasure's
    last duty outlives this process, for ``flows check`` to report and ``--repair`` or a later erase
    to finish. A new name each time, created exclusively in the folder held open (never through a
    link), so one process's marker is never taken for another's.

    Raises:
        Unwritable: the folder or the marker could not be written (a link or a file where the
            folder belongs included).
    """
    folder = pending_dir(db_path)
    name = f"{now_ms}-{os.getpid()}-{os.urandom(4).hex()}.json"
    body = orjson.dumps({"memories": list(memories), "held": list(held), "markedMs": now_ms})
    mode = db_mode(db_path)  # as the store's files: whoever may write the store may finish it
    try:
        made = False
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, 0o700)
            made = True
        dir_fd = _open_pending(folder)
        try:
            if made:
                os.fchmod(dir_fd, folder_mode(mode))
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
            try:
                os.fchmod(fd, mode)
                os.write(fd, body)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        fsync_dir(folder.parent)
    except OSError as exc:
        raise Unwritable(
            f"cannot record that an erasure is pending in {folder}: {describe(exc)}",
            path=folder,
            errno=exc.errno,
        ) from exc
    return folder / name


def _open_pending(folder: Path) -> int:
    """The markers' folder, opened as a folder and never through a link (``OSError`` otherwise)."""
    return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def pending_markers(db_path: Path) -> list[Path]:
    """The markers in ``pending_dir`` (regular files named ``*.json``; anything else there is not
    one), oldest first. None when there is no such folder, or something else (a link, a file) is
    where it belongs: nothing is ever read or removed through a link (``flows check`` reports it).

    Raises:
        Unwritable: the folder cannot be listed.
    """
    folder = pending_dir(db_path)
    try:
        dir_fd = _open_pending(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link where the folder belongs
            return []
        raise Unwritable(f"cannot list {folder}: {describe(exc)}", path=folder, errno=exc.errno) from exc
    try:
        with os.scandir(dir_fd) as entries:
            names = [e.name for e in entries if e.name.endswith(".json") and e.is_file(follow_symlinks=False)]
    except OSError as exc:
        raise Unwritable(f"cannot list {folder}: {describe(exc)}", path=folder, errno=exc.errno) from exc
    finally:
        os.close(dir_fd)
    return [folder / n for n in sorted(names)]


def clear_pending(markers: Iterable[Path]) -> None:
    """Remove ``markers`` (their erasures are finished), durably, each by its name in its folder
    opened anew (never through a link: a folder swapped for one since the listing removes nothing).

    Raises:
        Unwritable: a marker could not be removed.
    """
    by_folder: dict[Path, list[str]] = {}
    for path in markers:
        by_folder.setdefault(path.parent, []).append(path.name)
    for folder, names in by_folder.items():
        try:
            dir_fd = _open_pending(folder)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                continue
            raise Unwritable(f"cannot open {folder}: {describe(exc)}", path=folder, errno=exc.errno) from exc
        try:
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dir_fd)
            os.fsync(dir_fd)
        except OSError as exc:
            what = f"cannot remove a marker in {folder}: {describe(exc)}"
            raise Unwritable(what, path=folder, errno=exc.errno) from exc
        finally:
            os.close(dir_fd)


def pending_folder_wrong(db_path: Path) -> str | None:
    """What stands where the markers' folder belongs when it is not a folder (a link, a file), or
    None (a folder, or nothing)."""
    try:
        st = os.lstat(pending_dir(db_path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return describe(exc)
    return None if stat.S_ISDIR(st.st_mode) else kind_of(st.st_mode)


def read_marker(path: Path) -> dict[str, Any]:
    """A marker's memories and what held them, as far as it can be read (a damaged marker is still
    a duty: what it names is then unknown)."""
    try:
        raw = regular_prefix(path, 1 << 20)  # never through a link, never waiting on a FIFO
        data = orjson.loads(raw) if raw is not None else None
    except (OSError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


@dataclass(frozen=True)
class Erased:
    """What ``erase`` returns: the memory, every key erased, the erase record (None when an earlier
    erase of it had recorded everything and this one only finished it), and how many journal
    records were rewritten as tombstones."""

    memory: str
    keys: tuple[str, ...]
    citation: Any
    rewritten: int

    def as_json(self) -> dict[str, Any]:
        """``{"memoryId", "keys", "citation", "rewritten"}``."""
        return {
            "memoryId": self.memory,
            "keys": list(self.keys),
            "citation": None if self.citation is None else self.citation.as_json(),
            "rewritten": self.rewritten,
        }
