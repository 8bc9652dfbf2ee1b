"""The file backend: the embedded default journal, on one machine's disk.

Layout under the journal's root directory::

    runs/<run-id>/run.json            the run (flow, scope, state, epoch, meta), replaced atomically
    runs/<run-id>/run.lock            the run lock: held briefly around every append and state change
    runs/<run-id>/lease.lock          held (flock) by the lease holder for as long as it drives the run
    runs/<run-id>/streams/<name>.jsonl one stream: a LineLog of checksummed, numbered records

The lease dies with its process because ``flock`` locks die with their open files: a crashed driver
is seen as ``interrupted`` at once. Fencing comes from the epoch stored in ``run.json``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson

from journal._errors import (
    JournalCorrupt,
    JournalError,
    JournalLeaseHeld,
    JournalLeaseLost,
    JournalNotResumable,
    JournalReadInterrupted,
    JournalRunNotFound,
    JournalUnwritable,
)
from journal._linelog import LineDamaged, LineLog
from journal._model import Lease, Record, RunInfo, RunState, check_name, record_id
from staging import HAVE_SYNCFS, StagingError, ensure_dir, stage

_CRC_TAIL = len(b',"crc":"00000000"}')
_LOCK_TIMEOUT_S = 30.0
_PINNED_RUNS = 64  # run.json files an append keeps open to fence cheaply (see _load_pinned)
_ACQUIRE_PATIENCE_S = 0.25  # how long a resumer waits out a reader's probe of the lease lock


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch (the default clock)."""
    return time.time_ns() // 1_000_000


class RecordCodec:
    """A stream line: canonical JSON of the record with a CRC-32 of the rest as its last key."""

    def __init__(self, run_id: str, stream: str) -> None:
        self._run_id = run_id
        self._stream = stream

    def encode(self, record: Record) -> bytes:
        """Encode ``record`` as ``{"id","key","payload","seq","ts","crc"}`` on one line."""
        body = orjson.dumps(
            {
                "id": record.id,
                "key": record.key,
                "payload": record.payload,
                "seq": record.seq,
                "ts": record.ts_ms,
            },
            option=orjson.OPT_SORT_KEYS,
        )
        return body[:-1] + b',"crc":"%08x"}' % zlib.crc32(body)

    def decode(self, line: bytes) -> Record:
        """Decode and verify a line; raise ``LineDamaged`` (torn=False on a checksum mismatch)."""
        if len(line) <= _CRC_TAIL or not line.endswith(b'"}') or line[-_CRC_TAIL:-10] != b',"crc":"':
            raise LineDamaged("not a checksummed record")
        body = line[:-_CRC_TAIL] + b"}"
        try:
            obj = orjson.loads(body)
            crc = int(line[-10:-2], 16)
        except (orjson.JSONDecodeError, ValueError):
            raise LineDamaged("not valid JSON") from None
        if zlib.crc32(body) != crc:
            raise LineDamaged("checksum mismatch", torn=False)
        try:
            return Record(
                run_id=self._run_id,
                stream=self._stream,
                seq=int(obj["seq"]),
                id=str(obj["id"]),
                key=obj["key"],
                ts_ms=int(obj["ts"]),
                payload=obj["payload"],
            )
        except (KeyError, TypeError, ValueError):
            raise LineDamaged("checksummed line without a record's fields", torn=False) from None


class _Stream:
    """A stream's log and its key index, kept up to date incrementally."""

    def __init__(self, path: Path, run_id: str, stream: str) -> None:
        self.log: LineLog[Record] = LineLog(
            path, RecordCodec(run_id, stream), sequence=lambda r: r.seq, keep_open=True
        )
        self.keys: dict[str, Record] = {}
        self.indexed = 0
        self.mutex = threading.Lock()  # held by the thread writing a batch
        self.queue_mutex = threading.Lock()
        self.queue: list[_Pending] = []  # appends waiting for the next batch

    def index(self, records: Sequence[Record]) -> None:
        if len(records) < self.indexed:  # the file was replaced: rebuild
            self.keys.clear()
            self.indexed = 0
        for rec in records[self.indexed :]:
            if rec.key is not None:
                self.keys.setdefault(rec.key, rec)
        self.indexed = len(records)


class _Pending:
    """One append waiting in a stream's queue, and what became of it."""

    __slots__ = ("done", "end", "error", "key", "lease", "payload", "record", "written")

    def __init__(self, lease: Lease, payload: Mapping[str, Any], key: str | None) -> None:
        self.lease, self.payload, self.key = lease, payload, key
        self.done = self.written = False
        self.record: Record | None = None
        self.end = 0
        self.error: BaseException | None = None


class FileJournal:
    """The journal on local files (see the module docstring for the layout).

    Args:
        root: the journal's directory; created on first write.
        clock: returns milliseconds since the epoch (inject one in tests).
    """

    def __init__(self, root: str | os.PathLike[str], *, clock: Callable[[], int] = now_ms) -> None:
        self._root = Path(root)
        self._clock = clock
        self._streams: dict[tuple[str, str], _Stream] = {}
        self._held: dict[str, tuple[int, int]] = {}  # run_id -> (epoch, lease lock fd)
        self._checked_dirs: set[str] = set()  # run dirs seen to be real directories, not links
        self._run_strs: dict[str, str] = {}
        self._mutex = threading.Lock()
        self._closed = False
        self._dev: int | None = None  # the root's file system, once seen
        self._pinned: dict[str, tuple[int, int, Mapping[str, Any]]] = {}  # run -> (fd, ino, run.json)

    # -- paths and files -----------------------------------------------------------------------

    @property
    def location(self) -> str:
        """The journal's root directory."""
        return str(self._root)

    @property
    def root(self) -> Path:
        """The journal's root directory."""
        return self._root

    def _run_dir(self, run_id: str) -> Path:
        path = self._root / "runs" / check_name("run id", run_id)
        if run_id in self._checked_dirs:
            return path
        if path.is_dir() and not path.is_symlink():
            self._checked_dirs.add(run_id)
        elif path.is_symlink():  # a link planted in the store is never followed
            raise JournalCorrupt(
                f"{path} is a symbolic link; the journal never follows links: remove it",
                path=path,
                line=0,
                reason="symbolic link",
                run_id=run_id,
            )
        return path

    def stream_path(self, run_id: str, stream: str) -> Path:
        """The file that holds ``stream`` of ``run_id``."""
        return self._run_dir(run_id) / "streams" / f"{check_name('stream name', stream)}.jsonl"

    def _stream(self, run_id: str, stream: str) -> _Stream:
        key = (run_id, stream)
        with self._mutex:
            found = self._streams.get(key)
            if found is None:
                found = self._streams[key] = _Stream(self.stream_path(run_id, stream), run_id, stream)
            return found

    def _run_file(self, run_id: str, name: str) -> str:
        """``<run dir>/<name>`` as a string, for the hot path (pathlib costs more than the syscall)."""
        base = self._run_strs.get(run_id)
        if base is None:
            base = str(self._run_dir(run_id))
            if run_id in self._checked_dirs:
                self._run_strs[run_id] = base
        return base + os.sep + name

    @contextlib.contextmanager
    def _run_lock(self, run_id: str) -> Iterator[None]:
        path = self._run_file(run_id, "run.lock")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except FileNotFoundError:
            raise JournalRunNotFound(f"no root run {run_id} in {self._root}", run_id=run_id) from None
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot open {path}: {exc.strerror or exc}", run_id=run_id, path=path
            ) from exc
        try:
            # fcntl.flock, not portalocker, on this one hot path: the same flock(2), without the
            # wrapper's per-call cost, which is a measurable share of a learn.
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the file releases the flock

    def _load(self, run_id: str) -> dict[str, Any]:
        path = self._run_file(run_id, "run.json")
        # Read afresh: the fence must see the epoch another process just wrote (``_load_pinned``
        # skips the read only while the path names the very file it holds open).
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                data = self._read_all(fd)
            finally:
                os.close(fd)
        except FileNotFoundError:
            raise JournalRunNotFound(f"no root run {run_id} in {self._root}", run_id=run_id) from None
        except OSError as exc:
            raise JournalReadInterrupted(
                f"cannot read {path}: {exc.strerror or exc}", run_id=run_id, path=path
            ) from exc
        return self._parse_run(run_id, path, data)

    @staticmethod
    def _read_all(fd: int) -> bytes:
        chunks = [os.read(fd, 65536)]
        while len(chunks[-1]) == 65536:  # a large meta: read on to the end
            chunks.append(os.read(fd, 65536))
        return b"".join(chunks)

    @staticmethod
    def _parse_run(run_id: str, path: str, data: bytes) -> dict[str, Any]:
        try:
            obj = orjson.loads(data)
            if not isinstance(obj, dict) or obj.get("runId") != run_id:
                raise ValueError("not this run's record")
            return obj
        except (orjson.JSONDecodeError, ValueError) as exc:
            raise JournalCorrupt(
                f"{path} is damaged ({exc}); restore it or inspect it with `flows check`",
                path=path,
                line=1,
                reason=str(exc),
                run_id=run_id,
            ) from None

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
                if os.stat(path).st_ino == pinned[1]:
                    return pinned[2]
            except OSError:
                pass  # gone or unreadable: _load below says which
            self._unpin(run_id)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return self._load(run_id)  # raises the right error, or reads a file just replaced
        try:
            ino = os.fstat(fd).st_ino
            obj = self._parse_run(run_id, path, self._read_all(fd))
        except OSError as exc:
            os.close(fd)
            raise JournalReadInterrupted(
                f"cannot read {path}: {exc.strerror or exc}", run_id=run_id, path=path
            ) from exc
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
        directory = self._run_dir(run_id)
        try:
            staged = stage(directory, orjson.dumps(obj, option=orjson.OPT_SORT_KEYS), 0o600, hint="run.json")
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
            epoch=int(obj["epoch"]),
            created_ms=int(obj["createdMs"]),
            updated_ms=int(obj["updatedMs"]),
            meta=obj.get("meta") or {},
            error=obj.get("error"),
        )

    def _holder_alive(self, run_id: str) -> bool:
        if run_id in self._held:
            return True
        path = self._run_dir(run_id) / "lease.lock"
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return False
        import portalocker  # imported by the lock paths only: a read-only command never pays for it

        try:
            portalocker.lock(fd, portalocker.LockFlags.SHARED | portalocker.LockFlags.NON_BLOCKING)
        except portalocker.exceptions.LockException:
            return True
        finally:
            os.close(fd)
        return False

    # -- leases ------------------------------------------------------------------------------

    def _take_lease_lock(self, run_id: str) -> int:
        path = self._run_dir(run_id) / "lease.lock"
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot open {path}: {exc.strerror or exc}", run_id=run_id, path=path
            ) from exc
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
        """Create a running root run and return it with its first lease (see ``JournalBackend``)."""
        self._check_open()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._clock() / 1000))
        run_id = f"{stamp}-{secrets.token_hex(5)}"
        directory = self._run_dir(run_id)
        try:
            ensure_dir(directory / "streams")
        except OSError as exc:
            raise JournalUnwritable(
                f"cannot create {directory}: {exc.strerror or exc}", run_id=run_id, path=directory
            ) from exc
        fd = self._take_lease_lock(run_id)
        now = self._clock()
        obj = {
            "runId": run_id,
            "flow": flow,
            "scope": scope,
            "state": RunState.RUNNING.value,
            "epoch": 1,
            "createdMs": now,
            "updatedMs": now,
            "meta": dict(meta),
            "error": None,
        }
        try:
            self._store(run_id, obj)
        except JournalError:
            os.close(fd)
            raise
        self._held[run_id] = (1, fd)
        return self._info(obj), Lease(run_id, 1)

    def acquire(self, run_id: str) -> Lease:
        """Take over a failed or interrupted run with a new epoch (see ``JournalBackend``)."""
        self._check_open()
        if run_id in self._held:
            raise JournalLeaseHeld(f"root run {run_id} is already driven by this process", run_id=run_id)
        self._load(run_id)  # JournalRunNotFound before touching anything
        fd = self._take_lease_lock(run_id)
        try:
            with self._run_lock(run_id):
                obj = self._load(run_id)
                if obj["state"] == RunState.DONE.value:
                    raise JournalNotResumable(
                        f"root run {run_id} is done; there is nothing to resume", run_id=run_id
                    )
                obj.update(
                    state=RunState.RUNNING.value,
                    epoch=int(obj["epoch"]) + 1,
                    updatedMs=self._clock(),
                    error=None,
                )
                self._store(run_id, obj)
        except BaseException:
            os.close(fd)
            raise
        self._held[run_id] = (obj["epoch"], fd)
        return Lease(run_id, obj["epoch"])

    def _fence(self, obj: Mapping[str, Any], lease: Lease) -> None:
        if int(obj["epoch"]) != lease.epoch or obj["state"] != RunState.RUNNING.value:
            raise JournalLeaseLost(
                f"the lease on root run {lease.run_id} (epoch {lease.epoch}) was lost: the run is now "
                f"{obj['state']} at epoch {obj['epoch']}; resume it to continue",
                expected=int(obj["epoch"]),
                got=lease.epoch,
                run_id=lease.run_id,
            )

    def finish(self, lease: Lease, state: RunState, error: Mapping[str, Any] | None = None) -> RunInfo:
        """Record ``done`` or ``failed`` and release the lease (see ``JournalBackend``)."""
        if state not in (RunState.DONE, RunState.FAILED):
            raise ValueError(f"a run finishes done or failed, not {state}")
        with self._run_lock(lease.run_id):
            obj = self._load(lease.run_id)
            self._fence(obj, lease)
            obj.update(state=state.value, updatedMs=self._clock(), error=dict(error) if error else None)
            self._store(lease.run_id, obj)
        self.release(lease)
        return self._info(obj)

    def release(self, lease: Lease) -> None:
        """Let go of the lease lock (the run then reads interrupted if still running)."""
        held = self._held.get(lease.run_id)
        if held is not None and held[0] == lease.epoch:
            del self._held[lease.run_id]
            os.close(held[1])

    # -- streams -----------------------------------------------------------------------------

    def shares_filesystem(self, path: str) -> bool:
        """True where ``syncfs`` exists and ``path`` is on the journal's file system (see
        ``JournalBackend``); False when either cannot be told (a missing path, say)."""
        if not HAVE_SYNCFS:
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

        Group commit: the line is written under the run lock, but fsync'd after the lock is let go,
        so appenders in other threads and processes overlap their fsyncs and one fsync can cover
        several lines. The call still returns only once its record (or, for a key already in the
        stream, the existing record) is durable. With ``sync_filesystem`` the sync is a ``syncfs``
        of the journal's file system (shared the same way), which also covers the files the caller
        wrote before the call.
        """
        self._check_open()
        if sync_filesystem and not HAVE_SYNCFS:
            raise ValueError("sync_filesystem needs syncfs, which this platform lacks")
        handle = self._stream(lease.run_id, stream)
        mine = _Pending(lease, payload, key)
        try:
            with handle.queue_mutex:
                handle.queue.append(mine)
            with handle.mutex:
                if not mine.done:  # leader: write every waiting append, in order, under one lock
                    with handle.queue_mutex:
                        batch, handle.queue = handle.queue, []
                    self._write_batch(handle, lease.run_id, stream, batch)
            if mine.error is not None:
                raise mine.error
            record, end = mine.record, mine.end
            assert record is not None
            try:
                if mine.written or not sync_filesystem:
                    handle.log.sync_to(end, filesystem=sync_filesystem)
                else:  # nothing of ours in the log: a syncfs that begins now covers the caller's
                    handle.log.sync_now(filesystem=True)  # files and the record (written before)
            except JournalError:
                if mine.written:
                    self._unwrite(lease.run_id, handle, end)
                raise
        except JournalError as exc:
            exc.run_id, exc.stream = lease.run_id, stream
            raise
        return record

    def _resolve(self, handle: _Stream, obj: Mapping[str, Any], p: _Pending, stream: str, seq: int) -> None:
        """Fence ``p`` and give it its record: the one its key already has, or a new one at ``seq``."""
        try:
            self._fence(obj, p.lease)
        except JournalError as exc:
            p.error = exc
            return
        run_id = p.lease.run_id
        if p.key is not None and p.key in handle.keys:
            p.record = handle.keys[p.key]  # maybe another appender's, not yet durable
            return
        p.record = Record(
            run_id=run_id,
            stream=stream,
            seq=seq,
            id=secrets.token_hex(8) if p.key is None else record_id(run_id, stream, p.key),
            key=p.key,
            ts_ms=self._clock(),
            payload=dict(p.payload),
        )
        p.written = True
        if p.key is not None:
            handle.keys[p.key] = p.record

    def _write_batch(self, handle: _Stream, run_id: str, stream: str, batch: list[_Pending]) -> None:
        """Under the run lock once: fence each pending append, resolve keys already present, and
        write the new records with one ``write`` (group commit's other half: threads of this
        process that queued while another wrote share its lock and its write)."""
        try:
            with self._run_lock(run_id):
                obj = self._load_pinned(run_id)
                with handle.log.held():
                    records = handle.log.recover()
                    handle.index(records)
                    new: list[Record] = []
                    for p in batch:
                        self._resolve(handle, obj, p, stream, len(records) + len(new) + 1)
                        if p.written and p.record is not None:
                            new.append(p.record)
                    end = handle.log.write(new) if new else handle.log.end()
                    handle.indexed += len(new)
                    for p in batch:
                        p.end = end
        except BaseException as exc:  # a journal error, or a payload that is not JSON: each caller's
            handle.keys.clear()  # keys may have been given to records never written: rebuild
            handle.indexed = 0
            for p in batch:
                if p.error is None:
                    p.error, p.written = exc, False
            if not isinstance(exc, Exception):
                raise
        finally:
            for p in batch:
                p.done = True

    def _unwrite(self, run_id: str, handle: _Stream, end: int) -> None:
        """After a failed fsync, take the record back out if it still ends the stream."""
        with contextlib.suppress(JournalError), handle.mutex, self._run_lock(run_id), handle.log.held():
            if handle.log.unwrite(1, end):
                handle.keys.clear()  # rebuilt from the log on the next append
                handle.indexed = 0

    def read(self, run_id: str, stream: str) -> Sequence[Record]:
        """Return the stream's records in order (see ``JournalBackend``)."""
        self._check_open()
        handle = self._stream(run_id, stream)
        if run_id not in self._checked_dirs and not self._run_dir(run_id).is_dir():
            raise JournalRunNotFound(f"no root run {run_id} in {self._root}", run_id=run_id)
        try:
            return handle.log.read()
        except JournalError as exc:
            exc.run_id, exc.stream = run_id, stream
            raise

    def find(self, run_id: str, stream: str, key: str) -> Record | None:
        """Return the record appended with ``key``, or None (see ``JournalBackend``)."""
        handle = self._stream(run_id, stream)
        records = self.read(run_id, stream)
        with handle.mutex:
            handle.index(records)
            return handle.keys.get(key)

    def streams(self, run_id: str) -> list[str]:
        """Return the run's non-empty stream names, sorted."""
        directory = self._run_dir(run_id) / "streams"
        if not self._run_dir(run_id).is_dir():
            raise JournalRunNotFound(f"no root run {run_id} in {self._root}", run_id=run_id)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return []
        return sorted(
            n[: -len(".jsonl")] for n in names if n.endswith(".jsonl") and (directory / n).stat().st_size > 0
        )

    def run(self, run_id: str) -> RunInfo:
        """Return the run (see ``JournalBackend``)."""
        self._check_open()
        return self._info(self._load(run_id))

    def runs(self) -> list[RunInfo]:
        """Return every run, newest first; a run whose ``begin`` never finished is not listed."""
        self._check_open()
        try:
            names = os.listdir(self._root / "runs")
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            if name.startswith(".") or not (self._root / "runs" / name / "run.json").exists():
                continue
            out.append(self.run(name))
        out.sort(key=lambda r: (r.created_ms, r.run_id), reverse=True)
        return out

    # -- lifecycle ---------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this journal is closed")

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

    def __enter__(self) -> FileJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
