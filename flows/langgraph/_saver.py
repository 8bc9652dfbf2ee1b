"""``JournalSaver``: LangGraph's checkpointer interface, journal-first on the flows journal.

Mapping (docs/LANGGRAPH.md has the whole story):

* a thread is a root run (flow ``langgraph-thread``) per *generation*; the catalog (``_catalog``)
  says which run holds a thread's current generation;
* ``put``, ``put_writes`` and the tombstones are records of that run's ``checkpoints`` stream
  (``_records``), appended under the run's lease (``_leases``) and durable before the call returns;
* reads fold the stream into an index (``ThreadIndex``), kept per process and brought up to date
  from the journal on every read, unless this process holds the thread's lease at the journal's
  current epoch (then nobody else can have appended, and the index is already current);
* ``delete_thread`` appends a tombstone and moves the thread to a new, empty generation;
  ``prune(keep_latest)`` compacts: the kept checkpoints are copied into a new run, which becomes the
  next generation; ``delete_for_runs`` appends a tombstone in place.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import heapq
import random
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar
from uuid import UUID

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from flows.langgraph._catalog import SCOPE, THREAD_FLOW, Catalog, Generation
from flows.langgraph._conn import Opening
from flows.langgraph._errors import (
    ConfigInvalid,
    RecordInvalid,
    ValueTooLarge,
    ValueUnserializable,
    checked_count,
    checked_seconds,
)
from flows.langgraph._filters import at_path, check_filter
from flows.langgraph._leases import ThreadLeases
from flows.langgraph._lifetime import Lifetime
from flows.langgraph._records import (
    STREAM,
    StoredCheckpoint,
    ThreadIndex,
    Typed,
    checkpoint_problem,
    metadata_problem,
    pack,
    payload_problem,
)
from flows.langgraph._serde import Refused, StrictDecoder
from journal import (
    MAX_PAYLOAD_BYTES,
    JournalBackend,
    JournalLeaseLost,
    JournalNotResumable,
    Lease,
    Record,
    RunState,
    open_journal,
)
from memory import resolve_db, resolve_journal

T = TypeVar("T")

DEFAULT_MAX_RECORD_BYTES = 16 * 1024 * 1024
_ATTEMPTS = 4  # a write re-resolves the thread this often when its generation moved under it
_CHECKED_MAX = 65_536  # stored checkpoints remembered as checked (``_shape_checked``); then all forgotten
Payload = dict[str, Any]
Keyed = list[tuple[Payload, str]]  # records to append, each with its idempotency key
Records = list[Record]
Tuples = list[CheckpointTuple]
StoredList = list[StoredCheckpoint]


@dataclass(frozen=True)
class Citation:
    """The journal record a checkpoint came from: its run, stream, id, sequence number and the
    time it was committed (ms since the epoch)."""

    run_id: str
    stream: str
    id: str
    seq: int
    committed_ms: int

    def as_json(self) -> dict[str, Any]:
        """``{"runId", "stream", "id", "seq", "committedMs"}``."""
        return {
            "runId": self.run_id,
            "stream": self.stream,
            "id": self.id,
            "seq": self.seq,
            "committedMs": self.committed_ms,
        }

    @classmethod
    def of(cls, record: Record) -> Citation:
        """The citation of ``record``."""
        return cls(record.run_id, record.stream, record.id, record.seq, record.ts_ms)


@dataclass
class _Hold:
    """A lease in use by one operation: ``fresh`` when acquired for it, ``wrote`` once it appended."""

    lease: Lease
    fresh: bool
    wrote: bool = False


class _Thread:
    """This process's view of one thread: its generation, the index of it, and a lock."""

    def __init__(self, thread_id: str) -> None:
        self.thread_id = thread_id
        self.gen: Generation | None = None
        self.index = ThreadIndex()
        self.mutex = threading.RLock()
        # the journal's tokens taken before the read that made ``index`` current (``_stamp``)
        self.stamp: tuple[object, ...] | None = None

    def reset(self, gen: Generation | None = None) -> None:
        self.gen = gen
        self.index = ThreadIndex()
        self.stamp = None


_THREAD_ID_TYPES = (str, int, UUID)
_new_tuple: Callable[[type[CheckpointTuple], tuple[Any, ...]], CheckpointTuple] = tuple.__new__


def _thread_id(config: RunnableConfig | None, what: str = "config") -> str:
    if type(config) is dict:  # what LangGraph passes: told without the Mapping ABC's checks
        configurable = config.get("configurable")
        if type(configurable) is dict:
            value = configurable.get("thread_id")
            if type(value) is str:
                return value
    if config is not None and not isinstance(config, Mapping):
        raise ConfigInvalid(
            f"a {what} is a RunnableConfig (a dict), not {type(config).__name__} {config!r:.80}"
        )
    configurable = (config or {}).get("configurable") or {}
    if not isinstance(configurable, Mapping):
        raise ConfigInvalid(
            f"the {what}'s configurable is a dict, not {type(configurable).__name__} {configurable!r:.80}"
        )
    value = configurable.get("thread_id")
    if isinstance(value, bool) or not isinstance(value, _THREAD_ID_TYPES):
        raise ConfigInvalid(
            f"the {what} has no usable configurable.thread_id (got {value!r}): pass "
            '{"configurable": {"thread_id": "..."}}'
        )
    return str(value)


def _namespace(config: RunnableConfig) -> str:
    ns = (config.get("configurable") or {}).get("checkpoint_ns", "")
    if not isinstance(ns, str):
        raise ConfigInvalid(f"configurable.checkpoint_ns must be a string, not {ns!r}")
    return ns


def _since_tombstone(t: _Thread, key: str) -> str:
    """``key`` for a record appended now: past a tombstone in the stream, a key of its own, so the
    journal never answers the write with an identical record the tombstone dropped (the write would
    be lost). Before any tombstone, and for a retry after the same one, the key is the same."""
    mark = t.index.tombstone
    if mark is None:
        return key
    return key[:2] + hashlib.blake2b(f"{key}|{mark}".encode(), digest_size=16).hexdigest()


def _ids(values: Any, what: str) -> list[Any]:
    """``values`` as a list of ids: a string or bytes is refused (``ConfigInvalid``), since iterating
    it would name each of its characters: ``prune("t-1", strategy="delete")`` would delete the
    threads "t", "-" and "1"."""
    if isinstance(values, str | bytes | bytearray) or not isinstance(values, Iterable):
        raise ConfigInvalid(
            f"{what} are a list of ids, not {type(values).__name__} {values!r:.80}: pass [{values!r:.80}]"
        )
    return list(values)


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


class JournalSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer whose every checkpoint and pending write is a journal record.

    ``graph = builder.compile(checkpointer=JournalSaver())`` is the whole switch.

    Args:
        db: the history DB path whose folder holds the default file journal (default:
            ``$FLOWS_DB``, else ``$XDG_DATA_HOME/flows/history.db``).
        journal: the journal location: a directory, or ``postgresql://…`` for several hosts
            (default: ``$FLOWS_JOURNAL``, else ``<db-dir>/flows-journal``).
        serde: LangGraph's serializer for writing (default: its ``JsonPlusSerializer``). Reads
            never let the bytes choose code: every type a msgpack value names is checked against
            LangGraph's strict allow-list plus ``allowed_types`` first (see ``_serde``).
        allowed_types: classes (or ``(module, name)`` pairs) of your own that checkpoints may
            hold, beside LangGraph's safe list (datetimes, UUIDs, sets, LangChain messages …).
        lease_idle_s: let go of a thread's lease after this long without a write.
        lease_wait_s: how long a write waits for another live process to let go of the thread.
        max_record_bytes: the largest record one call may append (``ValueTooLarge`` past it), at
            most the journal's own bound, ``journal.MAX_PAYLOAD_BYTES`` (16 MiB, the default).
        max_workers: threads of the executor the async methods run on.

    Every method raises the journal's own errors unchanged (``journal_lease_lost`` when another
    process took the thread over, ``journal_unavailable`` …), ``ConfigInvalid`` for a config
    without a thread id, ``ValueUnserializable`` / ``ValueTooLarge`` before anything is written,
    and ``RecordInvalid`` for a record of the thread's stream that this saver did not write.
    The saver is a context manager; ``close()`` is safe twice.
    """

    def __init__(
        self,
        db: str | None = None,
        journal: str | None = None,
        *,
        serde: SerializerProtocol | None = None,
        allowed_types: Sequence[tuple[str, str] | type] = (),
        lease_idle_s: float = 5.0,
        lease_wait_s: float = 30.0,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        max_workers: int = 8,
        max_cached_threads: int = 1024,
    ) -> None:
        # every setting is checked before anything is opened: a bad one is refused here, not at
        # the first put (after it wrote) or the first async call
        lease_idle_s = checked_seconds("lease_idle_s", lease_idle_s)
        lease_wait_s = checked_seconds("lease_wait_s", lease_wait_s)
        checked_count("max_record_bytes", max_record_bytes, 1, MAX_PAYLOAD_BYTES)
        checked_count("max_workers", max_workers, 1)
        checked_count("max_cached_threads", max_cached_threads, 1)
        super().__init__(serde=serde)
        self._decoder = StrictDecoder(allowed_types, serde=self.serde if serde is not None else None)
        self.journal_location = resolve_journal(resolve_db(db), journal)
        self._backend: JournalBackend = open_journal(self.journal_location)
        self._catalog = Catalog(self._backend)
        self._leases = ThreadLeases(self._backend, idle_s=lease_idle_s, wait_s=lease_wait_s)
        self._lease_wait_s = lease_wait_s
        self._max_record_bytes = max_record_bytes
        self._max_cached = max_cached_threads
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        # the stored checkpoints whose decoded fields passed ``checkpoint_problem`` and
        # ``metadata_problem``, with the decoder that decoded them (``_shape_checked``)
        self._checked: dict[tuple[int, int], tuple[StoredCheckpoint, StrictDecoder]] = {}
        self._mutex = threading.Lock()
        # shared with every ``with_allowlist`` view
        self._life = Lifetime("JournalSaver", max_workers, "langgraph-saver")

    # -- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def from_conn_string(cls, conn_string: str, **kwargs: Any) -> Opening[JournalSaver]:
        """A context manager (``with`` or ``async with``) giving a ``JournalSaver`` on ``conn_string``,
        closed when the context ends: LangGraph's ``from_conn_string``, so switching from its
        SQLite or PostgreSQL classes is a change of class name.

        Args:
            conn_string: ``postgresql://…`` (the journal), ``:memory:`` (a temporary store removed
                at the end), or a path: the history DB, with the journal beside it.
            kwargs: the constructor's other keyword arguments (``db=`` names the history DB
                for a ``postgresql://`` string, which names only the journal).

        Raises:
            ConfigInvalid: an empty or non-string ``conn_string``; and what the constructor raises.
        """
        history = kwargs.pop("db", None)  # the history DB beside a postgresql:// journal
        return Opening(conn_string, lambda db, journal: cls(db or history, journal, **kwargs))

    def setup(self) -> None:
        """Nothing to set up: the journal and the memory are made as they are first used. Kept so
        code written for LangGraph's SQL classes runs unchanged; raises JournalClosed after close."""
        self._check_open()

    async def asetup(self) -> None:
        """``setup`` (nothing to do), for code written for LangGraph's async classes."""
        self.setup()

    def close(self) -> None:
        """Let go of every lease, close the journal and the executor; safe twice. A ``with_allowlist``
        view shares all of it: closing either closes both."""
        if not self._life.close():
            return
        self._leases.close()
        self._backend.close()

    def __enter__(self) -> JournalSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> JournalSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        executor = self._life.executor()
        return await asyncio.get_running_loop().run_in_executor(executor, partial(fn, *args, **kwargs))

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> JournalSaver:
        """A view of this saver whose reads also allow the ``(module, name)`` types listed: what
        LangGraph's strict mode (``LANGGRAPH_STRICT_MSGPACK=true``) passes at ``compile`` for the
        types in the graph's state schema. The view shares the journal, the threads, the executor
        the async methods run on and the open/closed state: closing either closes both."""
        pairs = [(str(e[0]), str(e[1])) for e in extra_allowlist if isinstance(e, tuple) and len(e) >= 2]
        if not pairs:
            return self
        view = copy.copy(self)
        view._decoder = self._decoder.extended(pairs)
        return view

    @property
    def backend(self) -> JournalBackend:
        """The journal this saver writes to."""
        return self._backend

    # -- views of threads ----------------------------------------------------------------------

    def _check_open(self) -> None:
        self._life.check_open()

    def _thread(self, thread_id: str) -> _Thread:
        if self._life.closed:
            self._check_open()
        with self._mutex:
            found = self._threads.get(thread_id)
            if found is None:
                found = self._threads[thread_id] = _Thread(thread_id)
                self._evict()
            else:
                self._threads.move_to_end(thread_id)
            return found

    def _evict(self) -> None:
        for thread_id in list(self._threads)[: max(0, len(self._threads) - self._max_cached)]:
            t = self._threads[thread_id]
            runs = t.gen.runs if t.gen else ()
            if any(self._leases.holds(r) for r in runs) or not t.mutex.acquire(blocking=False):
                continue
            try:
                del self._threads[thread_id]
            finally:
                t.mutex.release()

    def _authoritative(self, t: _Thread) -> bool:
        """True when this process holds the thread's only run at the journal's current epoch: no
        one else can have appended since, so the index is current without reading."""
        if t.gen is None or len(t.gen.runs) != 1:
            return False
        lease = self._leases.holds(t.gen.runs[0])
        if lease is None:
            return False
        info = self._backend.run(lease.run_id)
        return info.epoch == lease.epoch and info.state in (RunState.RUNNING, RunState.INTERRUPTED)

    def _stamp(self, t: _Thread) -> tuple[object, ...] | None:
        """The journal's tokens for everything ``_refresh`` reads for ``t``: the catalogs and the
        streams of its generation's runs (``JournalBackend.stamp``); None when one cannot be had."""
        gen = t.gen
        if gen is None or not gen.runs:
            return None
        catalogs = self._catalog.stamp()
        if catalogs is None:
            return None
        if len(gen.runs) == 1:  # the usual generation: one run
            token = self._backend.stamp(gen.runs[0], STREAM)
            return None if token is None else (gen, catalogs, token)
        out: list[object] = [gen, catalogs]
        for run in gen.runs:
            token = self._backend.stamp(run, STREAM)
            if token is None:
                return None
            out.append(token)
        return tuple(out)

    def _refresh(self, t: _Thread) -> None:
        """Bring ``t`` up to date with the journal (call with ``t.mutex`` held).

        A thread whose catalogs and stream give the tokens they gave before its last refresh read
        them is current without reading: nothing those reads saw has changed since (one ``lstat``
        and one read of the marks per file, on the file journal)."""
        if self._authoritative(t):
            return
        stamp = self._stamp(t)  # before reading: a change after it makes the next token differ
        if stamp is not None and stamp == t.stamp:
            return
        t.stamp = None
        for _ in range(_ATTEMPTS):
            gen = self._catalog.current(t.thread_id)
            if gen != t.gen:
                t.reset(gen)
            if gen is None or not gen.runs:
                return
            self._read(t, gen)
            if t.index.compacted_into is None:
                t.stamp = stamp  # names the generation it was taken for: another one never matches
                return
            # pruned into a newer generation, registered before the tombstone was written: look again
            if self._catalog.current(t.thread_id) == gen:
                self._catalog.relist()
        raise RecordInvalid(
            f"thread {t.thread_id!r} says it was compacted into run {t.index.compacted_into}, but no "
            "catalog registers that run; inspect the catalog with `flows runs`",
            thread_id=t.thread_id,
        )

    def _read(self, t: _Thread, gen: Generation) -> None:
        if len(gen.runs) == 1:
            t.index.apply_all(self._backend.read(gen.runs[0], STREAM))
            return
        # Two runs for one generation (two catalogs raced): merge by commit time, from scratch.
        streams = [list(self._backend.read(run, STREAM)) for run in gen.runs]
        t.index = ThreadIndex()
        for rec in heapq.merge(*streams, key=lambda r: r.ts_ms):
            t.index.apply(rec)

    def _view(self, thread_id: str) -> _Thread:
        t = self._thread(thread_id)
        with t.mutex:
            self._refresh(t)
        return t

    # -- writing -------------------------------------------------------------------------------

    def _encode(self, payload: Payload, thread_id: str, what: str) -> str:
        """Check the record's size, and that the readers will take it as it is read back, and
        return its key (a digest of its canonical bytes)."""
        try:
            data = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
        except TypeError as exc:  # a lone surrogate, an integer past 64 bits, in an id or a name
            raise ValueUnserializable(
                f"{what} of thread {thread_id!r:.120} cannot be a journal record ({exc}): ids, "
                "namespaces, channel names, task ids and versions must be valid UTF-8 strings (or, "
                "for versions, numbers within 64 bits)",
                thread_id=thread_id,
            ) from exc
        if len(data) > self._max_record_bytes:
            raise ValueTooLarge(
                f"{what} of thread {thread_id!r} needs a {len(data):,}-byte record, over the "
                f"{self._max_record_bytes:,}-byte bound; store large values elsewhere and keep a "
                "reference in the state"
                + (", or raise max_record_bytes" if self._max_record_bytes < MAX_PAYLOAD_BYTES else ""),
                size=len(data),
                limit=self._max_record_bytes,
                thread_id=thread_id,
            )
        problem = payload_problem(orjson.loads(data))  # what readers get back: NaN is null there
        if problem is not None:
            raise ConfigInvalid(
                f"{what} of thread {thread_id!r:.120} would be a record no reader takes ({problem}): "
                "a checkpoint id, checkpoint_id and task id are strings, and a channel version is "
                "a string or a number; nothing was written",
                thread_id=thread_id,
            )
        return str(payload["kind"])[0] + "-" + hashlib.blake2b(data, digest_size=16).hexdigest()

    def _dump(self, value: Any, what: str, thread_id: str) -> Typed:
        try:
            return self.serde.dumps_typed(value)
        except TypeError as exc:
            raise ValueUnserializable(
                f"LangGraph's serializer cannot encode {what} of thread {thread_id!r} ({exc}); "
                "store only values it supports (JSON types, pydantic models, dataclasses, LangChain "
                "messages …) or pass a serde that handles this type",
                thread_id=thread_id,
            ) from exc

    def _append_own(self, t: _Thread, hold: _Hold, payloads: Sequence[tuple[Payload, str]]) -> Records:
        t.stamp = None
        out = []
        for payload, key in payloads:
            rec = self._backend.append(hold.lease, STREAM, payload, key=key)
            hold.wrote = True
            seen = t.index.seen.get(rec.run_id, 0)
            if rec.seq == seen + 1:
                t.index.apply(rec)
            elif rec.seq > seen + 1:  # someone appended without the lease: read what we missed
                t.index.apply_all(self._backend.read(rec.run_id, STREAM))
            out.append(rec)
        return out

    def _new_generation(self, t: _Thread, reason: str) -> bool:
        """Begin a run for the thread's next generation and register it; False if another process
        registered that generation first (then ours is finished unused)."""
        number = (t.gen.gen if t.gen else 0) + 1
        info, lease = self._backend.begin(
            THREAD_FLOW, SCOPE, {"langgraph": {"thread": t.thread_id, "generation": number}}
        )
        try:
            reg = self._catalog.register(t.thread_id, number, info.run_id, reason)
        except BaseException:
            self._backend.release(lease)
            raise
        if reg.run_id != info.run_id:
            self._leases.retire(
                lease,
                {
                    "code": "langgraph_thread_race",
                    "message": f"generation {number} of the thread was registered by run {reg.run_id} first",
                },
            )
            t.reset()
            return False
        self._leases.adopt(lease)
        t.reset(Generation(t.thread_id, number, (info.run_id,)))
        return True

    def _write(
        self,
        thread_id: str,
        build: Callable[[_Thread], Sequence[tuple[Payload, str]]],
        *,
        create: bool,
        reason: str = "put",
    ) -> Records:
        """Append what ``build`` makes from the up-to-date thread, under the thread's lease.

        ``build`` runs after the lease is held and the index is current, so it sees every record.
        With ``create``, a thread without a live generation gets a new one first.
        """
        done = self._locked(
            thread_id, lambda t, hold: self._append_own(t, hold, build(t)), create=create, reason=reason
        )
        return done or []

    def _locked(
        self, thread_id: str, act: Callable[[_Thread, _Hold], T], *, create: bool, reason: str = "put"
    ) -> T | None:
        """Run ``act`` on the up-to-date thread while holding the lease of its current run.

        Returns None, without acting, for a thread with no live generation unless ``create``.
        A lease taken by another process before ``act`` appended anything with it is waited for
        again (as if it had never been granted; nothing was written with it); taken after,
        the journal's ``JournalLeaseLost`` is raised: this process was fenced out.
        """
        t = self._thread(thread_id)
        deadline = time.monotonic() + self._lease_wait_s
        moved = 0
        with t.mutex:
            while moved < _ATTEMPTS:
                self._refresh(t)
                if t.gen is None or not t.gen.runs:
                    if not create:
                        return None
                    if not self._new_generation(t, reason):
                        moved += 1
                        continue
                assert t.gen is not None
                run_id = t.gen.runs[0]
                hold: _Hold | None = None
                try:
                    with self._leases.using(run_id) as (lease, fresh):
                        hold = _Hold(lease, fresh)
                        if not fresh or self._confirm(t):
                            return act(t, hold)
                        moved += 1
                except JournalNotResumable:  # the run was retired (deleted, compacted) meanwhile
                    t.reset()
                    moved += 1
                except JournalLeaseLost:
                    self._leases.drop(run_id)
                    t.reset()
                    if hold is None or hold.wrote or not hold.fresh or time.monotonic() > deadline:
                        raise
            raise JournalLeaseLost(
                f"thread {thread_id!r} kept moving to a new generation while this process tried to "
                "write it; another process is deleting or pruning it: retry",
                expected=0,
                got=0,
                run_id=t.gen.runs[0] if t.gen and t.gen.runs else None,
            )

    def _confirm(self, t: _Thread) -> bool:
        """Just after acquiring: is the run still the thread's current generation? Re-read it."""
        gen = self._catalog.current(t.thread_id)
        if gen != t.gen or gen is None:
            t.reset()
            return False
        self._read(t, gen)
        return t.index.compacted_into is None

    # -- the checkpointer interface ------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (``checkpoint_id``), or the thread's latest in its
        namespace; None when there is none. Pending writes come in LangGraph's replay order."""
        thread_id = _thread_id(config)
        configurable = config["configurable"]  # a dict: ``_thread_id`` found its thread_id there
        ns = configurable.get("checkpoint_ns", "")
        if type(ns) is not str:
            ns = _namespace(config)
        checkpoint_id = configurable.get("checkpoint_id")
        t = self._thread(thread_id)
        with t.mutex:
            self._refresh(t)
            stored = t.index.get(ns, checkpoint_id) if checkpoint_id else t.index.latest(ns)
            return None if stored is None else self._tuple(t, stored)

    def _load(
        self,
        typed: Typed,
        stored: StoredCheckpoint,
        what: str,
        shape: type | None = None,
        rec: Record | None = None,
        *,
        name: str | None = None,
    ) -> Any:
        """Decode one value of ``stored``'s record (or of ``rec``, a writes record of it);
        RecordInvalid naming the record (and ``what``, followed by ``name`` when given) when its
        bytes name a type outside the allow-list, do not decode, or are not of ``shape``."""
        try:
            value = self._decoder.loads(typed)
        except Refused as exc:
            problem = f"names {exc.reason}; nothing was imported or called"
        except Exception as exc:  # the decoder raises whatever msgpack raises on damaged bytes
            problem = f"cannot be decoded ({type(exc).__name__}: {str(exc)[:200]})"
        else:
            if shape is None or isinstance(value, shape):
                return value
            problem = f"is a {type(value).__name__}, not a {shape.__name__}"
        if name is not None:
            what = f"{what} {name[:80]!r}"
        raise self._invalid(stored, what, problem, rec)

    @staticmethod
    def _invalid(
        stored: StoredCheckpoint, what: str, problem: str, rec: Record | None = None
    ) -> RecordInvalid:
        rec = rec or stored.record
        return RecordInvalid(
            f"{what} of checkpoint {stored.id[:80]!r} in record {rec.seq} of stream {rec.stream} of "
            f"run {rec.run_id} {problem}; the record is damaged, crafted, or was written by another "
            f"serde: inspect it with `flows journal {rec.run_id} --stream {rec.stream}`",
            run_id=rec.run_id,
            stream=rec.stream,
            seq=rec.seq,
        )

    def _shape_checked(self, stored: StoredCheckpoint) -> bool:
        """Whether ``stored``'s checkpoint and metadata, decoded by this saver's decoder, passed
        their checks before: the same bytes decode to the same fields, so they pass again (the
        decode itself, with its allow-list, is made on every read). ``stored`` is held by the
        entry, so its id names no other object while it is there."""
        hit = self._checked.get((id(stored), id(self._decoder)))
        return hit is not None and hit[0] is stored and hit[1] is self._decoder

    def _checked_both(self, stored: StoredCheckpoint) -> None:
        """Note that ``stored`` passed ``_checkpoint`` and ``_metadata`` (``_shape_checked``)."""
        if len(self._checked) >= _CHECKED_MAX:
            self._checked.clear()
        self._checked[(id(stored), id(self._decoder))] = (stored, self._decoder)

    def _checkpoint(self, stored: StoredCheckpoint, checked: bool = False) -> Checkpoint:
        """The stored checkpoint (without its values), decoded and checked to be one LangGraph can
        run on: RecordInvalid naming the record otherwise, never a bare error deep in a graph run.
        ``checked``: it passed before (``_shape_checked``), and only the decode is made."""
        checkpoint: Checkpoint = self._load(stored.checkpoint, stored, "the checkpoint", dict)
        problem = None if checked else checkpoint_problem(checkpoint, stored.id)
        if problem is not None:
            raise self._invalid(stored, "the checkpoint", problem)
        return checkpoint

    def _metadata(self, stored: StoredCheckpoint, checked: bool = False) -> CheckpointMetadata:
        """The stored checkpoint's metadata, decoded and checked as ``_checkpoint`` does."""
        metadata: CheckpointMetadata = self._load(stored.metadata, stored, "the metadata", dict)
        problem = None if checked else metadata_problem(metadata)
        if problem is not None:
            raise self._invalid(stored, "the metadata", problem)
        return metadata

    def _tuple(self, t: _Thread, stored: StoredCheckpoint) -> CheckpointTuple:
        load = self._load
        checked = self._shape_checked(stored)
        checkpoint = self._checkpoint(stored, checked)
        values = t.index.values(stored.ns, checkpoint["channel_versions"])
        checkpoint["channel_values"] = {k: load(v, stored, "channel", name=k) for k, v in values.items()}
        pending = [
            (w.task_id, w.channel, load(w.value, stored, "a write to", rec=w.record, name=w.channel))
            for w in t.index.pending(stored.ns, stored.id)
        ]
        metadata = self._metadata(stored, checked)
        if not checked:
            self._checked_both(stored)
        # all five fields given: the tuple is made without the NamedTuple's ``__new__`` (Python)
        fields = (
            _config(t.thread_id, stored.ns, stored.id),
            checkpoint,
            metadata,
            _config(t.thread_id, stored.ns, stored.parent) if stored.parent else None,
            pending,
        )
        return _new_tuple(CheckpointTuple, fields)

    def citation(self, config: RunnableConfig) -> Citation | None:
        """The journal record of the checkpoint ``config`` names (or of the latest), or None."""
        thread_id, ns = _thread_id(config), _namespace(config)
        checkpoint_id = get_checkpoint_id(config)
        t = self._view(thread_id)
        with t.mutex:
            stored = t.index.get(ns, checkpoint_id) if checkpoint_id else t.index.latest(ns)
            return None if stored is None else Citation.of(stored.record)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first (by id): of one thread (and namespace, and id, when
        ``config`` names them) or of every thread; ``filter`` is equality on metadata keys (a
        dotted key is a path into nested metadata; a key outside ``[a-zA-Z0-9_.-]`` raises
        ``FilterInvalid``, as LangGraph's SQL savers refuse it),
        ``before`` keeps ids below its checkpoint id, ``limit`` caps the count."""
        return iter(self._list(config, filter=filter, before=before, limit=limit))

    def _list(
        self,
        config: RunnableConfig | None,
        *,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Tuples:
        check_filter(filter)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ConfigInvalid(f"list's limit is None or an integer, not {limit!r:.40}")
        if config is not None and not isinstance(config, Mapping):
            raise ConfigInvalid(f"list's config is a RunnableConfig (a dict), not {type(config).__name__}")
        configurable = (config or {}).get("configurable") or {}
        if before is not None and (
            not isinstance(before, Mapping) or not isinstance(get_checkpoint_id(before) or "", str)
        ):
            raise ConfigInvalid(f"list's before is a config naming a checkpoint_id, not {before!r:.80}")
        thread_ids = [_thread_id(config)] if config else self._catalog.threads()
        ns = configurable.get("checkpoint_ns") if config else None
        if ns is not None and not isinstance(ns, str):
            raise ConfigInvalid(f"configurable.checkpoint_ns must be a string, not {ns!r:.40}")
        wanted_id = get_checkpoint_id(config) if config else None
        before_id = get_checkpoint_id(before) if before else None
        found: list[tuple[str, _Thread, StoredCheckpoint]] = []
        for thread_id in thread_ids:
            t = self._view(thread_id)
            with t.mutex:
                for stored in t.index.live():
                    if (ns is not None and stored.ns != ns) or (wanted_id and stored.id != wanted_id):
                        continue
                    if before_id and stored.id >= before_id:
                        continue
                    if filter:
                        metadata = self._metadata(stored)
                        if not all(at_path(metadata, k) == v for k, v in filter.items()):
                            continue
                    found.append((stored.id, t, stored))
        found.sort(key=lambda x: x[0], reverse=True)
        if limit is not None:
            found = found[: max(limit, 0)]
        out = []
        for _, t, stored in found:
            with t.mutex:
                out.append(self._tuple(t, stored))
        return out

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Append the checkpoint (and the values of the channels in ``new_versions``) to the
        thread's journal stream; return the config that names it. Durable when this returns."""
        thread_id, ns = _thread_id(config), _namespace(config)
        payload = self._checkpoint_payload(
            thread_id=thread_id,
            ns=ns,
            config=config,
            checkpoint=checkpoint,
            metadata=metadata,
            new_versions=new_versions,
        )
        key = self._encode(payload, thread_id, f"checkpoint {str(checkpoint['id'])[:80]!r}")
        self._write(thread_id, lambda t: [(payload, _since_tombstone(t, key))], create=True)
        return _config(thread_id, ns, checkpoint["id"])

    def _checkpoint_payload(
        self,
        *,
        thread_id: str,
        ns: str,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Payload:
        c: dict[str, Any] = dict(checkpoint)
        values: dict[str, Any] = c.pop("channel_values", {})
        blobs = []
        for channel, version in new_versions.items():
            typed = (
                self._dump(values[channel], f"channel {channel!r}", thread_id)
                if channel in values
                else ("empty", b"")
            )
            blobs.append([channel, version, *pack(typed)])
        if not isinstance(metadata, Mapping):
            raise ConfigInvalid(
                f"a checkpoint's metadata is a mapping, not {type(metadata).__name__}; nothing was written",
                thread_id=thread_id,
            )
        meta = get_serializable_checkpoint_metadata(config, metadata)
        problem = checkpoint_problem(c, checkpoint["id"])
        what = "it"
        if problem is None:
            problem, what = metadata_problem(meta), "its metadata"
        if problem is not None:
            # a reader refuses what LangGraph cannot run on: written, it would make the thread unreadable
            raise ConfigInvalid(
                f"checkpoint {str(c.get('id'))[:80]!r} of thread {thread_id!r:.120} is not one LangGraph "
                f"can run on: {what} {problem}; nothing was written",
                thread_id=thread_id,
            )
        run_id = meta.get("run_id")
        return {
            "kind": "checkpoint",
            "ns": ns,
            "id": checkpoint["id"],
            "parent": (config.get("configurable") or {}).get("checkpoint_id"),
            "checkpoint": pack(self._dump(c, "the checkpoint", thread_id)),
            "metadata": pack(self._dump(meta, "the checkpoint's metadata", thread_id)),
            "runId": None if run_id is None else str(run_id),
            "blobs": blobs,
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Append one record with the task's writes for the checkpoint ``config`` names. A write
        already stored for (task, index) is kept; an error or interrupt write replaces the last."""
        thread_id, ns = _thread_id(config), _namespace(config)
        checkpoint_id = get_checkpoint_id(config)
        if not checkpoint_id:
            raise ConfigInvalid(
                "put_writes needs configurable.checkpoint_id: the checkpoint the writes belong to",
                thread_id=thread_id,
            )
        if isinstance(writes, str | bytes) or not all(
            isinstance(w, tuple | list) and len(w) == 2 for w in writes
        ):
            raise ConfigInvalid(
                f"put_writes takes a list of (channel, value) pairs, not {writes!r:.80}; nothing was written",
                thread_id=thread_id,
            )
        payload: Payload = {
            "kind": "writes",
            "ns": ns,
            "checkpoint": checkpoint_id,
            "task": task_id,
            "path": task_path,
            "writes": [
                [WRITES_IDX_MAP.get(ch, idx), ch, *pack(self._dump(v, f"a write to {ch!r}", thread_id))]
                for idx, (ch, v) in enumerate(writes)
            ],
        }
        key = self._encode(payload, thread_id, f"the writes of task {str(task_id)[:80]!r}")

        def build(t: _Thread) -> Keyed:
            # The key makes a retried call a no-op. An error or interrupt write replaces the
            # task's last one, so the same value put again after another (timeout, rate limit,
            # timeout) is a new fact: its key names the records whose values it replaces, or the
            # journal would hand back the first record and the middle value would stay the latest.
            stored = t.index.writes.get((ns, checkpoint_id), {})
            replaced = sorted(
                {
                    f"{old.record.run_id}:{old.record.seq}"
                    for idx, ch, *typed in payload["writes"]
                    if idx < 0
                    and (old := stored.get((str(task_id), idx))) is not None
                    and old.record is not None
                    and (old.channel, list(pack(old.value))) != (ch, typed)
                }
            )
            if not replaced:
                return [(payload, _since_tombstone(t, key))]
            mixed = hashlib.blake2b(f"{key}|{','.join(replaced)}".encode(), digest_size=16).hexdigest()
            return [(payload, _since_tombstone(t, "w-" + mixed))]

        self._write(thread_id, build, create=True)

    def delete_thread(self, thread_id: str) -> None:
        """Tombstone the thread and move it to a new, empty generation (its records stay in the
        journal; none is read again). A thread that does not exist is left alone."""
        thread_id = _thread_id({"configurable": {"thread_id": thread_id}}, "thread id")

        def act(t: _Thread, hold: _Hold) -> None:
            assert t.gen is not None
            self._backend.append(hold.lease, STREAM, {"kind": "delete-thread"})
            hold.wrote = True
            self._catalog.register(thread_id, t.gen.gen + 1, None, "delete_thread")
            self._leases.retire(hold.lease)
            t.reset(Generation(thread_id, t.gen.gen + 1, ()))

        self._locked(thread_id, act, create=False)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Tombstone, in every thread, the checkpoints (and their writes) that the given LangGraph
        runs made. Reads every thread of the journal."""
        wanted = {str(r) for r in _ids(run_ids, "delete_for_runs's run ids")}
        if not wanted:
            return
        for thread_id in self._catalog.threads():

            def build(t: _Thread) -> Keyed:
                hit = sorted({c.run_id for c in t.index.live() if c.run_id in wanted})
                if not hit:
                    return []
                payload: Payload = {"kind": "delete-runs", "runIds": hit}
                return [(payload, _since_tombstone(t, self._encode(payload, t.thread_id, "the tombstone")))]

            t = self._view(thread_id)
            with t.mutex:
                if not any(c.run_id in wanted for c in t.index.live()):
                    continue
            self._write(thread_id, build, create=False)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Append every live checkpoint of the source, with its values and pending writes, to the
        target thread, in the order they were made. A source that does not exist copies nothing."""
        source = _thread_id({"configurable": {"thread_id": source_thread_id}}, "source thread id")
        target = _thread_id({"configurable": {"thread_id": target_thread_id}}, "target thread id")
        t = self._view(source)
        with t.mutex:
            payloads = self._replay(t, list(t.index.live()), target)
        if payloads:
            self._write(
                target,
                lambda t: [(p, _since_tombstone(t, k)) for p, k in payloads],
                create=True,
                reason="copy_thread",
            )

    def _replay(self, t: _Thread, kept: StoredList, thread_id: str) -> Keyed:
        """Records that rebuild ``kept`` (checkpoints, the values they need, their writes) in a
        new run, in the order they were made; each value is carried once."""
        kept.sort(key=lambda c: (c.record.ts_ms, c.record.run_id, c.record.seq))
        carried: set[tuple[str, str, Any]] = set()
        out: Keyed = []
        for stored in kept:
            versions = self._checkpoint(stored)["channel_versions"]
            self._metadata(stored)  # carried as bytes, but never carried unchecked
            blobs = []
            for channel, version in versions.items():
                typed = t.index.blobs.get((stored.ns, channel, version))
                if typed is not None and (stored.ns, channel, version) not in carried:
                    # carried as bytes, but checked as a read checks them: a value naming a type
                    # outside the allow-list is refused here, not written again under this saver's
                    # lease to be refused later in a run it made
                    if typed[0] != "empty":  # a channel stored empty has no value to decode
                        self._load(typed, stored, "channel", name=channel)
                    carried.add((stored.ns, channel, version))
                    blobs.append([channel, version, *pack(typed)])
            payload: Payload = {
                "kind": "checkpoint",
                "ns": stored.ns,
                "id": stored.id,
                "parent": stored.parent,
                "checkpoint": pack(stored.checkpoint),
                "metadata": pack(stored.metadata),
                "runId": stored.run_id,
                "blobs": blobs,
            }
            out.append((payload, self._encode(payload, thread_id, f"checkpoint {stored.id}")))
            by_task: dict[tuple[str, str], list[list[Any]]] = {}
            for w in t.index.pending(stored.ns, stored.id):
                self._load(w.value, stored, "a write to", rec=w.record, name=w.channel)
                by_task.setdefault((w.task_id, w.task_path), []).append([w.idx, w.channel, *pack(w.value)])
            for (task, path), writes in by_task.items():
                wp: Payload = {
                    "kind": "writes",
                    "ns": stored.ns,
                    "checkpoint": stored.id,
                    "task": task,
                    "path": path,
                    "writes": writes,
                }
                out.append((wp, self._encode(wp, thread_id, f"the writes of task {task}")))
        return out

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: compact each thread into a new generation holding only the latest
        checkpoint of each namespace (with its values and pending writes); ``delete``: delete the
        threads. Raises ConfigInvalid for another strategy."""
        thread_ids = _ids(thread_ids, "prune's thread ids")
        if strategy not in ("keep_latest", "delete"):
            raise ConfigInvalid(f"prune strategy {strategy!r} is not one of 'keep_latest', 'delete'")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
            else:
                self._compact(_thread_id({"configurable": {"thread_id": thread_id}}, "thread id"))

    def _compact(self, thread_id: str) -> None:
        def act(t: _Thread, hold: _Hold) -> None:
            live = list(t.index.live())
            kept = [c for c in (t.index.latest(ns) for ns in list(t.index.checkpoints)) if c]
            if len(kept) < len(live):
                self._move(t, hold, self._replay(t, kept, thread_id))

        self._locked(thread_id, act, create=False)

    def _move(self, t: _Thread, hold: _Hold, payloads: Keyed) -> None:
        """Write ``payloads`` into a new run, register it as the next generation, then tombstone
        and retire the old run. A crash before the registration leaves an unused run, never a
        thread without its records."""
        assert t.gen is not None
        number = t.gen.gen + 1
        info, new_lease = self._backend.begin(
            THREAD_FLOW, SCOPE, {"langgraph": {"thread": t.thread_id, "generation": number}}
        )
        fresh = _Thread(t.thread_id)
        fresh.reset(Generation(t.thread_id, number, (info.run_id,)))
        try:
            self._append_own(fresh, _Hold(new_lease, False), payloads)
            hold.wrote = True  # from here on the move is under way: a lost lease is not retried
            reg = self._catalog.register(t.thread_id, number, info.run_id, "prune")
        except BaseException:
            self._backend.release(new_lease)
            raise
        if reg.run_id != info.run_id:  # cannot happen while we hold the old run's lease
            lost = {"code": "langgraph_thread_race", "message": f"lost to run {reg.run_id}"}
            self._leases.retire(new_lease, lost)
            raise JournalLeaseLost(
                f"generation {number} of thread {t.thread_id!r} was registered by another process",
                expected=0,
                got=0,
                run_id=info.run_id,
            )
        self._leases.adopt(new_lease)
        self._backend.append(hold.lease, STREAM, {"kind": "compacted", "into": info.run_id})
        self._leases.retire(hold.lease)
        t.gen, t.index, t.stamp = fresh.gen, fresh.index, None

    # -- async twins ---------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``get_tuple`` on the saver's executor."""
        return await self._off_loop(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """``list`` on the saver's executor."""
        found = await self._off_loop(self._list, config, filter=filter, before=before, limit=limit)
        for item in found:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """``put`` on the saver's executor."""
        return await self._off_loop(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """``put_writes`` on the saver's executor."""
        await self._off_loop(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """``delete_thread`` on the saver's executor."""
        await self._off_loop(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """``delete_for_runs`` on the saver's executor."""
        await self._off_loop(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """``copy_thread`` on the saver's executor."""
        await self._off_loop(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``prune`` on the saver's executor."""
        await self._off_loop(self.prune, thread_ids, strategy=strategy)

    def get_next_version(self, current: str | None, channel: None) -> str:
        """The next channel version: a zero-padded counter and a random fraction, so two forks of
        one thread never give different values the same version."""
        if current is None:
            number = 0
        elif isinstance(current, int) and not isinstance(current, bool):
            number = current
        else:
            counter = str(current).split(".")[0]
            if not (counter.isascii() and counter.isdigit() and len(counter) <= 40):
                # a version read back from a record this saver did not write: int() would raise
                raise RecordInvalid(
                    f"the channel version {current!r:.80} read back is not one this saver writes "
                    "(<counter>.<fraction>): the record holding it was not written by this saver"
                )
            number = int(counter)
        return f"{number + 1:032}.{random.random():016}"
