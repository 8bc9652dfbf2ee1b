"""The server's sessions and their root runs.

Each MCP session (a stdio connection, or an HTTP session named by its ``Mcp-Session-Id``) writes
under root runs of its own, flow ``mcp``, one per scope it writes to, begun at its first write
there. A session that ends (stdin closed, HTTP ``DELETE``, the server stopping) finishes them
``done``; one whose client vanished (an HTTP session idle past the timeout) lets go of their leases,
so they read ``interrupted`` like a crashed run. Requests that carry no session (the sessionless
HTTP protocol) share the server's own session, which ends when the server stops.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import anyio.to_thread

from flows.mcp._errors import McpSessionEnded
from memory import (
    Erased,
    FindingUnknown,
    Forgotten,
    ForgottenMany,
    Learned,
    MemoryStore,
    Recalled,
    SessionState,
)
from staging import CodedError

log = logging.getLogger("flows.mcp")

FLOW = "mcp"
"""The flow name of every root run the server begins."""

DEFAULT_SCOPE = "mcp"
"""Where a write goes when neither the call nor the server's --scope names a scope."""

END_WAIT_S = 30.0
"""How long ending a session waits for its calls in flight to finish."""

MAX_OPEN_ROOTS = 8
"""The most root runs one session keeps open (one per scope it writes to). A write to a scope past
them first ends ``done`` the root run the session wrote to least recently (one no write is using);
a later write there begins a new one. Each open root run holds its lease, its run lock and its
streams open: a client writing to a new scope each time (a scope per user) held three descriptors a
scope until the process ran out (at 1,024, some 300 scopes), and then every read and write failed
and not even the session's end could finish its runs."""

MAX_SERVER_ROOTS = 64
"""The most root runs one server keeps open across its sessions: past them a write first ends ``done``
the root runs written to least recently (of any session; those no write is using). An HTTP session
whose client vanished keeps its root runs until the idle timeout: without the bound, a few hundred
such sessions within it ran the server out of descriptors."""


def citation_json(citation: Any, committed_ms: int | None) -> dict[str, Any]:
    """A citation as the tools return it: ``runId``, ``stream``, ``id`` and ``committedMs``."""
    out: dict[str, Any] = dict(citation.as_json())
    if committed_ms is not None:
        out.setdefault("committedMs", committed_ms)
    return out


def finding_json(found: Recalled) -> dict[str, Any]:
    """A recalled finding as the tools return it: its key, fields and citation (with commit time)."""
    out = found.as_json()
    out.pop("journal", None)  # the same record as `citation`, kept by the CLI for old readers
    return out


class ClientGone(BaseException):
    """Ends a session whose client vanished: like an interrupted process, its root run is let go
    (it reads ``interrupted``) rather than finished. It has no body to resume: ``flows resume``
    refuses it with ``flow_session_not_resumable``."""


class _Root:
    """A session's root run in one scope: a ``MemorySession`` of flow ``mcp``."""

    def __init__(self, store: MemoryStore, scope: str) -> None:
        self.scope = scope
        self.users = 0  # writes holding it (``Sessions.root``): it is not ended under them
        self.session = store.session(scope=scope, flow=FLOW)

    # A write once started is finished even when its request is cancelled (the client left): the
    # session's end then waits for it, and its root run is finished after it, never under it.

    async def learn(self, finding: Mapping[str, Any], supersedes: str | None) -> Learned:
        with anyio.CancelScope(shield=True):
            learned = await self.session.alearn(finding, supersedes=supersedes)
        return learned

    async def update(self, memory_id: str, finding: Mapping[str, Any]) -> Learned:
        with anyio.CancelScope(shield=True):
            learned = await self.session.aupdate(memory_id, finding)
        return learned

    async def forget(self, key: str, reason: str) -> Forgotten:
        with anyio.CancelScope(shield=True):
            forgotten = await self.session.aforget(key, reason=reason)
        return forgotten

    async def forget_where(self, **where: Any) -> ForgottenMany:
        with anyio.CancelScope(shield=True):
            forgotten = await anyio.to_thread.run_sync(partial(self.session.forget_where, **where))
        return forgotten

    async def erase(self, key: str, reason: str, *, settle: bool = True) -> Erased:
        with anyio.CancelScope(shield=True):
            erased = await anyio.to_thread.run_sync(
                partial(self.session.erase, key, reason=reason, settle=settle)
            )
        return erased

    async def settle_erasures(self, memories: list[str]) -> None:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.session.settle_erasures, memories)

    @property
    def run_id(self) -> str | None:
        """The root run's id once it is begun (None before: reading ``session.run_id`` begins it)."""
        return self.session.run_id if self.session.state is SessionState.OPEN else None

    def described(self) -> str:
        """The root run, for a message: its id, or its scope when its id cannot be had (it was
        never begun, and a closed session begins none)."""
        try:
            return self.session.run_id
        except Exception:
            return f"(scope {self.scope!r})"

    async def close(self) -> None:
        await self.session.aclose()

    async def abandon(self) -> None:
        await self.session.__aexit__(ClientGone, ClientGone(), None)


@dataclass
class _Session:
    roots: dict[str, _Root] = field(default_factory=dict)
    requests: int = 0  # HTTP requests in flight (an open event stream counts)
    calls: int = 0  # tool calls in flight
    last_seen: float = 0.0
    ended: bool = False
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class Sessions:
    """The live sessions of one server over ``store``; ``default_scope`` is the server's --scope."""

    def __init__(
        self, store: MemoryStore, default_scope: str | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.default_scope = default_scope
        self._clock = clock
        self._live: dict[str | None, _Session] = {}
        # every open root run, least recently used first, with its session's key and the session
        self._open: dict[_Root, tuple[str | None, _Session]] = {}

    def _get(self, key: str | None) -> _Session:
        session = self._live.get(key)
        if session is None:
            session = self._live[key] = _Session(last_seen=self._clock())
        return session

    @contextlib.asynccontextmanager
    async def active(self, key: str | None) -> AsyncIterator[None]:
        """An HTTP request of session ``key`` is in flight inside this block: the session is not idle."""
        session = self._get(key)
        session.requests += 1
        try:
            yield
        finally:
            session.requests -= 1
            session.last_seen = self._clock()
            self._release(key, session)

    @contextlib.asynccontextmanager
    async def call(self, key: str | None) -> AsyncIterator[SessionMemory]:
        """The memory a tool call of session ``key`` uses; ending the session waits for the call."""
        session = self._get(key)
        session.calls += 1
        try:
            yield SessionMemory(self, key, session)
        finally:
            session.calls -= 1
            session.last_seen = self._clock()
            self._release(key, session)

    def _release(self, key: str | None, session: _Session) -> None:
        """Forget ``session`` once nothing is in flight and it has begun no root run: there is nothing
        to end, and a request naming a session id the server never gave (any string a client likes)
        must not hold memory until the idle timeout."""
        if not (session.roots or session.requests or session.calls) and self._live.get(key) is session:
            del self._live[key]

    @contextlib.asynccontextmanager
    async def root(self, key: str | None, session: _Session, scope: str) -> AsyncIterator[_Root]:
        """``session``'s root run in ``scope`` for one write, begun by it if the session has none there
        open. Past ``MAX_OPEN_ROOTS`` the session's least recently used root runs (those no write
        holds) are ended ``done`` first.

        Raises:
            McpSessionEnded: the session ended while the call waited.
        """
        retired: list[_Root] = []
        async with session.lock:
            if session.ended:
                raise McpSessionEnded(f"session {key} has ended; open a new session to write")
            root = session.roots.pop(scope, None)  # put back last: the order is least recent first
            if root is None:
                idle = [s for s, r in session.roots.items() if not r.users]
                for old in idle[: max(0, len(session.roots) + 1 - MAX_OPEN_ROOTS)]:
                    retired.append(session.roots.pop(old))
                root = _Root(self.store, scope)
            session.roots[scope] = root
            root.users += 1
            for old_root in retired:
                self._open.pop(old_root, None)
            self._open.pop(root, None)
            self._open[root] = (key, session)
        try:
            with anyio.CancelScope(shield=True):  # out of the session's roots: nothing else ends it
                for old_root in retired:
                    await self._end_root(key, old_root, abandoned=False)
                for owner_key, old_root in await self._over_server_bound(root):
                    await self._end_root(owner_key, old_root, abandoned=False)
            yield root
        finally:
            root.users -= 1

    async def _over_server_bound(self, keep: _Root) -> list[tuple[str | None, _Root]]:
        """The least recently used open root runs no write holds, taken out of their sessions, past
        ``MAX_SERVER_ROOTS`` (never ``keep``), each with its session's key: for the caller to end."""
        taken: list[tuple[str | None, _Root]] = []
        for old, (owner_key, owner) in list(self._open.items()):
            if len(self._open) <= MAX_SERVER_ROOTS:
                break
            if old is keep or old.users:
                continue
            async with owner.lock:  # one session's lock at a time: no two writers wait on each other
                if owner.roots.get(old.scope) is not old or old.users:
                    continue  # ended, or taken up by a write, while this one waited
                del owner.roots[old.scope]
            if self._open.pop(old, None) is not None:
                taken.append((owner_key, old))
        return taken

    async def end_runs(self, runs: set[str]) -> None:
        """End ``done`` every root run this server holds open whose id is in ``runs`` and that no
        write is using (its session begins a new one at its next write in that scope): the journal
        rewrites no record of a running run, so an erase of what a session learned first ends the
        root runs that hold its commits. A root run a write is using stays (the erase then meets
        ``journal_lease_held`` for it)."""
        taken: list[tuple[str | None, _Root]] = []
        for old, (owner_key, owner) in list(self._open.items()):
            if old.users or old.run_id not in runs:
                continue
            async with owner.lock:
                if owner.roots.get(old.scope) is not old or old.users:
                    continue
                del owner.roots[old.scope]
            if self._open.pop(old, None) is not None:
                taken.append((owner_key, old))
        with anyio.CancelScope(shield=True):
            for owner_key, old in taken:
                await self._end_root(owner_key, old, abandoned=False)

    def idle(self, timeout_s: float) -> list[str]:
        """The HTTP sessions with no call in flight and no request for ``timeout_s`` seconds."""
        now = self._clock()
        return [
            k
            for k, s in self._live.items()
            if k is not None and not s.requests and not s.calls and now - s.last_seen >= timeout_s
        ]

    async def end(self, key: str | None, *, abandoned: bool = False) -> None:
        """End session ``key`` once its calls in flight are over (waiting at most ``END_WAIT_S``): its
        root runs finish ``done`` (or, ``abandoned``, let go of their leases and read interrupted)."""
        session = self._live.pop(key, None)
        if session is None:
            return
        with anyio.move_on_after(END_WAIT_S):
            while session.calls:
                await anyio.sleep(0.01)
        async with session.lock:
            session.ended = True
            roots = list(session.roots.values())
            session.roots.clear()
            for root in roots:
                self._open.pop(root, None)
        for root in roots:
            await self._end_root(key, root, abandoned=abandoned)

    async def end_root(self, key: str | None, root: _Root) -> None:
        """End ``root``, a root run begun for one call, ``done`` (a failure reported on stderr)."""
        await self._end_root(key, root, abandoned=False)

    async def _end_root(self, key: str | None, root: _Root, *, abandoned: bool) -> None:
        """End ``root`` (``done``, or let go when ``abandoned``), reporting a failure on stderr: one
        root's failure must not keep the others running, nor fail a write."""
        try:
            await (root.abandon() if abandoned else root.close())
        except CodedError as exc:
            log.error(
                "session %s: its root run %s could not be ended %s, and is left as it was: "
                "error[%s]: %s",
                key or "(stdio)",
                root.described(),
                "interrupted" if abandoned else "done",
                exc.code,
                exc,
            )
        except Exception:
            log.exception("session %s: ending its root run %s failed", key or "(stdio)", root.described())

    async def end_all(self) -> None:
        """End every session (the server is stopping)."""
        for key in list(self._live):
            await self.end(key)


class SessionMemory:
    """The memory as one session's tool calls see it (the ``Memory`` the tools expect)."""

    def __init__(self, sessions: Sessions, key: str | None, session: _Session) -> None:
        self._sessions = sessions
        self._key = key
        self._session = session
        self.default_scope = sessions.default_scope

    @property
    def _store(self) -> MemoryStore:
        return self._sessions.store

    async def learn(self, scope: str, finding: Mapping[str, Any], supersedes: str | None) -> dict[str, Any]:
        async with self._sessions.root(self._key, self._session, scope) as root:
            learned = await root.learn(finding, supersedes)
        return {
            "memoryId": learned.memory_id,
            "key": learned.key,
            "scope": scope,
            "supersedes": supersedes,
            "learnedMs": learned.learned_ms,
            "citation": citation_json(learned.citation, learned.learned_ms),
        }

    async def update(self, memory_id: str, finding: Mapping[str, Any]) -> dict[str, Any]:
        # Journaled under the session's root run in the live version's scope.
        live = await anyio.to_thread.run_sync(self._store.current, memory_id)
        if live is None:
            raise FindingUnknown(
                f"memory {memory_id} has no live version to update: it was never learned, or it was "
                "forgotten (the `history` tool tells which); learn the finding again to start a new memory",
                key=memory_id,
            )
        async with self._sessions.root(self._key, self._session, live.scope) as root:
            learned = await root.update(memory_id, finding)
        return {
            "memoryId": learned.memory_id,
            "key": learned.key,
            "scope": live.scope,
            "supersedes": live.key if learned.key != live.key else None,
            "learnedMs": learned.learned_ms,
            "citation": citation_json(learned.citation, learned.learned_ms),
        }

    async def forget(self, key: str, reason: str) -> dict[str, Any]:
        # Journaled under the session's root run in the finding's own scope (when it is still live),
        # so a session's forgets sit beside its learns of that scope.
        found = await anyio.to_thread.run_sync(self._store.get, key)
        scope = found.scope if found is not None else self.default_scope or DEFAULT_SCOPE
        async with self._sessions.root(self._key, self._session, scope) as root:
            forgotten = await root.forget(key, reason)
        out = forgotten.as_json()
        out["citation"] = citation_json(forgotten.citation, forgotten.forgotten_ms)
        return out

    async def recall(
        self,
        *,
        scope: str | None,
        tags: list[str],
        meta: Mapping[str, Any] | None,
        source: str | None,
        before_ms: int | None,
        limit: int,
    ) -> list[dict[str, Any]]:
        found = await self._store.arecall(
            scope=scope, tags=tags, meta=meta, source=source, before_ms=before_ms, limit=limit
        )
        return [finding_json(f) for f in found]

    async def why(
        self,
        subject: str,
        *,
        scope: str | None,
        tags: list[str],
        meta: Mapping[str, Any] | None,
        limit: int,
        mode: str | None = None,
    ) -> list[dict[str, Any]]:
        answers = await self._store.awhy(subject, scope=scope, tags=tags, meta=meta, limit=limit, mode=mode)
        return [
            {
                **finding_json(a.finding),
                "score": a.score,
                "matched": list(a.matched),
                "matchedBy": a.matched_by,
                "similarity": a.similarity,
            }
            for a in answers
        ]

    async def get(self, key: str) -> dict[str, Any]:
        found = await anyio.to_thread.run_sync(self._store.get, key)
        if found is None:
            raise FindingUnknown(
                f"no live finding has key {key}: it was never learned, or it was forgotten, superseded "
                "or expired (the `history` tool tells which)",
                key=key,
            )
        return finding_json(found)

    async def history(self, key: str, *, offset: int, limit: int, max_bytes: int) -> dict[str, Any]:
        page = await anyio.to_thread.run_sync(
            partial(self._store.history_page, key, offset=offset, limit=limit, max_bytes=max_bytes)
        )
        return page.as_json()

    async def forget_where(
        self,
        *,
        scope: str,
        reason: str,
        tags: list[str],
        meta: Mapping[str, Any] | None,
        source: str | None,
        before_ms: int | None,
        dry_run: bool,
        only: list[str] | None = None,
    ) -> dict[str, Any]:
        where: dict[str, Any] = {
            "scope": scope,
            "reason": reason,
            "tags": tags,
            "meta": meta,
            "source": source,
            "before_ms": before_ms,
        }
        if dry_run:
            planned: ForgottenMany = await self._listed(scope, "forget_where", where)
            return planned.as_json()
        # Journaled under the session's root run in that scope, as a forget by key is
        async with self._sessions.root(self._key, self._session, scope) as root:
            done = await root.forget_where(**where, only=only)
        out = done.as_json()
        if done.citation is not None:
            out["citation"] = citation_json(done.citation, done.forgotten_ms)
        return out

    async def erase_plan(
        self,
        *,
        scope: str,
        reason: str,
        tags: list[str],
        meta: Mapping[str, Any] | None,
        source: str | None,
        before_ms: int | None,
    ) -> list[str]:
        where = {"scope": scope, "tags": tags, "meta": meta, "source": source, "before_ms": before_ms}
        planned: list[str] = await self._listed(scope, "erase_where", {"reason": reason, **where})
        return planned

    async def _listed(self, scope: str, method: str, where: Mapping[str, Any]) -> Any:
        """A filter's dry run (``method`` of a session with ``where`` and ``dry_run=True``) in a
        session of ``scope`` that only lists, and so begins no root run."""
        listing = self._store.session(scope=scope, flow=FLOW)
        try:
            return await anyio.to_thread.run_sync(partial(getattr(listing, method), dry_run=True, **where))
        finally:
            listing.close()

    async def erase(self, keys: list[str], reason: str) -> list[dict[str, Any]]:
        # The runs that hold records of the memories: the server's own, when open, are ended first
        # (the journal rewrites no record of a running run); then the memories are erased in turn
        # under one root run begun for the call, in the scope of the first one's key, ended `done`
        # once they are (or one fails: those before it stay erased).
        runs: set[str] = set()
        for key in keys:
            events = await anyio.to_thread.run_sync(self._store.history, key)
            runs |= {e.citation.run_id for e in events}
        await self._sessions.end_runs(runs)
        scope = await anyio.to_thread.run_sync(self._store.scope_of, keys[0]) if keys else None
        root = _Root(self._store, scope or self.default_scope or DEFAULT_SCOPE)
        try:
            done = [(await root.erase(key, reason, settle=False)).as_json() for key in keys]
            await root.settle_erasures([str(d["memoryId"]) for d in done])  # once, for all of them
            return done
        finally:
            with anyio.CancelScope(shield=True):
                await self._sessions.end_root(self._key, root)
