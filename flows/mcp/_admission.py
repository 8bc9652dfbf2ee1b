"""How many HTTP sessions a server holds open, and the refusal of one past the bound.

The SDK keeps each HTTP session (its transport and its server task) from the ``initialize`` that
opens it until a ``DELETE`` of it, its idle timeout or the server's stop, and refuses a session past
its own bound (10,000) with a bare ``503`` that carries no code of ours and no ``Retry-After``. The
HTTP gate keeps its own count, lower (``--max-sessions``), and refuses past it first, with
``mcp_sessions_full``, ``Retry-After`` and what to do.

A place is reserved when an ``initialize`` that names no session passes the gate, before the
endpoint sees it, so initialises racing for the last place let exactly one in. It becomes the
session's when the endpoint's answer names a session (``Mcp-Session-Id``, a status below 400) and is
given back otherwise. A session's place is given back when a ``DELETE`` of it is accepted, when the
endpoint answers a request of it ``404`` (the SDK no longer has it), and once it has had no request
in flight for the idle timeout: the SDK ends such a session on its own, measured from the end of its
last request as seen inside the gate, so it has ended by the time the gate counts it gone. The
server stopping ends every session, and the count with the process. Everything here runs on the
server's event loop, so the count needs no lock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from flows.mcp._errors import McpSessionsFull

DEFAULT_MAX_SESSIONS = 1000
"""The most HTTP sessions a server holds open unless ``--max-sessions`` says otherwise: a tenth of
the SDK's own bound, far more than the clients of one memory hold at once, and few enough that
sessions opened and never ended (each holds its transport and a task until the idle timeout) cannot
grow the server without end."""

MAX_SESSIONS_CEILING = 10_000
"""The highest ``--max-sessions``: the SDK's own bound, which would otherwise refuse first."""

SESSIONS_FULL_CODE = -32011
"""The JSON-RPC error code of an ``initialize`` refused for want of a place: one of the codes JSON-RPC
leaves to servers that neither it nor the MCP SDK gives a meaning (``mcp_busy`` has -32010)."""

RETRY_AFTER_MAX_S = 60
"""The longest ``Retry-After`` of a refusal: the time until the first idle session expires, but a
session may be ended (``DELETE``) at any moment, so a client is never told to wait longer."""


@dataclass
class _Open:
    last_seen: float
    requests: int = 0  # requests of the session in flight through the gate (an event stream counts)


class Admission:
    """The HTTP sessions one server holds open, at most ``limit``; one with no request in flight for
    ``idle_timeout_s`` seconds is counted gone (the SDK ends it then)."""

    def __init__(
        self, limit: int, idle_timeout_s: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.idle_timeout_s = idle_timeout_s
        self._clock = clock
        self._open: dict[str, _Open] = {}
        self._reserved = 0

    def __len__(self) -> int:
        """The sessions open, and the places reserved for ``initialize`` requests in flight."""
        return len(self._open) + self._reserved

    def reserve(self) -> bool:
        """Reserve a place for a new session (an ``initialize`` naming none); False when ``limit``
        are open or reserved, once the idle ones are counted gone."""
        if len(self) >= self.limit:
            self._expire()
        if len(self) >= self.limit:
            return False
        self._reserved += 1
        return True

    def opened(self, key: str | None) -> None:
        """A reservation settled: the place is session ``key``'s, or given back (None)."""
        self._reserved -= 1
        if key is not None:
            self._open.setdefault(key, _Open(self._clock()))

    def begin(self, key: str) -> None:
        """A request of session ``key`` enters the endpoint: the session is not idle until it ends."""
        held = self._open.get(key)
        if held is not None:
            held.requests += 1

    def end(self, key: str, status: int | None) -> None:
        """A request of session ``key`` is over, answered ``status`` (None: no answer began): a
        ``404`` means the SDK no longer has the session, and its place is given back."""
        held = self._open.get(key)
        if held is None:
            return
        held.requests -= 1
        held.last_seen = self._clock()
        if status == 404:
            del self._open[key]

    def closed(self, key: str) -> None:
        """Session ``key`` ended (a ``DELETE`` of it was accepted): its place is given back."""
        self._open.pop(key, None)

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._open.items() if self._idle_for(s, now) >= self.idle_timeout_s]:
            del self._open[key]

    @staticmethod
    def _idle_for(held: _Open, now: float) -> float:
        return -math.inf if held.requests else now - held.last_seen

    def retry_after_s(self) -> int:
        """What a refused ``initialize`` is told to wait (``Retry-After``, whole seconds): until the
        first idle session is counted gone, at least 1 and at most ``RETRY_AFTER_MAX_S``."""
        now = self._clock()
        left = [self.idle_timeout_s - self._idle_for(s, now) for s in self._open.values() if not s.requests]
        return max(1, min(RETRY_AFTER_MAX_S, math.ceil(min(left, default=RETRY_AFTER_MAX_S))))

    def full(self) -> McpSessionsFull:
        """The refusal of an ``initialize`` past the bound."""
        retry = self.retry_after_s()
        return McpSessionsFull(
            f"the server already has {self.limit} sessions open, its most at once (--max-sessions); "
            "this initialize opened none: end the sessions you no longer use (an HTTP DELETE of the endpoint "
            f"with the session's Mcp-Session-Id; the SDK's clients do it on close), wait for an idle one "
            f"to expire (a session with no request for {self.idle_timeout_s:g} s, --idle-timeout, is "
            f"ended) and send the initialize again in {retry} s or more, or start the server with a "
            "higher --max-sessions",
            limit=self.limit,
            retry_after_s=retry,
            idle_timeout_s=self.idle_timeout_s,
        )
