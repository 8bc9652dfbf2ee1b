"""``MemorySession``: learn, forget, recall and ask why from any program, under a durable root run
of its own.

A flow's learns journal into the root run ``flows run`` drives. A session gives a plain script (or a
service, a notebook, a CLI command) the same thing without the flows runtime: it begins its own root
run the first time a write needs one, and ends it ``done`` on ``close()`` (or a clean ``with`` exit)
or ``failed``, with the error recorded, when the ``with`` block raises. A session that never wrote
leaves no root run behind.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from journal import JournalBackend, Lease, RunState, check_label, error_record
from memory._errors import ArgumentInvalid, SessionClosed
from memory._outcomes import Explained, Forgotten, ForgottenMany, Learned
from memory._results import Recalled
from memory._root import Root

if TYPE_CHECKING:
    import asyncio

    from memory._erase import Erased

T = TypeVar("T")


class SessionStore(Protocol):
    """What a session needs of its store (``MemoryStore`` is one): the store owns sessions, so the
    session names only this, and the two modules do not import each other."""

    def open_journal(self) -> JournalBackend: ...

    def learn(self, finding: object, root: Root | None, *, supersedes: str | None = None) -> Learned: ...

    def forget(self, key: str, root: Root, *, reason: str) -> Forgotten: ...

    def update(self, memory_id: str, finding: object, root: Root | None) -> Learned: ...

    def erase(self, key: str, root: Root, *, reason: str, settle: bool = True) -> Erased: ...

    def settle_erasures(self, memories: Sequence[str]) -> None: ...

    def retire_superseded(self, key: str, by: str, root: Root) -> bool: ...

    def erase_where(
        self,
        root: Root,
        *,
        reason: str,
        scope: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        dry_run: bool = False,
    ) -> list[str]: ...

    def forget_where(
        self,
        root: Root,
        *,
        reason: str,
        scope: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        dry_run: bool = False,
        only: Collection[str] | None = None,
    ) -> ForgottenMany: ...

    def recall(
        self,
        *,
        scope: str | None = None,
        source: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        before_ms: int | None = None,
        limit: int | None = 20,
    ) -> list[Recalled]: ...

    def why(
        self,
        subject: str,
        *,
        limit: int | None = 10,
        scope: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        mode: str | None = None,
    ) -> list[Explained]: ...

    def flush(self) -> None: ...

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def _submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> asyncio.Future[T]: ...


NAME_MAX = 256
"""The longest scope, flow or source a session takes (characters)."""

SESSION_FAILED = "session_failed"
"""The code recorded in a session's root run when its ``with`` block raised an error without one."""


class _SessionScope(enum.Enum):
    """The default of a session read's ``scope``: the session's own scope."""

    OWN = "own"


OWN_SCOPE = _SessionScope.OWN
"""A session read's default ``scope``: the session's own (pass None for every scope)."""


class SessionState(enum.Enum):
    """Where a session is in its life."""

    NEW = "new"  # nothing written yet: no root run
    OPEN = "open"  # its root run is running
    CLOSED = "closed"  # ended (its root run, if any, is done or failed)


def check_name(what: str, value: object) -> str:
    """Return ``value`` if it is a usable scope, flow or source name; raise ``ArgumentInvalid``, or
    for a scope or flow the journal cannot store (a control character, a lone surrogate) its
    ``JournalNameInvalid``, before anything is learned or begun."""
    if not isinstance(value, str) or not value.strip() or len(value) > NAME_MAX or "\0" in value:
        raise ArgumentInvalid(
            f"a session's {what} must be a non-empty string of at most {NAME_MAX} characters "
            f"without NUL, not {value!r:.80}"
        )
    if what != "source":
        return check_label(what, value)
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise ArgumentInvalid(
                f"a session's source {value!r:.80} holds a lone surrogate, which is not valid UTF-8: "
                "pass text"
            ) from None
    return value


class SessionRoot:
    """A session's root run, begun on first need (thread-safe: concurrent writes begin one run)."""

    def __init__(self, store: SessionStore, flow: str, scope: str, source: str | None) -> None:
        self._store = store
        self.flow = flow
        self.scope = scope
        self.source = source
        self.script = True
        self._lock = threading.Lock()
        self._begun: tuple[JournalBackend, Lease] | None = None

    def _open(self) -> tuple[JournalBackend, Lease]:
        with self._lock:
            if self._begun is None:
                backend = self._store.open_journal()
                header = {"name": self.flow, "scope": self.scope, "memory": {"script": True}}
                _, lease = backend.begin(self.flow, self.scope, {"session": True, "header": header})
                self._begun = (backend, lease)
            return self._begun

    @property
    def begun(self) -> bool:
        """Whether the root run has been begun."""
        return self._begun is not None

    @property
    def journal(self) -> JournalBackend:
        """The journal the root run lives in (begins the run)."""
        return self._open()[0]

    @property
    def lease(self) -> Lease:
        """The root run's lease (begins the run)."""
        return self._open()[1]

    @property
    def run_id(self) -> str:
        """The root run's id (begins the run)."""
        return self._open()[1].run_id


def _error_fields(exc: BaseException) -> dict[str, Any]:
    """The ``{code, message}`` a failed session records: always recordable, whatever the error's
    text (see ``journal.error_record``), so the root run is ended whatever the block raised."""
    return error_record(exc, SESSION_FAILED)


class MemorySession:
    """Learn, forget, recall and ask why under a root run of this session's own
    (``MemoryStore.session``).

    Every write is journal-first exactly as in a flow and durable when it returns. The root run is
    begun by the first write (or by reading ``run_id``) and ended by ``close()``: ``done``; or by
    a ``with`` / ``async with`` block that raises: ``failed``, with the error's code and message
    recorded (``session_failed`` for an error without a code). ``close()`` is safe twice; any write
    after it raises ``SessionClosed``. A session may be shared by threads and tasks.
    """

    def __init__(self, store: SessionStore, *, scope: str, flow: str, source: str | None) -> None:
        self._store = store
        self._root = SessionRoot(
            store,
            check_name("flow", flow),
            check_name("scope", scope),
            None if source is None else check_name("source", source),
        )
        self._state = SessionState.NEW
        self._mutex = threading.Condition()
        self._in_flight = 0
        self._pending: set[asyncio.Future[Any]] = set()

    # -- what it is ------------------------------------------------------------------------------

    @property
    def scope(self) -> str:
        """The scope its findings are learned in."""
        return self._root.scope

    @property
    def flow(self) -> str:
        """The flow name of its root run."""
        return self._root.flow

    @property
    def source(self) -> str | None:
        """A finding's default source (None: the flow name)."""
        return self._root.source

    @property
    def state(self) -> SessionState:
        """``NEW`` until the root run is begun, ``OPEN`` while it runs, ``CLOSED`` after ``close()``."""
        with self._mutex:
            if self._state is SessionState.NEW and self._root.begun:
                self._state = SessionState.OPEN
            return self._state

    @property
    def run_id(self) -> str:
        """The id of the session's root run (begun now if no write has begun it yet).

        Raises:
            SessionClosed: the session is closed and never begun a root run.
            JournalError: the root run could not be begun.
        """
        if not self._root.begun:
            self._enter_op()
            try:
                return self._root.run_id
            finally:
                self._leave_op()
        return self._root.run_id

    # -- writes ----------------------------------------------------------------------------------

    def _enter_op(self) -> None:
        with self._mutex:
            if self._state is SessionState.CLOSED:
                where = f" (root run {self._root.run_id})" if self._root.begun else ""
                raise SessionClosed(f"this memory session is closed{where}; open a new one")
            self._in_flight += 1

    def _leave_op(self) -> None:
        with self._mutex:
            self._in_flight -= 1
            self._mutex.notify_all()

    def learn(self, finding: Mapping[str, Any], *, supersedes: str | None = None) -> Learned:
        """Learn ``finding`` in the session's scope, journal-first (see ``MemoryStore.learn``).

        ``supersedes`` names the key of a finding this one replaces in recall and why.

        Raises:
            SessionClosed: after ``close()``.
            FindingInvalid, ArgumentInvalid, FindingUnknown, FindingRetired: refused; nothing is
                journaled or written (and no root run is begun for it).
            Unwritable, JournalError: as ``MemoryStore.learn``.
        """
        self._enter_op()
        try:
            return self._store.learn(finding, self._root, supersedes=supersedes)
        finally:
            self._leave_op()

    def update(self, memory_id: str, finding: Mapping[str, Any]) -> Learned:
        """Journal a new version of the memory ``memory_id`` in the session's scope, superseding its
        live version (``MemoryStore.update``); the result keeps the memory id.

        Raises:
            SessionClosed: after ``close()``.
            ArgumentInvalid, FindingUnknown, FindingInvalid: refused; nothing is journaled or written.
            Unwritable, JournalError: as ``MemoryStore.learn``.
        """
        self._enter_op()
        try:
            return self._store.update(memory_id, finding, self._root)
        finally:
            self._leave_op()

    def forget_where(
        self,
        *,
        reason: str,
        scope: str | _SessionScope | None = OWN_SCOPE,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        dry_run: bool = False,
        only: Collection[str] | None = None,
    ) -> ForgottenMany:
        """Forget every live finding the filter matches with one journal record (see
        ``MemoryStore.forget_where``), in the session's scope unless ``scope`` names another (None:
        every scope, which then needs another filter); ``only``: of the matches, those keys alone.

        Raises:
            SessionClosed: after ``close()``.
            ArgumentInvalid: as ``MemoryStore.forget_where``; nothing is journaled or written.
            Unwritable, JournalError: as ``MemoryStore.forget``.
        """
        self._enter_op()
        try:
            return self._store.forget_where(
                self._root,
                reason=reason,
                scope=self._scope(scope),
                tags=tags,
                meta=meta,
                source=source,
                before_ms=before_ms,
                dry_run=dry_run,
                only=only,
            )
        finally:
            self._leave_op()

    def erase_where(
        self,
        *,
        reason: str,
        scope: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Erase every memory with a commit the filter matches, forgotten ones included (see
        ``MemoryStore.erase_where``); its ``scope`` is a filter, not the session's (None: every
        scope); returns the memory ids."""
        self._enter_op()
        try:
            return self._store.erase_where(
                self._root,
                reason=reason,
                scope=scope,
                tags=tags,
                meta=meta,
                source=source,
                before_ms=before_ms,
                dry_run=dry_run,
            )
        finally:
            self._leave_op()

    def retire_superseded(self, key: str, by: str) -> bool:
        """Finish a supersede a crash left half done: retire ``key`` as superseded ``by`` (see
        ``MemoryStore.retire_superseded``), under this session's root run."""
        self._enter_op()
        try:
            return self._store.retire_superseded(key, by, self._root)
        finally:
            self._leave_op()

    def erase(self, key: str, *, reason: str, settle: bool = True) -> Erased:
        """Erase the memory ``key`` names, every version (``MemoryStore.erase``), under this
        session's root run, which holds the erase record. ``settle=False``: a caller erasing several
        in a loop says once, after it, what a reader kept (``settle_erasures``).

        Raises:
            SessionClosed: after ``close()``.
            ArgumentInvalid, FindingUnknown, JournalLeaseHeld, JournalError, Unwritable,
                ErasePending: as ``MemoryStore.erase``.
        """
        self._enter_op()
        try:
            return self._store.erase(key, self._root, reason=reason, settle=settle)
        finally:
            self._leave_op()

    def settle_erasures(self, memories: Sequence[str]) -> None:
        """``MemoryStore.settle_erasures``: after a loop of ``erase(..., settle=False)``.

        Raises:
            SessionClosed: after ``close()``.
            ErasePending: a reader keeps old copies of any of ``memories``.
        """
        self._enter_op()
        try:
            self._store.settle_erasures(memories)
        finally:
            self._leave_op()

    def forget(self, key: str, *, reason: str) -> Forgotten:
        """Forget the finding ``key``, journal-first (see ``MemoryStore.forget``); it may be of any
        scope. Forgetting a finding already forgotten returns the first forget and writes nothing.

        Raises:
            SessionClosed: after ``close()``.
            ArgumentInvalid, FindingUnknown: refused; nothing is journaled or written (and no root
                run is begun for it).
            Unwritable, JournalError: as ``MemoryStore.forget``.
        """
        self._enter_op()
        try:
            return self._store.forget(key, self._root, reason=reason)
        finally:
            self._leave_op()

    # -- reads -----------------------------------------------------------------------------------

    def _scope(self, scope: str | _SessionScope | None) -> str | None:
        return self._root.scope if isinstance(scope, _SessionScope) else scope

    def recall(
        self,
        *,
        scope: str | _SessionScope | None = OWN_SCOPE,
        source: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        before_ms: int | None = None,
        limit: int | None = 20,
    ) -> list[Recalled]:
        """Live findings matching every filter, newest first (``MemoryStore.recall``), in the
        session's scope unless ``scope`` names another (None: every scope). A finding this
        session learned is returned as soon as its ``learn`` has returned, and one it forgot is
        never returned after its ``forget`` has. Reads begin no root run and write nothing.

        Raises:
            SessionClosed: after ``close()``.
            ArgumentInvalid, Unreachable: as ``MemoryStore.recall``.
        """
        self._enter_op()
        try:
            return self._store.recall(
                scope=self._scope(scope),
                source=source,
                tags=tags,
                meta=meta,
                before_ms=before_ms,
                limit=limit,
            )
        finally:
            self._leave_op()

    def why(
        self,
        subject: str,
        *,
        limit: int | None = 10,
        scope: str | _SessionScope | None = OWN_SCOPE,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        mode: str | None = None,
    ) -> list[Explained]:
        """Live findings that answer ``subject``, best match first, by words, meaning or both
        (``MemoryStore.why``: ``mode`` defaults to hybrid when the store has an embedder), in the
        session's scope unless ``scope`` names another (None: every scope). Reads begin no root run
        and write nothing.

        Raises:
            SessionClosed: after ``close()``.
            ArgumentInvalid, EmbedderUnavailable, EmbedderFailed, Unreachable: as ``MemoryStore.why``.
        """
        self._enter_op()
        try:
            return self._store.why(
                subject,
                limit=limit,
                scope=self._scope(scope),
                tags=tags,
                meta=meta,
                source=source,
                before_ms=before_ms,
                mode=mode,
            )
        finally:
            self._leave_op()

    def flush(self) -> None:
        """Wait until every learn and forget in flight (in other threads) has returned, then make
        the names of every learned file durable (``MemoryStore.flush``).

        Each write's record is durable when it returns; after ``flush`` so is each learned file's
        name, so no power loss can take a finding learned before it out of reads, even until the
        store's next open.

        Raises:
            Unwritable: a folder could not be fsync'd.
        """
        with self._mutex:
            self._mutex.wait_for(lambda: self._in_flight == 0)
        self._store.flush()

    def close(self) -> None:
        """Wait for writes in flight, make the learned files' names durable, then end the root run
        ``done`` (safe twice; nothing to end when nothing was written).

        Raises:
            Unwritable: a folder could not be fsync'd; the root run is ended ``failed`` instead
                (the store's next open, ``sync`` or ``flows check --repair`` restore any name lost).
            JournalError: the root run could not be ended (e.g. ``journal_lease_lost``).
        """
        self._end(None)

    def _end(self, error: BaseException | None) -> None:
        with self._mutex:
            if self._state is SessionState.CLOSED:
                return
            self._state = SessionState.CLOSED
            self._mutex.wait_for(lambda: self._in_flight == 0)
        if not self._root.begun:
            return
        backend, lease = self._root.journal, self._root.lease
        try:
            if error is None:
                try:  # a run is marked done only once every name it published is durable
                    self._store.flush()
                except Exception as exc:
                    backend.finish(lease, RunState.FAILED, _error_fields(exc))
                    raise
                backend.finish(lease, RunState.DONE)
            elif isinstance(error, Exception):
                backend.finish(lease, RunState.FAILED, _error_fields(error))
        finally:  # ended, or not endable (the journal refused): let go, so it never reads running
            backend.release(lease)

    def __enter__(self) -> MemorySession:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._end(exc)

    # -- async twins -----------------------------------------------------------------------------

    async def _async_op(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        import asyncio  # only async callers pay for asyncio

        # The write is in flight until its thread returns, not until its caller stops waiting: a
        # cancelled caller (``wait_for`` timing out, a cancelled task) leaves it going on, and
        # ``close``/``aclose``/``aflush`` still wait for it before they end the root run. So the
        # thread itself says when it is done (no event loop needed: a ``close`` on the loop's
        # thread waits for it too), or, when it never ran, the future's cancel does.
        self._enter_op()
        mutex = threading.Lock()
        begun: list[bool] = []  # [True] once the thread takes it, [False] once it never will

        def work() -> Any:
            with mutex:
                if begun:
                    raise asyncio.CancelledError  # cancelled before it began: nothing was done
                begun.append(True)
            try:
                return fn(*args, **kwargs)
            finally:
                self._leave_op()

        def settled(future: asyncio.Future[Any]) -> None:
            self._pending.discard(future)
            if future.cancelled():
                with mutex:
                    if begun:
                        return
                    begun.append(False)
                self._leave_op()
            else:
                future.exception()  # retrieved: a caller that stopped waiting never sees it

        try:
            future = self._store._submit(work)
        except BaseException:
            self._leave_op()
            raise
        self._pending.add(future)
        future.add_done_callback(settled)
        return await asyncio.shield(future)

    async def arecall(
        self,
        *,
        scope: str | _SessionScope | None = OWN_SCOPE,
        source: str | None = None,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        before_ms: int | None = None,
        limit: int | None = 20,
    ) -> list[Recalled]:
        """``recall`` off the event loop, on the store's executor (the same arguments and errors)."""
        found: list[Recalled] = await self._async_op(
            self.recall, scope=scope, source=source, tags=tags, meta=meta, before_ms=before_ms, limit=limit
        )
        return found

    async def awhy(
        self,
        subject: str,
        *,
        limit: int | None = 10,
        scope: str | _SessionScope | None = OWN_SCOPE,
        tags: Sequence[str] = (),
        meta: Mapping[str, Any] | None = None,
        source: str | None = None,
        before_ms: int | None = None,
        mode: str | None = None,
    ) -> list[Explained]:
        """``why`` off the event loop, on the store's executor (the same arguments and errors)."""
        found: list[Explained] = await self._async_op(
            self.why,
            subject,
            limit=limit,
            scope=scope,
            tags=tags,
            meta=meta,
            source=source,
            before_ms=before_ms,
            mode=mode,
        )
        return found

    async def alearn(self, finding: Mapping[str, Any], *, supersedes: str | None = None) -> Learned:
        """``learn`` off the event loop, on the store's executor."""
        learned: Learned = await self._async_op(self._store.learn, finding, self._root, supersedes=supersedes)
        return learned

    async def aupdate(self, memory_id: str, finding: Mapping[str, Any]) -> Learned:
        """``update`` off the event loop, on the store's executor."""
        learned: Learned = await self._async_op(self._store.update, memory_id, finding, self._root)
        return learned

    async def aforget(self, key: str, *, reason: str) -> Forgotten:
        """``forget`` off the event loop, on the store's executor."""
        forgotten: Forgotten = await self._async_op(self._store.forget, key, self._root, reason=reason)
        return forgotten

    async def aflush(self) -> None:
        """``flush`` for tasks: wait for every ``alearn``/``aforget`` started, then for threads."""
        import asyncio

        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
        with self._mutex:
            busy = self._in_flight > 0
        if busy:
            await self._store._off_loop(self.flush)

    async def aclose(self) -> None:
        """``close`` for tasks: ``aflush``, then end the root run off the event loop."""
        await self.aflush()
        await self._store._off_loop(self.close)

    async def __aenter__(self) -> MemorySession:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aflush()
        await self._store._off_loop(self._end, exc)
