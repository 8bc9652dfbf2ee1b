"""The file backend: the embedded default journal, on one machine's disk.

Layout under the journal's root directory::

    runs/<run-id>/run.json            the run (flow, scope, state, epoch, meta, which of its streams
                                      began in the current line format), replaced atomically
    runs/<run-id>/run.lock            the run lock: held briefly around every append and state change
                                      (a journal keeps it open while it appends to the run)
    runs/<run-id>/lease.lock          held (flock) by the lease holder for as long as it drives the run
    runs/<run-id>/streams/<name>.jsonl one stream: a LineLog of checksummed, numbered records
    runs/<run-id>/streams/<name>.jsonl.lock its marks: how far syncs reached, what a failed one poisoned

The lease dies with its process because ``flock`` locks die with their open files: a crashed driver
is seen as ``interrupted`` at once. Fencing comes from the epoch stored in ``run.json``.

Everything read back is untrusted: ``run.json`` and every stream line are checked field by field,
and every file and folder is opened or looked at without following links, never waiting on a FIFO,
and must be of its kind; anything else is ``JournalCorrupt`` naming the path.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import re
import stat
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from journal._backend import JournalBackend
from journal._errors import (
    JournalCorrupt,
    JournalError,
    JournalLeaseHeld,
    JournalPayloadInvalid,
    JournalReadInterrupted,
    JournalRunNotFound,
    JournalUnwritable,
)
from journal._fs import dir_stat, open_regular, read_failed
from journal._linelog import LineDamaged, LineLog, LineOldFormat, marks_claim_bytes
from journal._model import (
    LONG_DIGITS,
    MAX_DEPTH,
    MAX_INT,
    MAX_KEY_BYTES,
    MAX_LINE_FRAME,
    MAX_MS,
    MAX_PAYLOAD_BYTES,
    MAX_RUN_BYTES,
    RECORD_ID,
    SHAPE_MAP,
    Lease,
    Record,
    RunInfo,
    RunState,
    check_fence,
    check_key,
    check_label,
    check_name,
    check_not_held,
    check_open,
    check_record_id,
    check_resumable,
    check_run_size,
    check_sync,
    finish_state,
    json_problem,
    new_record,
    new_record_id,
    new_run_id,
    now_ms,
    padded_payload,
    payload_json,
    read_clock,
    record_id,
    record_problem,
    releases,
    shown,
    valid_key,
    valid_label,
    valid_name,
    whole,
)
from staging import StagingError, ensure_dir, have_syncfs, stage

_CRC_TAIL = len(b',"crc":"00000000"}')
_MAX_INT = MAX_INT
_SHAPE_MAP, _LONG_DIGITS, _MAX_DEPTH = SHAPE_MAP, LONG_DIGITS, MAX_DEPTH
_DEEP_LINE = 2 * MAX_DEPTH  # a line can nest that deep only with as many brackets to close
_MAX_KEY_BYTES = MAX_KEY_BYTES
_RECORD_ID_MATCH = RECORD_ID.fullmatch
_MAX_ID = 64  # RECORD_ID's longest: ASCII letters and digits up to it match it (told without the regex)
_new_record = object.__new__
_STREAM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # as check_name allows
_MAX_MS = MAX_MS  # the last millisecond of year 9999: every date a clock can show
_RUN_FIELDS = frozenset({"runId", "flow", "scope", "state", "epoch", "createdMs", "updatedMs"})
_RUN_OPTIONAL = frozenset({"meta", "error", "currentFormat"})
_LABEL = "a string of at most 64 KiB without control characters (as a begin takes it)"
_STORED_STATES = frozenset({RunState.RUNNING.value, RunState.DONE.value, RunState.FAILED.value})
# What ``currentFormat`` adds to a run record as ``run.json`` holds it: not counted in the record's
# size (``MAX_RUN_BYTES``, as the other backend measures it), and at most this many bytes.
_MAX_CURRENT_BYTES = 256 * 1024
_CURRENT_KEY_BYTES = len(b'"currentFormat":,')
_MAX_RUN_FILE = MAX_RUN_BYTES + _MAX_CURRENT_BYTES  # a run.json larger than this is not one the journal wrote
_MAX_LINE = MAX_PAYLOAD_BYTES + MAX_LINE_FRAME  # nor is a stream line longer than this
_LOCK_TIMEOUT_S = 30.0
_PINNED_RUNS = 64  # run.json files an append keeps open to fence cheaply (see _load_pinned)
_FORKS = [0]  # how many forks made this process: a run lock opened before the last is the parent's
# Every journal of this process, so that a forked child starts each with locks of its own
_JOURNALS: weakref.WeakSet[FileJournal] = weakref.WeakSet()


def _stream_named(name: str) -> bool:
    """Whether ``name`` is a stream name ``check_name`` takes."""
    return _STREAM_NAME.fullmatch(name) is not None and ".." not in name


def _forked() -> None:
    """In a forked child: no thread of the parent runs here, so a lock one of them held at the fork
    (a journal's, or a stream's: its batch, its sync and the sync's leader) would be held for
    good, and the child's first append to that stream would wait for ever. Each journal gets a
    fresh lock and forgets its streams: the child opens each again (the parent's stream
    descriptors stay open in the child until collected; closing them leaves the parent's flocks as
    they are).

    The leases are the parent's, not the child's: the child closes its copies of their lock
    descriptors at once and forgets them. A copy kept open would keep the lease's ``flock`` (it
    belongs to the open file, which the copy shares) for as long as the child lives, so a run whose
    process was killed would read ``running``, and refuse a resume, while a helper it forked (a
    ``multiprocessing`` worker) lived on. Closing a copy does not let go of the parent's lock (its
    own descriptor still holds it), and a child may still append with the parent's lease: the
    fence is the run's epoch, not the descriptor."""
    _FORKS[0] += 1
    for jr in list(_JOURNALS):
        jr._mutex = threading.Lock()
        jr._streams = {}
        for _, fd in jr._held.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        jr._held.clear()


os.register_at_fork(after_in_child=_forked)
_ACQUIRE_PATIENCE_S = 0.25  # how long a resumer waits out a reader's probe of the lease lock


def _replace_file(path: Path, data: bytes, mode: int, run_id: str) -> None:
    """Write ``data`` to a hidden copy beside ``path``, fsync it, rename it over ``path``, fsync the
    folder: the file is the old one or the new one after any crash.

    The copy's name is this thread's own (process and thread), so whatever already lies there is a
    leftover of a crash or was planted: it is removed unread, never written through (a link) nor
    waited on (a FIFO), and the copy is created anew."""
    tmp = path.with_name(f".{path.name}.rewrite-{os.getpid()}-{threading.get_ident()}")
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, path)
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise JournalUnwritable(
            f"cannot rewrite {path}: {exc.strerror or exc}", path=path, run_id=run_id
        ) from exc


def _common_record(seq: object, rid: object, key: object, ts: object, payload: object) -> bool:
    """Whether a record's fields are of the common shape, told at once: an int seq and ts in range,
    None or a printable ASCII key of at most MAX_KEY_BYTES, an id of the token alphabet, an object
    payload. Anything else is for ``record_problem``, which names what is wrong (or finds nothing:
    a rarer shape that is still a record)."""
    return (
        type(seq) is int
        and type(ts) is int
        and 1 <= seq <= _MAX_INT
        and 0 <= ts <= _MAX_INT
        and type(payload) is dict
        and (
            key is None
            or (type(key) is str and len(key) <= _MAX_KEY_BYTES and key.isascii() and key.isprintable())
        )
        and type(rid) is str
        and ((len(rid) <= _MAX_ID and rid.isascii() and rid.isalnum()) or _RECORD_ID_MATCH(rid) is not None)
    )


class RecordCodec:
    """A stream line: canonical JSON of the record with a CRC-32 of the rest as its last key.

    A line read back is untrusted: besides its checksum, it must hold exactly a record's fields,
    each of its type and range (``seq`` from 1, ``ts`` from 0, both within 64 bits; ``id`` a short
    token; ``key`` null or a valid key; ``payload`` an object). Anything else is damage.
    """

    max_line = _MAX_LINE
    """The longest line a record may be: a log's read stops at a longer one, never holding it whole."""

    def __init__(self, run_id: str, stream: str, *, began_current: bool = False) -> None:
        self._run_id = run_id
        self._stream = stream
        # Whether the stream began in the current format (``run.json`` says so): then no line of
        # it can be of the old format, and one is damage wherever it stands, not a leading line.
        self.began_current = began_current
        # A line's checksum covers the run and stream it was written for, as if they began the line
        # (``crc32(body, seed)`` is ``crc32(run, stream, body)`` at no cost a line): the bytes hold
        # neither, so a stream file copied or hard-linked into another run's folder (or under
        # another stream's name) would otherwise read as that run's own records.
        self._seed = zlib.crc32(_bound(run_id, stream))
        self._old_format = (
            f"a record whose checksum does not name run {run_id} stream {stream} (the format written "
            "before checksums named their run and stream)"
        )
        self._in_current = (
            f"{self._old_format}, in a stream begun in the current format, where no version writes "
            "one: a line copied or moved in from elsewhere"
        )

    def encode(self, record: Record) -> bytes:
        """Encode ``record`` as ``{"id","key","payload","seq","ts","crc"}`` on one line.

        Raises:
            ValueError: the record has a field ``decode`` would refuse (so it is never written).
        """
        return self._encode(record, self._seed)

    def _encode(self, record: Record, crc_start: int) -> bytes:
        """``encode``, with the checksum's start value ``crc_start`` (0: the old format, whose checksum
        is of the line alone; an erasure rewrites such a line in its own format)."""
        seq, rid, key, ts, payload = record.seq, record.id, record.key, record.ts_ms, record.payload
        # The common record (as ``decode`` tells it: an int seq and ts in range, a printable ASCII
        # key of at most MAX_KEY_BYTES, an id of the token alphabet, an object payload) passes at
        # once; anything else goes through ``record_problem``, which names what is wrong.
        if not _common_record(seq, rid, key, ts, payload):
            problem = record_problem(seq, rid, key, ts, payload)
            if problem is not None:
                raise ValueError(f"cannot encode a record with {problem}")
        body = orjson.dumps(
            {"id": rid, "key": key, "payload": payload, "seq": seq, "ts": ts}, option=orjson.OPT_SORT_KEYS
        )
        return body[:-1] + b',"crc":"%08x"}' % zlib.crc32(body, crc_start)

    def decode(self, line: bytes) -> Record:
        """Decode and verify a line; raise ``LineDamaged`` (torn=False on a checksum mismatch, or a
        checksummed line that is not exactly a record).

        A valid record of the old format (its checksum of the line alone, as versions before the
        checksum named its run and stream wrote it) raises ``LineOldFormat`` with the record: the
        line log takes it only before the stream's first line in the current format, and a caller
        of its own decides what it may stand for. In a stream that began in the current format
        (``began_current``) it is ``LineDamaged`` (torn=False): no version wrote it there."""
        if len(line) <= _CRC_TAIL or not line.endswith(b'"}') or line[-_CRC_TAIL:-10] != b',"crc":"':
            raise LineDamaged("not a checksummed record")
        if len(line) > _MAX_LINE:  # an append refuses a payload that would make one (not parsed)
            raise LineDamaged(f"a line of {len(line):,} bytes, over the {_MAX_LINE:,} a record's may hold")
        body = line[:-_CRC_TAIL] + b"}"
        try:
            obj = orjson.loads(body)
            crc = int(line[-10:-2], 16)
        except (orjson.JSONDecodeError, ValueError):
            raise LineDamaged("not valid JSON") from None
        unbound = zlib.crc32(body, self._seed) != crc
        if unbound and zlib.crc32(body) != crc:
            raise LineDamaged(self._mismatch(obj), torn=False)
        shapeless = "checksummed line without exactly a record's fields"
        if type(obj) is not dict or len(obj) != 5:
            raise LineDamaged(shapeless, torn=False)
        try:  # five fields, and these five: the lookups tell it (no set compare)
            seq, rid, key, ts, payload = obj["seq"], obj["id"], obj["key"], obj["ts"], obj["payload"]
        except KeyError:
            raise LineDamaged(shapeless, torn=False) from None
        # The common record (an int seq and ts in range, a printable ASCII key of at most
        # MAX_KEY_BYTES, an id of the token alphabet, an object payload) is told at once; anything
        # else goes through ``record_problem``, which names what is wrong.
        if not _common_record(seq, rid, key, ts, payload):
            problem = record_problem(seq, rid, key, ts, payload)
            if problem is not None:
                raise LineDamaged(f"checksummed record with {problem}", torn=False)
        if unbound and key is not None and rid != record_id(self._run_id, self._stream, key):
            # a line of a version that did not bind the checksum: only a keyed record's id tells
            raise LineDamaged(self._foreign("its id is not the one its key gives here"), torn=False)
        # What the encoder refuses to write, the decoder refuses to read: one pass in C says when
        # a line may hold it (``SHAPE_MAP``), rarely; ``json_problem`` then decides.
        shape = line.translate(_SHAPE_MAP)
        # (``find``, not ``in``: a bytes ``in`` first tries its operand as an int, and formats the
        # error it drops)
        if shape.find(_LONG_DIGITS) >= 0 or (len(line) > _DEEP_LINE and shape.count(b"2") > _MAX_DEPTH):
            problem = json_problem(body, obj)
            if problem is not None:
                raise LineDamaged(f"checksummed record with {problem}", torn=False)
        # A record made without the frozen dataclass's per-field ``__setattr__`` (a share of a
        # line's decode, and an append decodes every line other writers added since its last).
        record: Record = _new_record(Record)
        fields = record.__dict__
        fields["run_id"], fields["stream"], fields["seq"] = self._run_id, self._stream, seq
        fields["id"], fields["key"], fields["ts_ms"], fields["payload"] = rid, key, ts, payload
        if unbound:
            raise self._unbound(record)
        return record

    def _unbound(self, record: Record) -> LineDamaged:
        """What a valid record of the old format raises: ``LineDamaged`` in a stream that began in
        the current format (no version wrote it there), else ``LineOldFormat`` with the record."""
        if self.began_current:
            return LineDamaged(self._in_current, torn=False)
        return LineOldFormat(record, self._old_format)

    def decode_either(self, line: bytes) -> tuple[Record, int]:
        """``decode``, taking a record of the old format too (for a caller that has checked it
        stands where one may); returns the record and its checksum's start value, for ``padded``.

        Raises:
            LineDamaged: the line is not a record (of either format).
        """
        try:
            return self.decode(line), self._seed
        except LineOldFormat as old:
            return old.record, 0

    def padded(
        self, record: Record, crc_start: int, payload: Mapping[str, Any], *, pad: str, length: int
    ) -> bytes:
        """``record``'s line with ``payload`` instead of its own, padded under ``pad`` to ``length``
        bytes (an erasure), in the format ``crc_start`` (from ``decode_either``) says it was in.

        Raises:
            ValueError: the payload encodes longer than ``length`` even with an empty pad.
        """

        def encoded(p: Mapping[str, Any]) -> bytes:
            return self._encode(replace(record, payload=dict(p)), crc_start)

        return encoded(padded_payload(encoded, payload, pad, length))

    def _foreign(self, why: str) -> str:
        return (
            f"a record written for another run or stream than run {self._run_id} stream "
            f"{self._stream} ({why}): a stream file copied or linked from another run's folder, or "
            "under another stream's name"
        )

    def _mismatch(self, obj: object) -> str:
        """Why a line's checksum is neither this stream's nor an unbound one: a keyed record whose
        id was made for another run or stream was written for one; anything else may be either
        that or damage."""
        key, rid = (obj.get("key"), obj.get("id")) if type(obj) is dict else (None, None)
        if type(rid) is str and valid_key(key) and rid != record_id(self._run_id, self._stream, str(key)):
            return self._foreign("its checksum and its id were made for another")
        return (
            f"checksum mismatch: damaged, or a line written for another run or stream than run "
            f"{self._run_id} stream {self._stream} (a file copied or linked from another run's folder)"
        )


_KEPT_CUT = re.compile(r"\.([A-Za-z0-9][A-Za-z0-9._-]{0,127})\.jsonl\.cut-([0-9]{1,20})")


@dataclass(frozen=True)
class KeptCut:
    """A file in which a cut of a stream kept the bytes it took (``FileJournal.kept_cuts``).

    ``generation`` is the stream's generation the cut raised it to; ``size`` its bytes and
    ``modified_ms`` its modification time (the cut's, or an erasure's that rewrote it since).
    """

    run_id: str
    stream: str
    path: Path
    generation: int
    size: int
    modified_ms: int


def _kept_cut(run_id: str, entry: os.DirEntry[str]) -> KeptCut | None:
    """The kept cut ``entry`` of a streams folder is, or None when its name is no kept cut's."""
    found = _KEPT_CUT.fullmatch(entry.name)
    if found is None or ".." in found[1]:
        return None
    try:
        st = entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return None
    return KeptCut(run_id, found[1], Path(entry.path), int(found[2]), st.st_size, st.st_mtime_ns // 1_000_000)


def _bound(run_id: str, stream: str) -> bytes:
    """What a stream line's checksum covers before the line's own bytes (``RecordCodec``)."""
    return f"{run_id}\0{stream}\0".encode()


def _nonempty(entry: os.DirEntry[str]) -> bool:
    """Whether the folder entry ``entry`` holds bytes (a link or anything else counts: it is not
    what a ``begin`` that never finished leaves)."""
    try:
        st = entry.stat(follow_symlinks=False)
    except FileNotFoundError:
        return False
    return st.st_size > 0 or not stat.S_ISREG(st.st_mode)


def _run_problem(run_id: str, obj: object) -> str | None:
    """What is wrong with a run record read from ``run.json``, or None."""
    if type(obj) is not dict:
        return "not a JSON object"
    missing, extra = _RUN_FIELDS - obj.keys(), obj.keys() - _RUN_FIELDS - _RUN_OPTIONAL
    if missing or extra:
        what = f"missing {', '.join(sorted(missing))}" if missing else f"unknown {sorted(extra)!r:.200}"
        return f"not a run record: {what}"
    state, epoch, meta, error = obj["state"], obj["epoch"], obj.get("meta"), obj.get("error")
    if (  # the common case, checked first and fast
        obj["runId"] == run_id
        and valid_label(obj["flow"])
        and valid_label(obj["scope"])
        and isinstance(state, str)
        and state in _STORED_STATES
        and whole(epoch, 1)
        and whole(obj["createdMs"], 0, _MAX_MS)
        and whole(obj["updatedMs"], 0, _MAX_MS)
        and (meta is None or type(meta) is dict)
        and (error is None or type(error) is dict)
        and ("currentFormat" not in obj or _current_format_ok(obj["currentFormat"]))
    ):
        return None
    checks = (
        (obj["runId"] == run_id, "not this run's record"),
        (valid_label(obj["flow"]), f"flow is not {_LABEL}"),
        (valid_label(obj["scope"]), f"scope is not {_LABEL}"),
        (isinstance(state, str) and state in _STORED_STATES, f"state {shown(state)} is not a stored state"),
        (whole(epoch, 1), f"epoch {shown(epoch)} is not a whole number from 1 within 64 bits"),
        (whole(obj["createdMs"], 0, _MAX_MS), f"createdMs {shown(obj['createdMs'])} is not a time"),
        (whole(obj["updatedMs"], 0, _MAX_MS), f"updatedMs {shown(obj['updatedMs'])} is not a time"),
        (meta is None or type(meta) is dict, "meta is not an object"),
        (error is None or type(error) is dict, "error is not an object or null"),
        (
            "currentFormat" not in obj or _current_format_ok(obj["currentFormat"]),
            f"currentFormat {shown(obj.get('currentFormat'))} is not true or a sorted list of stream names",
        ),
    )
    return next((why for ok, why in checks if not ok), None)


def _current_format_ok(value: object) -> bool:
    """Whether ``value`` is what ``currentFormat`` of a ``run.json`` holds: true (every stream of the
    run began in the current format: this version began the run), or the names, sorted and each
    once, of the streams this version began in a run an older version began."""
    if value is True:
        return True
    return (
        type(value) is list
        and all(valid_name(name) for name in value)
        and all(a < b for a, b in itertools.pairwise(value))
    )


def _current_bytes(obj: Mapping[str, Any]) -> int:
    """The bytes ``currentFormat`` takes in the canonical JSON of the run record ``obj`` (its key,
    value and one comma: it is never the record's only field)."""
    if "currentFormat" not in obj:
        return 0
    return _CURRENT_KEY_BYTES + len(orjson.dumps(obj["currentFormat"]))


def _began_current(obj: Mapping[str, Any], stream: str) -> bool:
    """Whether the run record ``obj`` says that ``stream`` began in the current format."""
    value = obj.get("currentFormat")
    return value is True or (type(value) is list and stream in value)


def _run_json_problem(data: bytes, obj: dict[str, Any]) -> str | None:
    """What is wrong with ``data``, a ``run.json`` that parsed to ``obj`` (a run record's fields),
    as JSON, or None. The journal writes a run record as canonical JSON (``payload_json``): one
    encoding of ``obj`` again says whether ``data`` is exactly that, so JSON no journal writes (a
    repeated key, an integer past 64 bits read back as a float, a float of more digits than it
    holds, nesting orjson reads but never writes, spaces or a final newline of a hand edit) is
    refused, as a stream line's is, before any reader meets it; an integer outside signed 64 bits
    (orjson reads and writes up to 2**64 - 1) only where 19 digits stand in a row."""
    try:
        again = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # nesting orjson reads (up to 1024) but does not write (254)
        return f"JSON nested deeper than the {_MAX_DEPTH} levels the journal writes"
    if again != data or _LONG_DIGITS in data.translate(_SHAPE_MAP):
        return json_problem(data, obj)
    return None


class _Stream:
    """A stream's log and its key index, kept up to date incrementally."""

    def __init__(self, path: Path, run_id: str, stream: str, mode: int = 0o600) -> None:
        # Until ``run.json`` says the stream began in the current format, the codec takes leading
        # old-format lines (``FileJournal._know_format``).
        self.codec = RecordCodec(run_id, stream)
        self.log: LineLog[Record] = LineLog(
            path, self.codec, sequence=lambda r: r.seq, keep_open=True, mode=mode
        )
        # ``run.json`` as last read for the format (inode, size, mtime): read again once it changes
        self.format_seen: tuple[int, int, int] | None = None
        self.keys: dict[str, Record] = {}
        self.indexed = 0
        self.source: Sequence[Record] | None = None  # the log's list the index was built from
        # Every record id read so far, by its 1-based line: checked incrementally as ``index`` is.
        self.ids: dict[str, int] = {}
        self.ids_source: Sequence[Record] | None = None
        self.ids_mutex = threading.Lock()
        self.mutex = threading.Lock()  # held by the thread writing a batch
        self.queue_mutex = threading.Lock()
        self.queue: list[_Pending] = []  # appends waiting for the next batch

    def unique(self, records: Sequence[Record]) -> None:
        """``JournalCorrupt`` when two records of ``records`` (a full read: line 1 on) share an
        id. An append never writes one twice (a keyed retry returns the first), so a second is a
        crafted or copied line: read back, one record would answer ``find`` and a full read, and
        another a lookup pointed at its line."""
        with self.ids_mutex:
            ids = self.ids
            if records is not self.ids_source or len(records) < len(ids):
                ids.clear()
                self.ids_source = records
            for line in range(len(ids), len(records)):
                rid = records[line].id
                first = ids.setdefault(rid, line + 1)
                if first != line + 1:
                    path = self.log.path
                    ids.clear()  # nothing of this read is kept: the next one judges it again
                    self.ids_source = None
                    reason = f"record id {rid} again (first on line {first})"
                    raise JournalCorrupt(
                        f"{path} line {line + 1} is damaged ({reason}); the log fails closed: restore "
                        "it from a backup or inspect it with `flows check`",
                        path=path,
                        line=line + 1,
                        reason=reason,
                    )

    def index(self, records: Sequence[Record]) -> None:
        self.unique(records)
        # The log hands out a new list whenever records leave its cache (a cut, a replaced file).
        if records is not self.source or len(records) < self.indexed:
            self.keys.clear()
            self.indexed = 0
            self.source = records
        for rec in records[self.indexed :]:
            if rec.key is not None:
                self.keys.setdefault(rec.key, rec)
        self.indexed = len(records)


class _Pending:
    """One append waiting in a stream's queue, and what became of it."""

    __slots__ = ("done", "end", "error", "generation", "key", "lease", "payload", "record", "written")

    def __init__(self, lease: Lease, payload: dict[str, Any], key: str | None) -> None:
        self.lease, self.payload, self.key = lease, payload, key
        self.done = self.written = False
        self.record: Record | None = None
        self.end = 0  # the offset its bytes end at (its own line's, or the batch's for a known key)
        self.generation = 0  # the log's generation when the batch was written
        self.error: BaseException | None = None


class _RunLock:
    """A run's ``run.lock``, kept open by one journal while it appends to the run: taking the run
    lock is then one ``flock`` and letting it go another, where opening the file each time cost an
    ``open``, an ``fstat`` and a ``close`` more. Threads of the process share the descriptor, and
    with it the flock, so ``mutex`` makes them take it one at a time. ``fd`` is -1 once closed
    (a thread that finds it so after taking ``mutex`` opens the file again); ``fork`` is the fork
    count it was opened under: a child never uses (nor unlocks) its parent's, whose flock the
    parent may hold, and closing the child's copy leaves the parent's flock held."""

    __slots__ = ("fd", "fork", "mutex")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.fork = _FORKS[0]
        self.mutex = threading.Lock()


class _Closer:
    """Holds a journal's lease locks, run locks and pinned run files, and closes them when
    collected: only its journal refers to it, so it goes with the journal (as a
    ``weakref.finalize`` would, without what one costs to make)."""

    __slots__ = ("held", "locks", "pinned")

    def __init__(
        self,
        held: dict[str, tuple[int, int]],
        pinned: dict[str, tuple[int, int, Mapping[str, Any]]],
        locks: dict[str, _RunLock],
    ) -> None:
        self.held = held
        self.pinned = pinned
        self.locks = locks

    def __del__(self, _close: Callable[[int], None] = os.close) -> None:
        # ``os.close`` bound here: at interpreter exit the module's names may be gone
        fds = [fd for _, fd in self.held.values()] + [entry[0] for entry in self.pinned.values()]
        for fd in fds + [lock.fd for lock in self.locks.values() if lock.fd >= 0]:
            try:  # noqa: SIM105 - no module's name at interpreter exit (``contextlib`` may be gone)
                _close(fd)
            except OSError:
                pass
        self.held.clear()
        self.pinned.clear()
        self.locks.clear()


class FileJournal:
    """The journal on local files (see the module docstring for the layout).

    Args:
        root: the journal's directory; created on first write.
        clock: returns milliseconds since the epoch (inject one in tests).
    """

    def __init__(
        self, root: str | os.PathLike[str], *, clock: Callable[[], int] = now_ms, mode: int = 0o600
    ) -> None:
        self._root = Path(root)
        self._default_mode = mode & 0o664 | 0o600  # the files' mode while the root does not exist
        self._clock = clock
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._held: dict[str, tuple[int, int]] = {}  # run_id -> (epoch, lease lock fd)
        self._runs_path = self._root / "runs"
        self._runs_checked = False  # ``runs`` seen to be a real directory, not a link
        self._checked_dirs: set[str] = set()  # run dirs seen to be real directories, not links
        self._run_paths: dict[str, Path] = {}  # their paths
        self._checked_streams: set[str] = set()  # runs whose ``streams`` was seen to be one too
        # (device, inode) of each run folder and ``streams`` folder as first checked: every later
        # use checks that its path still names that folder (``_guard``)
        self._idents: dict[tuple[str, str], tuple[str, int, int]] = {}  # -> (path, device, inode)
        self._run_strs: dict[str, str] = {}
        self._mutex = threading.Lock()
        self._closed = False
        self._dev: int | None = None  # the root's file system, once seen
        self._pinned: dict[str, tuple[int, int, Mapping[str, Any]]] = {}  # run -> (fd, ino, run.json)
        # runs whose run.json said that every stream began in the current format (it never stops)
        self._all_current: set[str] = set()
        self._run_locks: dict[str, _RunLock] = {}  # run -> its run.lock, kept open (see _RunLock)
        # A journal dropped without close() still releases its leases, run locks and pinned files
        # when it is collected (its streams' logs close their own descriptors the same way).
        self._closer = _Closer(self._held, self._pinned, self._run_locks)
        self._mode: int | None = None  # the files' mode, from the root folder's (``_file_mode``)
        _JOURNALS.add(self)

    # -- paths and files -----------------------------------------------------------------------

    @property
    def location(self) -> str:
        """The journal's root directory."""
        return str(self._root)

    @property
    def root(self) -> Path:
        """The journal's root directory."""
        return self._root

    def _checked(self, path: Path, run_id: str | None) -> bool:
        """``check_dir`` with the journal's errors: True for a directory, False for nothing."""
        return self._checked_stat(path, run_id) is not None

    def _checked_stat(self, path: Path, run_id: str | None) -> os.stat_result | None:
        """``_checked``, answering with the directory's ``lstat`` (None for nothing)."""
        try:
            return dir_stat(path)
        except JournalCorrupt as exc:
            exc.run_id = run_id
            raise
        except OSError as exc:
            raise read_failed(f"look at {path}", path, exc, run_id=run_id) from exc

    def _runs_dir(self) -> Path:
        path = self._runs_path
        if not self._runs_checked and self._checked(path, None):
            self._runs_checked = True
        return path

    def _run_dir(self, run_id: str) -> Path:
        known = self._run_paths.get(run_id)
        if known is not None:
            return known
        path = self._runs_dir() / check_name("run id", run_id)
        st = self._checked_stat(path, run_id)  # a link or a file planted there raised
        if st is not None:
            self._note_ident(run_id, "", path, st)
            self._checked_dirs.add(run_id)
            self._run_paths[run_id] = path
        return path

    def _note_ident(self, run_id: str, folder: str, path: Path, st: os.stat_result) -> None:
        """Remember which folder ``path`` (run ``run_id``'s folder, or its ``folder``) names now:
        the one whose ``lstat`` (``st``) found it a real folder."""
        self._idents[(run_id, folder)] = (str(path), st.st_dev, st.st_ino)

    def _guard(self, run_id: str) -> None:
        """Check that the run's folder, and its ``streams`` folder, are still the folders this
        journal checked first (one ``lstat`` each): a folder swapped since for a link, or replaced
        by another folder, is ``journal_corrupt``, so nothing is appended, recorded or read through
        it (a record acknowledged into a folder outside the journal would be lost to every reader).
        A folder gone since is left for the open that follows to report."""
        for folder in ("", "streams"):
            held = self._idents.get((run_id, folder))
            if held is None:
                continue
            path = held[0]
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                return
            except OSError as exc:
                raise read_failed(f"look at {path}", path, exc, run_id=run_id) from exc
            if st.st_ino != held[2] or st.st_dev != held[1] or not stat.S_ISDIR(st.st_mode):
                what = (
                    "a symbolic link"
                    if stat.S_ISLNK(st.st_mode)
                    else "another folder (or a symbolic link was put on the way to it)"
                )
                raise JournalCorrupt(
                    f"{path} was replaced by {what} while this journal used it: nothing is appended, "
                    "recorded or read through it; put the run's own folder back (a link is never "
                    "followed)",
                    path=path,
                    line=0,
                    reason="folder replaced",
                    run_id=run_id,
                )

    def _has_run(self, run_id: str) -> bool:
        if run_id not in self._checked_dirs:
            self._run_dir(run_id)
        return run_id in self._checked_dirs

    def _streams_dir(self, run_id: str) -> Path:
        path = self._run_dir(run_id) / "streams"
        if run_id not in self._checked_streams:
            st = self._checked_stat(path, run_id)
            if st is not None:
                if run_id in self._checked_dirs:
                    self._note_ident(run_id, "streams", path, st)
                self._checked_streams.add(run_id)
        return path

    def stream_path(self, run_id: str, stream: str) -> Path:
        """The file that holds ``stream`` of ``run_id``."""
        check_name("run id", run_id)
        name = check_name("stream name", stream)
        return self._streams_dir(run_id) / f"{name}.jsonl"

    def stream_files(self, run_id: str, streams: Sequence[str]) -> list[str]:
        """``stream_path`` of each of ``streams`` of ``run_id``, as strings: what a caller that
        stats every stream of every run asks (the run's folder is found once, not per stream)."""
        check_name("run id", run_id)
        names = [check_name("stream name", stream) for stream in streams]
        folder = os.fspath(self._streams_dir(run_id))
        return [f"{folder}{os.sep}{name}.jsonl" for name in names]

    def _stream(self, run_id: str, stream: str) -> _Stream:
        key = (run_id, stream)
        with self._mutex:
            found = self._streams.get(key)
            if found is None:
                found = self._streams[key] = _Stream(
                    self.stream_path(run_id, stream), run_id, stream, self._file_mode()
                )
            return found

    def _file_mode(self) -> int:
        """The mode of the files this journal creates: its root folder's read and write bits
        (never execute, never world-writable), so a journal whose folder was made readable by a
        group (as a store makes it beside a group-readable history DB) stays readable by that
        group; the ``mode`` it was opened with while the root does not exist yet. Its folders add
        the search bit wherever a read bit is set (``_folder_mode``)."""
        if self._mode is None:
            try:
                self._mode = os.stat(self._root).st_mode & 0o664 | 0o600
            except OSError:
                return self._default_mode
        return self._mode

    def _folder_mode(self) -> int:
        mode = self._file_mode()
        return mode | ((mode & 0o444) >> 2)

    def _run_file(self, run_id: str, name: str) -> str:
        """``<run dir>/<name>`` as a string, for the hot path (pathlib costs more than the syscall)."""
        base = self._run_strs.get(run_id)
        if base is None:
            base = str(self._run_dir(run_id))
            if run_id in self._checked_dirs:
                self._run_strs[run_id] = base
        return base + os.sep + name

    def _open_run_file(self, run_id: str, name: str, flags: int, *, reading: bool) -> int:
        """Open ``<run dir>/<name>`` as a regular file, with the journal's errors.

        Raises JournalRunNotFound (no run directory), JournalCorrupt (not a regular file),
        JournalReadInterrupted (``reading``) or JournalUnwritable for other failures. A missing file
        in an existing run raises ``FileNotFoundError`` when ``flags`` do not create it.
        """
        path = self._run_file(run_id, name)
        try:
            return open_regular(path, flags, self._file_mode())
        except FileNotFoundError:
            if not self._has_run(run_id):
                raise JournalRunNotFound(f"no root run {run_id} in {self._root}", run_id=run_id) from None
            raise
        except JournalCorrupt as exc:
            exc.run_id = run_id
            raise
        except OSError as exc:
            kind = JournalReadInterrupted if reading else JournalUnwritable
            raise kind(f"cannot open {path}: {exc.strerror or exc}", run_id=run_id, path=path) from exc

    @contextlib.contextmanager
    def _run_lock(self, run_id: str) -> Iterator[None]:
        held = self._lock_run(run_id)
        try:
            yield
        finally:
            self._unlock_run(held)

    def _lock_run(self, run_id: str) -> _RunLock:
        """Take the run lock: the ``_RunLock`` that ``_unlock_run`` lets go (``_run_lock`` as a
        plain call, for the append's hot path, where a generator's context costs a share).

        The file stays open for the next time (``_RunLock``): the lock is ``run.lock``'s inode,
        which nothing replaces while the run exists (as ``lease.lock``'s)."""
        self._guard(run_id)  # every change of a run is made under its lock: checked once here
        while True:
            held = self._run_locks.get(run_id)
            if held is None or held.fork != _FORKS[0]:
                held = self._open_run_lock(run_id)
            held.mutex.acquire()
            if held.fd >= 0:
                break
            held.mutex.release()  # closed while this thread waited: open it again
        try:
            # fcntl.flock, not portalocker, on this one hot path: the same flock(2), without the
            # wrapper's per-call cost, which is a measurable share of a learn.
            fcntl.flock(held.fd, fcntl.LOCK_EX)
        except BaseException:
            held.mutex.release()
            raise
        return held

    def _unlock_run(self, held: _RunLock) -> None:
        try:
            fcntl.flock(held.fd, fcntl.LOCK_UN)
        except BaseException:  # never leave it held: closing the only descriptor lets it go
            with contextlib.suppress(OSError):
                os.close(held.fd)
            held.fd = -1
            raise
        finally:
            held.mutex.release()

    def _open_run_lock(self, run_id: str) -> _RunLock:
        """This journal's ``_RunLock`` of the run, opening ``run.lock`` if it has none (or only
        one its parent process opened)."""
        with self._mutex:
            held = self._run_locks.get(run_id)
            if held is not None and held.fork == _FORKS[0]:
                return held
            for other, lock in list(self._run_locks.items()):
                if lock.fork != _FORKS[0]:  # the parent's (never unlocked here: the flock is its)
                    self._run_locks.pop(other)
                    with contextlib.suppress(OSError):
                        os.close(lock.fd)
            if len(self._run_locks) >= _PINNED_RUNS:  # bounded: a long-lived process appends to many runs
                for other in list(self._run_locks):
                    self._close_run_lock(other, wait=False)
            try:
                fd = self._open_run_file(run_id, "run.lock", os.O_RDWR | os.O_CREAT, reading=False)
            except FileNotFoundError:
                raise JournalRunNotFound(f"no root run {run_id} in {self._root}", run_id=run_id) from None
            held = self._run_locks[run_id] = _RunLock(fd)
            return held

    def _close_run_lock(self, run_id: str, *, wait: bool = True) -> None:
        """Close the run's kept ``run.lock`` once no thread holds it (without ``wait``: only if
        none holds it now)."""
        held = self._run_locks.get(run_id)
        if held is not None and held.fork != _FORKS[0]:  # the parent's: its mutex may be held there
            self._run_locks.pop(run_id, None)
            with contextlib.suppress(OSError):
                os.close(held.fd)
            return
        if held is None or not held.mutex.acquire(blocking=wait):
            return
        try:
            if self._run_locks.get(run_id) is held:
                del self._run_locks[run_id]
            if held.fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(held.fd)
                held.fd = -1
        finally:
            held.mutex.release()

    def _load(self, run_id: str) -> dict[str, Any]:
        path = self._run_file(run_id, "run.json")
        self._guard(run_id)
        # Read afresh: the fence must see the epoch another process just wrote (``_load_pinned``
        # skips the read only while the path names the very file it holds open).
        try:
            fd = self._open_run_file(run_id, "run.json", os.O_RDONLY, reading=True)
        except FileNotFoundError:
            self._refuse_headless(run_id)
            raise JournalRunNotFound(f"no root run {run_id} in {self._root}", run_id=run_id) from None
        try:
            data = self._read_all(fd)
        except OSError as exc:
            raise read_failed(f"read {path}", path, exc, run_id=run_id) from exc
        finally:
            os.close(fd)
        return self._parse_run(run_id, path, data)

    def _refuse_headless(self, run_id: str) -> None:
        """Raise ``JournalCorrupt`` when run ``run_id`` has no ``run.json`` but a stream of it holds
        bytes. A ``begin`` that never finished leaves at most an empty ``streams`` folder (nothing is
        appended before ``run.json`` is in place); records without it mean the run record was
        removed, and reading the run as absent would drop its records (a forget among them) from
        every answer."""
        directory = os.path.join(self._runs_dir(), run_id, "streams")
        try:
            with os.scandir(directory) as entries:
                held = [e.name for e in entries if not e.is_dir(follow_symlinks=False) and _nonempty(e)]
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise read_failed(f"look at run {run_id} ({directory})", directory, exc, run_id=run_id) from exc
        if held:
            raise JournalCorrupt(
                f"run {run_id} has records ({sorted(held)[0]}) but no run.json: its run record was "
                f"removed, so its records cannot be read; restore run.json from a backup, or move the "
                f"folder {os.path.dirname(directory)} out of the journal to drop the run and its records",
                path=os.path.join(os.path.dirname(directory), "run.json"),
                line=0,
                reason="run record missing",
                run_id=run_id,
            )

    @staticmethod
    def _read_all(fd: int) -> bytes:
        chunks = [os.read(fd, 65536)]
        total = len(chunks[0])
        while len(chunks[-1]) == 65536 and total <= _MAX_RUN_FILE:  # a large meta: read on
            chunks.append(os.read(fd, 65536))
            total += len(chunks[-1])
        return b"".join(chunks)

    @staticmethod
    def _parse_run(run_id: str, path: str, data: bytes) -> dict[str, Any]:
        """The run record in ``data``, checked field by field: anything else is ``JournalCorrupt``."""
        if len(data) > _MAX_RUN_FILE:
            problem = f"larger than {_MAX_RUN_FILE} bytes"
        else:
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                problem = f"not JSON: {exc}"
            else:
                found = _run_problem(run_id, obj)
                if found is None:
                    found = _run_json_problem(data, obj)
                marker = _current_bytes(obj) if found is None else 0
                if found is None and (marker > _MAX_CURRENT_BYTES or len(data) - marker > MAX_RUN_BYTES):
                    found = f"larger than {MAX_RUN_BYTES} bytes (its currentFormat {_MAX_CURRENT_BYTES} more)"
                if found is None:
                    return obj  # type: ignore[no-any-return]
                problem = found
        raise JournalCorrupt(
            f"{path} is damaged ({problem}); restore it or inspect it with `flows check`",
            path=path,
            line=1,
            reason=problem,
            run_id=run_id,
        )

    def _load_pinned(self, run_id: str) -> Mapping[str, Any]:
        """``run.json`` for the append fence: the record read last time while the path still names
        the very file read then, else read afresh. Call under the run lock.

        The file is only ever replaced, never rewritten in place, and the descriptor kept open pins
        its inode, so its number cannot be reused by a newer ``run.json``: one ``stat`` tells
        whether the record is still current.
        """
        path = self._run_file(run_id, "run.json")
        pinned = self._pinned.get(run_id)
        if pinned is not None:
            try:
                if os.lstat(path).st_ino == pinned[1]:
                    return pinned[2]
            except OSError:
                pass  # gone or unreadable: _load below says which
            self._unpin(run_id)
        try:
            fd = self._open_run_file(run_id, "run.json", os.O_RDONLY, reading=True)
        except (OSError, JournalReadInterrupted):
            return self._load(run_id)  # raises the right error, or reads a file just replaced
        try:
            ino = os.fstat(fd).st_ino
            obj = self._parse_run(run_id, path, self._read_all(fd))
        except OSError as exc:
            os.close(fd)
            raise read_failed(f"read {path}", path, exc, run_id=run_id) from exc
        except BaseException:
            os.close(fd)
            raise
        if len(self._pinned) >= _PINNED_RUNS:  # bounded: a long-lived process appends to many runs
            for other in list(self._pinned):
                self._unpin(other)
        self._pinned[run_id] = (fd, ino, obj)
        return obj

    def _unpin(self, run_id: str) -> None:
        pinned = self._pinned.pop(run_id, None)
        if pinned is not None:
            with contextlib.suppress(OSError):
                os.close(pinned[0])

    def _store(self, run_id: str, obj: Mapping[str, Any]) -> None:
        data = payload_json(obj, what="run record (its flow, scope, metadata and error)", limit=None)
        check_run_size(len(data) - _current_bytes(obj), run_id=run_id)
        directory = self._run_dir(run_id)
        self._guard(run_id)
        try:
            staged = stage(directory, data, self._file_mode(), hint="run.json")
            staged.publish(directory / "run.json")
        except StagingError as exc:
            raise JournalUnwritable(
                f"cannot record run {run_id}: {exc}", run_id=run_id, path=exc.path
            ) from exc

    def _info(self, obj: Mapping[str, Any]) -> RunInfo:
        state = RunState(obj["state"])
        if state is RunState.RUNNING and not self._holder_alive(obj["runId"]):
            state = RunState.INTERRUPTED
        return RunInfo(
            run_id=obj["runId"],
            flow=obj["flow"],
            scope=obj["scope"],
            state=state,
            epoch=obj["epoch"],
            created_ms=obj["createdMs"],
            updated_ms=obj["updatedMs"],
            meta=obj.get("meta") or {},
            error=obj.get("error"),
        )

    def _holder_alive(self, run_id: str) -> bool:
        if run_id in self._held:
            return True
        try:
            fd = self._open_run_file(run_id, "lease.lock", os.O_RDONLY, reading=True)
        except FileNotFoundError:
            return False
        import portalocker  # imported by the lock paths only: a command that reads nothing locked skips it

        try:
            portalocker.lock(fd, portalocker.LockFlags.SHARED | portalocker.LockFlags.NON_BLOCKING)
        except portalocker.exceptions.LockException:
            return True
        finally:
            os.close(fd)
        return False

    # -- leases ------------------------------------------------------------------------------

    def _take_lease_lock(self, run_id: str) -> int:
        try:
            fd = self._open_run_file(run_id, "lease.lock", os.O_RDWR | os.O_CREAT, reading=False)
        except FileNotFoundError:
            raise JournalRunNotFound(f"no root run {run_id} in {self._root}", run_id=run_id) from None
        import portalocker  # imported by the lock paths only: a read-only command never pays for it

        deadline = time.monotonic() + _ACQUIRE_PATIENCE_S
        while True:
            try:
                portalocker.lock(fd, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING)
                return fd
            except portalocker.exceptions.LockException:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise JournalLeaseHeld(
                        f"root run {run_id} is driven by a live process; wait for it to finish or stop it",
                        run_id=run_id,
                    ) from None
                time.sleep(0.01)

    def begin(self, flow: str, scope: str, meta: Mapping[str, Any]) -> tuple[RunInfo, Lease]:
        """Create a running root run and return it with its first lease (see ``JournalBackend``).

        Raises JournalPayloadInvalid (``meta``, ``flow`` or ``scope`` is not JSON both backends can
        store; nothing is created), JournalCorrupt (the runs folder is not a folder), and the
        storage errors.
        """
        self._check_open()
        check_label("flow", flow)
        check_label("scope", scope)
        now = read_clock(self._clock)
        run_id = new_run_id(now)
        obj = {
            "runId": run_id,
            "flow": flow,
            "scope": scope,
            "state": RunState.RUNNING.value,
            "epoch": 1,
            "createdMs": now,
            "updatedMs": now,
            "meta": dict(meta) if isinstance(meta, Mapping) else meta,
            "error": None,
            # every stream of the run begins in the current format: no old-format line is one of its
            "currentFormat": True,
        }
        data = payload_json(obj, what="run record (its flow, scope and metadata)", limit=None)
        check_run_size(len(data) - _current_bytes(obj))
        obj = orjson.loads(data)
        problem = _run_problem(run_id, obj)
        if problem is not None:  # the checks above leave nothing for this to find: it fails closed
            raise JournalPayloadInvalid(f"cannot begin a run whose record has {problem}", run_id=run_id)
        directory = self._run_dir(run_id)
        try:
            ensure_dir(directory / "streams", self._folder_mode())
        except OSError as exc:
            # no run was begun: the error names the folder it could not be made in, never the id
            # of a run that does not exist
            raise JournalUnwritable(
                f"cannot begin a root run: cannot create a run folder in {directory.parent}: "
                f"{exc.strerror or exc}; check that the journal's folder is writable and has space",
                path=directory.parent,
            ) from exc
        try:
            fd = self._take_lease_lock(run_id)
        except JournalError as exc:
            self._abandon(directory, exc)
            raise
        try:
            self._store(run_id, obj)
        except JournalError as exc:
            os.close(fd)
            self._abandon(directory, exc)
            raise
        self._held[run_id] = (1, fd)
        return self._info(obj), Lease(run_id, 1)

    @staticmethod
    def _abandon(directory: Path, exc: JournalError) -> None:
        """A run that could not be begun: its half-made folder goes (best effort; with no
        ``run.json`` no reader counts it as a run), and ``exc`` names no run."""
        exc.run_id = None
        for name in ("streams", "lease.lock", "run.lock"):
            with contextlib.suppress(OSError):
                (os.rmdir if name == "streams" else os.unlink)(directory / name)
        with contextlib.suppress(OSError):
            os.rmdir(directory)

    def acquire(self, run_id: str) -> Lease:
        """Take over a failed or interrupted run with a new epoch (see ``JournalBackend``)."""
        self._check_open()
        check_not_held(run_id, run_id in self._held)
        self._load(run_id)  # JournalRunNotFound before touching anything
        fd = self._take_lease_lock(run_id)
        try:
            with self._run_lock(run_id):
                obj = self._load(run_id)
                check_resumable(run_id, obj["state"])
                obj.update(
                    state=RunState.RUNNING.value,
                    epoch=obj["epoch"] + 1,
                    updatedMs=read_clock(self._clock, run_id=run_id),
                    error=None,
                )
                self._store(run_id, obj)
        except BaseException:
            os.close(fd)
            raise
        self._held[run_id] = (obj["epoch"], fd)
        return Lease(run_id, obj["epoch"])

    def finish(self, lease: Lease, state: RunState, error: Mapping[str, Any] | None = None) -> RunInfo:
        """Record ``done`` or ``failed`` and release the lease (see ``JournalBackend``)."""
        self._check_open()
        ended = finish_state(state)
        recorded = orjson.loads(payload_json(error, what="error")) if error else None
        now = read_clock(self._clock, run_id=lease.run_id)
        with self._run_lock(lease.run_id):
            obj = self._load(lease.run_id)
            check_fence(lease, obj["epoch"], obj["state"])
            obj.update(state=ended.value, updatedMs=now, error=recorded)
            self._store(lease.run_id, obj)
        self._close_run_lock(lease.run_id)  # an ended run takes no more appends
        self.release(lease)
        return self._info(obj)

    def release(self, lease: Lease) -> None:
        """Let go of the lease lock (the run then reads interrupted if still running).

        A no-op for a lease this object does not hold (see ``JournalBackend``), closed or not.
        """
        held = self._held.get(lease.run_id)
        if held is not None and releases(held[0], lease):
            del self._held[lease.run_id]
            os.close(held[1])
            self._let_go_of(lease.run_id)

    def _let_go_of(self, run_id: str) -> None:
        """Close what this object kept open to append to the run, which it no longer does: its
        streams' logs and marks (two descriptors a stream), its run lock (unless a thread holds it
        now) and its pinned ``run.json``. A long-lived process (an MCP server: a root run a session
        and scope) kept the streams of every run it had ever appended to, until it ran out of
        descriptors and every read and write failed. A reader still holding a stream goes on (a
        log reopens what it needs)."""
        with self._mutex:
            dropped = [self._streams.pop(key) for key in list(self._streams) if key[0] == run_id]
        for handle in dropped:
            handle.log.close()
        self._close_run_lock(run_id, wait=False)
        self._unpin(run_id)

    # -- streams -----------------------------------------------------------------------------

    def shares_filesystem(self, path: str) -> bool:
        """True where ``syncfs`` exists and ``path`` is on the journal's file system (see
        ``JournalBackend``); False when either cannot be told (a missing path, say)."""
        self._check_open()
        if not have_syncfs():
            return False
        try:
            if self._dev is None:
                self._dev = os.stat(self._root).st_dev
            return os.stat(path).st_dev == self._dev
        except OSError:
            return False

    def append(
        self,
        lease: Lease,
        stream: str,
        payload: Mapping[str, Any],
        *,
        key: str | None = None,
        sync_filesystem: bool = False,
    ) -> Record:
        """Append durably under the run lock, idempotent by ``key`` (see ``JournalBackend``).

        Group commit: the line is written under the run lock, but synced after the lock is let go,
        so appenders in other threads and processes overlap their syncs and one sync can cover
        several lines. The call still returns only once its record (or, for a key already in the
        stream, the existing record) is durable. With ``sync_filesystem`` the sync is a ``syncfs``
        of the journal's file system (shared the same way), which also covers the files the caller
        wrote before the call.

        The key and payload are checked, and the payload encoded, before the append joins a batch:
        a bad one fails its own call, never the appends batched with it. When a shared sync fails,
        every append whose line it covered fails (see ``LineLog``), and no other.

        Raises:
            JournalNameInvalid: the run id, stream name or key is not allowed.
            JournalPayloadInvalid: the payload is not JSON both backends can store.
            JournalLeaseLost: a stale epoch, or the run has ended.
            JournalUnwritable, JournalCorrupt, JournalReadInterrupted: the storage failed.
            JournalSyncUnsupported: ``sync_filesystem`` without syncfs (also a ValueError).
            JournalClockInvalid: the clock read no time (also a ValueError); nothing is written.
        """
        self._check_open()
        if sync_filesystem:
            check_sync(have_syncfs(), "this platform has no syncfs", self.location)
        if key is not None:
            check_key(key)
        # A canonical copy: the record holds what a read returns, whatever the caller does next.
        body = orjson.loads(payload_json(payload))
        mine = _Pending(lease, body, key)
        try:
            handle = self._stream(lease.run_id, stream)
            with handle.queue_mutex:
                handle.queue.append(mine)
            with handle.mutex:
                if not mine.done:  # leader: write every waiting append, in order, under one lock
                    with handle.queue_mutex:
                        batch, handle.queue = handle.queue, []
                    self._write_batch(handle, lease.run_id, stream, batch)
            if mine.error is not None:
                raise mine.error
            record = mine.record
            assert record is not None
            try:
                if mine.written or not sync_filesystem:
                    handle.log.sync_to(mine.end, filesystem=sync_filesystem, generation=mine.generation)
                else:  # nothing of ours in the log: a syncfs that begins now covers the caller's
                    # files and the record (written before)
                    handle.log.sync_now(filesystem=True, end=mine.end, generation=mine.generation)
            except JournalError:
                self._settle_after_failure(lease.run_id, handle)
                raise
        except JournalError as exc:
            exc.run_id, exc.stream = lease.run_id, stream
            raise
        return record

    def _resolve(self, handle: _Stream, obj: Mapping[str, Any], p: _Pending, stream: str, seq: int) -> None:
        """Fence ``p`` and give it its record: the one its key already has, or a new one at ``seq``."""
        run_id = p.lease.run_id
        try:
            check_fence(p.lease, obj["epoch"], obj["state"])
            ts_ms = read_clock(self._clock, run_id=run_id)
        except JournalError as exc:
            p.error = exc
            return
        if p.key is not None and p.key in handle.keys:
            p.record = handle.keys[p.key]  # maybe another appender's, not yet durable
            return
        # every field made or checked here (the key and payload as the append began): an equal
        # ``Record`` without the dataclass's ``__init__``
        p.record = new_record(
            run_id, stream, seq, new_record_id(run_id, stream, p.key), p.key, ts_ms, p.payload
        )
        p.written = True
        if p.key is not None:
            handle.keys[p.key] = p.record

    def _write_batch(self, handle: _Stream, run_id: str, stream: str, batch: list[_Pending]) -> None:
        """Under the run lock once: fence each pending append, resolve keys already present, and
        write the new records with one ``write`` (group commit's other half: threads of this
        process that queued while another wrote share its lock and its write).

        Each append then waits for the bytes that are its own: its line's end, or (a key already
        present) the end of the log as written, with the log's generation at the time."""
        try:
            lock = self._lock_run(run_id)
            try:
                obj = self._load_pinned(run_id)
                self._settle_format(run_id, stream, handle, obj, batch)
                with handle.log.held():
                    records = handle.log.recover()
                    handle.index(records)
                    new: list[_Pending] = []
                    for p in batch:
                        self._resolve(handle, obj, p, stream, len(records) + len(new) + 1)
                        if p.written:
                            new.append(p)
                    ends = handle.log.write_records([p.record for p in new if p.record is not None])
                    handle.indexed += len(new)
                    end, generation = handle.log.end(), handle.log.generation
                    for p in batch:
                        p.end, p.generation = end, generation
                    for p, own_end in zip(new, ends, strict=True):
                        p.end = own_end
            finally:
                self._unlock_run(lock)
        except BaseException as exc:  # a journal error (the run lock, the log): every caller's
            handle.keys.clear()  # keys may have been given to records never written: rebuild
            handle.indexed = 0
            handle.source = None
            for p in batch:
                if p.error is None:
                    p.error, p.written = exc, False
            if not isinstance(exc, Exception):
                raise
        finally:
            for p in batch:
                p.done = True

    def _know_format(self, run_id: str, stream: str, handle: _Stream) -> None:
        """Have ``handle``'s codec refuse every old-format line once ``run.json`` says the stream
        began in the current format. Read once while it says so (it never stops saying so), else
        again whenever the file was replaced since (one ``lstat``). A damaged ``run.json`` is
        ``JournalCorrupt``: the stream is not read as if it could hold old lines."""
        if handle.codec.began_current:
            return
        if run_id in self._all_current:
            self._now_current(handle)
            return
        path = self._run_file(run_id, "run.json")
        try:
            st = os.lstat(path)
        except OSError:
            return  # no run record (yet): the read says what is wrong, if anything
        seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        if seen == handle.format_seen:
            return
        try:
            obj = self._load(run_id)
        except JournalRunNotFound:
            return
        if obj.get("currentFormat") is True:
            self._all_current.add(run_id)
        if _began_current(obj, stream):
            self._now_current(handle)
        handle.format_seen = seen

    @staticmethod
    def _now_current(handle: _Stream) -> None:
        """``handle``'s stream began in the current format: its codec refuses old-format lines from
        now on, and what its log read before is decoded again under that rule."""
        if not handle.codec.began_current:
            handle.codec.began_current = True
            handle.log.reread()

    def _codec_of(self, run_id: str, stream: str, handle: _Stream, obj: Mapping[str, Any]) -> RecordCodec:
        """A codec of the stream for an erasure, under the run lock (``obj``: ``run.json``): in a
        stream begun in the current format an old-format line is damage, and nothing is rewritten."""
        if _began_current(obj, stream):
            self._now_current(handle)
        return RecordCodec(run_id, stream, began_current=handle.codec.began_current)

    def _settle_format(
        self, run_id: str, stream: str, handle: _Stream, obj: Mapping[str, Any], batch: list[_Pending]
    ) -> None:
        """Under the run lock, before an append opens the stream: when ``run.json`` (``obj``) says
        the stream began in the current format, its codec says so too; when the run was begun by
        an older version and this append begins the stream (no line yet), ``run.json`` first
        records that it begins in the current format (durably: staged, fsync'd, renamed, its folder
        fsync'd), so no old-format line is ever taken in it. A crash before the rename leaves the
        stream unbegun and unmarked (the next append marks it); after it, a stream of no line or
        of current ones, marked. A list that would pass ``_MAX_CURRENT_BYTES`` leaves the stream
        under the rule for an older version's streams."""
        if handle.codec.began_current:
            return
        if _began_current(obj, stream):
            self._now_current(handle)
            return
        if not any(p.lease.epoch == obj["epoch"] for p in batch) or obj["state"] != RunState.RUNNING.value:
            return  # nothing of the batch is appended (it is fenced): nothing to record
        try:
            if os.lstat(handle.log.path).st_size:
                return  # begun by an older version: its leading lines may be of the old format
        except FileNotFoundError:
            pass
        except OSError:
            return  # the open that follows says what is wrong
        listed = obj.get("currentFormat") or []
        marked = {**obj, "currentFormat": sorted({*listed, stream})}
        if _current_bytes(marked) > _MAX_CURRENT_BYTES:
            return
        self._store(run_id, marked)
        self._now_current(handle)

    def _settle_after_failure(self, run_id: str, handle: _Stream) -> None:
        """After a failed sync, cut the log's poisoned end now rather than at the next append, so
        lock-free readers stop seeing lines nobody was acknowledged for. Best effort: the next
        locked open does it anyway."""
        with contextlib.suppress(JournalError), handle.mutex, self._run_lock(run_id), handle.log.held():
            handle.index(handle.log.recover())

    def read(self, run_id: str, stream: str) -> Sequence[Record]:
        """Return the stream's records in order (see ``JournalBackend``)."""
        self._check_open()
        return self._records(run_id, stream, None)

    def _records(self, run_id: str, stream: str, handle: _Stream | None) -> Sequence[Record]:
        """``read`` of an open journal (``handle``: the stream's, when the caller has it)."""
        try:
            if handle is None:
                handle = self._stream(run_id, stream)
            if not self._has_run(run_id):
                raise JournalRunNotFound(f"no root run {run_id} in {self._root}", run_id=run_id)
            self._guard(run_id)
            self._know_format(run_id, stream, handle)
            records = handle.log.read()
            handle.unique(records)
            return records
        except JournalError as exc:
            exc.run_id, exc.stream = run_id, stream
            raise

    def find(self, run_id: str, stream: str, key: str) -> Record | None:
        """Return the record appended with ``key``, or None (see ``JournalBackend``)."""
        self._check_open()
        check_key(key)
        handle = self._stream(run_id, stream)
        records = self._records(run_id, stream, handle)
        with handle.mutex:
            handle.index(records)
            return handle.keys.get(key)

    def stamp(self, run_id: str, stream: str) -> object | None:
        """A token for the stream as last read (see ``JournalBackend``): the log's own record of
        that read, while the file is still the one it read, of that size, with the same marks
        (``LineLog.stamp``: one ``lstat`` and one read of the marks)."""
        if self._closed:
            self._check_open()
        handle = self._streams.get((run_id, stream))
        return None if handle is None else handle.log.stamp()

    def lookup(self, run_id: str, stream: str, record_id: str, *, hint: int | None = None) -> Record | None:
        """Return the record ``record_id`` of the stream, or None (see ``JournalBackend``).

        With ``hint`` (a byte offset ``hints`` gave), only that line is read: it counts when it
        begins a line, ends within the watermark (acknowledged), decodes with a valid checksum, and
        is the record asked for. Anything else (the file cut, replaced or damaged since, another
        record there, a line never acknowledged) costs a full ``read``, which answers as always.
        """
        self._check_open()
        check_record_id(record_id)
        if hint is not None:
            try:
                # a run's folders first looked at here are noted as they are now: nothing to guard yet
                seen = run_id in self._checked_dirs
                handle = self._stream(run_id, stream)
                if seen:
                    self._guard(run_id)
                found = handle.log.read_at(hint)
            except JournalError as exc:
                exc.run_id, exc.stream = run_id, stream
                raise
            if found is not None and found[0].id == record_id and self._has_run(run_id):
                return found[0]
        for record in self.read(run_id, stream):
            if record.id == record_id:
                return record
        return None

    def hints(self, run_id: str, stream: str) -> dict[str, int]:
        """Return, by record id, the hint ``lookup`` can use for each record of the stream as
        ``read`` returns it now (see ``JournalBackend``): where its line begins."""
        self._check_open()
        records = self.read(run_id, stream)
        # the log's own cache, which another thread's append extends in place: its first ``count``
        # records are the ones the starts are asked for
        count = len(records)
        starts = self._stream(run_id, stream).log.starts(count)
        if starts is None:
            return {}
        return {r.id: at for r, at in zip(records[:count], starts, strict=True)}

    def streams(self, run_id: str) -> list[str]:
        """Return the run's non-empty stream names, sorted.

        A file in the streams folder that is not a regular file is listed too (whatever its size),
        and so is a stream whose file is empty or missing while its mark file says bytes of it were
        acknowledged (or is no regular file), so that reading it reports it rather than the listing
        hiding it.
        """
        return self.stream_listing(run_id)[0]

    def kept_cuts(self, run_id: str) -> list[KeptCut]:
        """The files in which cuts of the run's streams kept the bytes they took, by stream and
        generation: a locked open that cuts a poisoned end (a failed sync's, or one a crafted or
        stale mark file claims) copies what it cuts to ``.<stream>.jsonl.cut-<generation>`` beside
        the stream first (``LineLog.kept_cut_path``). Nothing reads them as records and nothing
        removes them: they are evidence for a person (``flows check`` reports each). A thing of
        that name that is no regular file is listed too (its own ``lstat`` size and time).

        Raises:
            JournalRunNotFound: no such run.
            JournalReadInterrupted: the folder could not be listed.
        """
        return self.stream_listing(run_id)[1]

    def stream_listing(self, run_id: str) -> tuple[list[str], list[KeptCut]]:
        """``streams`` and ``kept_cuts`` of the run from one listing of its folder (what a check
        of every run asks)."""
        self._check_open()
        directory = self._streams_dir(run_id)
        if not self._has_run(run_id):
            raise JournalRunNotFound(f"no root run {run_id} in {self._root}", run_id=run_id)
        self._guard(run_id)
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except FileNotFoundError:
            return [], []
        except OSError as exc:
            raise read_failed(f"list {directory}", directory, exc, run_id=run_id) from exc
        names: set[str] = set()
        marked: list[str] = []  # streams with a mark file, which may claim bytes the file lacks
        kept: list[KeptCut] = []
        for entry in entries:
            if entry.name.startswith("."):
                cut = _kept_cut(run_id, entry)
                if cut is not None:
                    kept.append(cut)
                continue
            if entry.name.endswith(".jsonl.lock"):
                if _stream_named(name := entry.name[: -len(".jsonl.lock")]):
                    marked.append(name)
                continue
            name = entry.name[: -len(".jsonl")]
            if not entry.name.endswith(".jsonl") or not _stream_named(name):
                continue  # not a stream file: nothing reads it as a stream
            try:
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if st.st_size > 0 or not stat.S_ISREG(st.st_mode):
                names.add(name)
        # a stream file emptied or deleted while its durable mark counts acknowledged bytes lost
        # them: listed, so that reading it reports the damage rather than the listing hiding it
        lost = [n for n in marked if n not in names and marks_claim_bytes(f"{directory}/{n}.jsonl.lock")]
        names.update(lost)
        kept.sort(key=lambda k: (k.stream, k.generation))
        return sorted(names), kept

    def rewrite_payloads(
        self,
        run_id: str,
        stream: str,
        payloads: Mapping[int, Mapping[str, Any]],
        *,
        pad: str,
        lease: Lease | None = None,
    ) -> int:
        """Replace the payloads of the stream's records numbered in ``payloads`` (an erasure): each
        line keeps its id, sequence number, key, time and exact length (the payload is padded with
        spaces under ``pad``), so no offset, watermark or hint moves, and gets a new checksum. The
        file is replaced whole under the run lock and the log's lock (a resume waits for it): a
        copy with the new lines is written beside it, fsync'd, renamed over it and the folder
        fsync'd, so a crash leaves the old file or the new one, never a mix. Returns how many
        records were rewritten.

        ``lease``: the run's current lease, whose holder may rewrite its own records while it runs
        (its appends take the same locks, and its kept descriptor of the log sees the file replaced).

        Raises:
            JournalLeaseHeld: the run is running (a live holder may append to the old file), and
                ``lease`` is not its lease.
            JournalLeaseLost: ``lease`` is stale (another holder took the run over, or it ended).
            JournalCorrupt: a line of the stream is damaged (nothing is rewritten).
            ValueError: a new payload is longer than the line it replaces.
            JournalUnwritable: the copy could not be written or renamed.
        """
        self._check_open()
        own = lease is not None and lease.run_id == run_id
        info = self.run(run_id)
        if info.state is RunState.RUNNING and not own:
            raise JournalLeaseHeld(
                f"root run {run_id} is running: its records are rewritten once it has ended", run_id=run_id
            )
        handle = self._stream(run_id, stream)
        # Under the run lock, as an append: a resume (which raises the epoch under that lock) and
        # every append after it wait until the copy is in place, and the state is looked at again
        # under it, so no acknowledged line is written to the file being replaced.
        with handle.mutex, self._run_lock(run_id), handle.log.locked():
            obj = self._load(run_id)
            if self._info(obj).state is RunState.RUNNING and not own:
                raise JournalLeaseHeld(
                    f"root run {run_id} is running: its records are rewritten once it has ended",
                    run_id=run_id,
                )
            if own:
                assert lease is not None
                if self._info(obj).state is RunState.RUNNING:
                    check_fence(lease, obj["epoch"], obj["state"])
            codec = self._codec_of(run_id, stream, handle, obj)
            # What a locked open does first: a torn tail (which may hold stale bytes copying an
            # earlier line, an erased one among them) is cut, and damage fails closed.
            try:
                handle.log.recover()
            except JournalError as exc:
                exc.run_id, exc.stream = run_id, stream
                raise
            path = handle.log.path
            fd = open_regular(path, os.O_RDONLY)
            try:
                chunks = []  # joined once: adding each chunk to the bytes read so far is quadratic
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
                data = b"".join(chunks)
            finally:
                os.close(fd)
            lines = data.split(b"\n")
            erased: list[tuple[str, Mapping[str, Any]]] = []  # (record id, what a kept cut's copy becomes)
            for i, line in enumerate(lines[:-1]):  # the last piece: empty (the torn tail was cut)
                try:  # an old-format line too: the recover above found it where one may stand
                    rec, crc_start = codec.decode_either(line)
                except LineDamaged as exc:
                    raise JournalCorrupt(
                        f"{path} line {i + 1} is damaged ({exc}): nothing rewritten",
                        path=path,
                        line=i + 1,
                        reason=str(exc),
                        run_id=run_id,
                        stream=stream,
                    ) from None
                if rec.seq in payloads:
                    lines[i] = codec.padded(rec, crc_start, payloads[rec.seq], pad=pad, length=len(line))
                    erased.append((rec.id, payloads[rec.seq]))
            changed = len(erased)
            if changed:
                _replace_file(path, b"\n".join(lines), self._file_mode(), run_id)
            try:
                self._scrub_kept_cuts(handle.log, codec, dict(erased), pad, run_id)
            except JournalError as exc:
                exc.run_id, exc.stream = run_id, stream
                raise
        return changed

    def _scrub_kept_cuts(
        self,
        log: LineLog[Record],
        codec: RecordCodec,
        erased: Mapping[str, Mapping[str, Any]],
        pad: str,
        run_id: str,
    ) -> None:
        """What an erasure does to the bytes a cut of a poisoned end kept beside the stream
        (``.<stream>.jsonl.cut-<n>``): a copy of a rewritten record (its id: a retried keyed
        append has the id of the line cut) is rewritten as it was, and a line that is not a
        record (nothing can tell whose text it holds) is dropped; other records stay. (The caller
        names the run and stream on an error raised here.)"""
        folder = log.path.parent
        prefix = f".{log.path.name}.cut-"
        try:
            names = [e.name for e in os.scandir(folder) if e.name.startswith(prefix)]
        except OSError as exc:
            raise JournalUnwritable(f"cannot list {folder}: {exc.strerror or exc}", path=folder) from exc
        for name in sorted(names):
            kept = folder / name
            try:
                fd = open_regular(kept, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                chunks = []
                while chunk := os.read(fd, 1 << 20):
                    chunks.append(chunk)
            finally:
                os.close(fd)
            old = b"".join(chunks).split(b"\n")
            new_lines = []
            for line in old:
                try:
                    rec, crc_start = codec.decode_either(line)
                except LineDamaged:
                    continue
                if rec.id in erased:
                    line = codec.padded(rec, crc_start, erased[rec.id], pad=pad, length=len(line))  # noqa: PLW2901
                new_lines.append(line + b"\n")
            data = b"".join(new_lines)
            if data != b"\n".join(old):
                _replace_file(kept, data, self._file_mode(), run_id)

    def run(self, run_id: str) -> RunInfo:
        """Return the run (see ``JournalBackend``)."""
        self._check_open()
        return self._info(self._load(run_id))

    def runs(self) -> list[RunInfo]:
        """Return every run, newest first; a run whose ``begin`` never finished is not listed.

        Raises:
            JournalCorrupt: something in the runs folder is not a run (a link, a file, a name that
                is not a run id), or a run's ``run.json`` is damaged.
            JournalReadInterrupted: the folder could not be listed.
        """
        out = [self.run(name) for name in self.run_ids()]
        out.sort(key=lambda r: (r.created_ms, r.run_id), reverse=True)
        return out

    def run_ids(self) -> list[str]:
        """The id of every run, in no order, without reading any ``run.json`` or probing any lock
        (what ``runs`` lists, for a reader that needs only the ids); a run whose ``begin`` never
        finished is not listed.

        Raises:
            JournalCorrupt: something in the runs folder is not a run (a link, a file, a name that
                is not a run id).
            JournalReadInterrupted: the folder could not be listed.
        """
        self._check_open()
        directory = self._runs_dir()
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise read_failed(f"list {directory}", directory, exc) from exc
        out = []
        for name in names:
            if name.startswith("."):
                continue
            if not _STREAM_NAME.fullmatch(name) or ".." in name:
                raise JournalCorrupt(
                    f"{directory} holds {name!r}, which is not a run: move it out of the folder",
                    path=directory / name,
                    line=0,
                    reason="not a run id",
                )
            try:
                os.lstat(os.path.join(self._run_dir(name), "run.json"))
            except FileNotFoundError:
                self._refuse_headless(name)
                continue  # begin never finished
            except OSError as exc:
                raise read_failed(f"look at run {name}", directory / name, exc, run_id=name) from exc
            out.append(name)
        return out

    # -- lifecycle ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            check_open(True, self.location)

    def close(self) -> None:
        """Release every lease this object holds; safe to call twice."""
        self._closed = True
        for _, fd in self._held.values():
            os.close(fd)
        self._held.clear()
        with self._mutex:
            for handle in self._streams.values():
                handle.log.close()
        for run_id in list(self._pinned):
            self._unpin(run_id)
        for run_id in list(self._run_locks):
            self._close_run_lock(run_id)

    def __enter__(self) -> FileJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_IMPLEMENTS: type[JournalBackend] = FileJournal  # mypy checks that the class implements the interface
