"""A uvicorn server that says it serves only once it does.

A server command prints where to connect (``flows serve``, ``flows mcp --http``), and a person or a
test may press Ctrl-C the moment that line appears. Printed before uvicorn starts, the line opened a
window in which the SIGINT found no handler of uvicorn's: the ``KeyboardInterrupt`` it raised could
land in a callback of the import machinery, whose exceptions Python ignores, and the server then
served on, deaf to that Ctrl-C. ``announcing_server`` calls ``announce`` after the server's startup,
when uvicorn's own handlers are in place (they stop it cleanly) and the socket accepts requests.

uvicorn is imported when a server is made, never by ``import flows``.
"""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import uvicorn
    from starlette.types import ASGIApp


HEAD_TIMEOUT_S = 10.0
"""How long a connection may take to send a whole request head (its request line and headers), from
when it opens or its last answer went back; it is closed then (``head_deadline_protocol``)."""

KEEP_ALIVE_S = 5
"""How long a connection may stay open, silent, after an answer (uvicorn's ``timeout_keep_alive``)."""

MAX_HEAD_BYTES = 16 * 1024
"""The largest request head (request line, headers and the blank line that ends them) a server
takes; a larger one is answered ``431`` with the server's coded error (``Refusal``) and the
connection closed, however many reads it came in (``head_deadline_protocol``)."""

LINGER_S = 2.0
"""How long a connection refused for its head is still read (and what it sends dropped) after the
answer, before it is closed: closed at once, the bytes of the head still arriving would make the
kernel reset the connection, and a client may then lose the answer it was sent."""

REFUSALS_LOG_S = 60.0
"""How often at most a server logs the request heads it refused for their size (``431``): a line for
the first, then at most one a window, saying how many it refused since the last line. uvicorn logged
a line for each, so a client sending oversized heads in a loop could flood the server's log."""

#: where h11 ends a head: the first empty line, CRLF or bare LF
_HEAD_END = re.compile(b"\n\r?\n")


@dataclass(frozen=True)
class Refusal:
    """An answer the HTTP layer writes itself, before any app has a request to give it (a head over
    ``MAX_HEAD_BYTES`` cannot be parsed into one): the server's coded error as its JSON ``body``,
    with the ``headers`` that server puts on every answer."""

    body: bytes
    headers: tuple[tuple[str, str], ...] = ()

    def response(self, status: int, reason: str) -> bytes:
        """The whole HTTP/1.1 answer with ``status``, closing the connection."""
        lines = [
            f"HTTP/1.1 {status} {reason}",
            "content-type: application/json",
            f"content-length: {len(self.body)}",
            "connection: close",
            *(f"{name}: {value}" for name, value in self.headers),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + self.body


class RefusalLog:
    """The log lines of one server's refused request heads: the first is logged at once; those
    that follow within ``every_s`` seconds of the last line are counted, and the first refusal after
    the window logs one line with that count (``clock``: seconds, monotonic)."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        every_s: float = REFUSALS_LOG_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.every_s = every_s
        self.clock = clock
        self.unlogged = 0  # refusals since the last line, not yet in one
        self.last: float | None = None  # when the last line was logged

    def refused(self, limit: int) -> None:
        """One head over ``limit`` bytes was refused: log it, or count it for the next line."""
        now = self.clock()
        self.unlogged += 1
        if self.last is not None and now - self.last < self.every_s:
            return
        if self.last is None:
            self.logger.warning(
                "answered 431 to a request head over %d bytes and closed the connection; further "
                "refusals are counted, one line every %g s at most",
                limit,
                self.every_s,
            )
        else:
            self.logger.warning(
                "answered 431 to %d request head(s) over %d bytes in the %.0f s since the last such line",
                self.unlogged,
                limit,
                now - self.last,
            )
        self.last = now
        self.unlogged = 0


def bounded_http(
    *, head_too_large: Refusal, max_connections: int | None = None, busy: ASGIApp | None = None
) -> dict[str, Any]:
    """The ``uvicorn.Config`` settings both servers (``flows serve``, ``flows mcp --http``) bound a
    client by: h11 always (its limits hold, httptools or not), the head deadline, keep-alive and
    head size above (a head past it answered ``431`` with ``head_too_large``), no WebSocket; with
    ``max_connections``, ``busy`` answers past them."""
    protocol = head_deadline_protocol(
        HEAD_TIMEOUT_S, max_connections=max_connections, busy=busy, head_too_large=head_too_large
    )
    return {
        "http": protocol,
        "ws": "none",
        "timeout_keep_alive": KEEP_ALIVE_S,
        "h11_max_incomplete_event_size": MAX_HEAD_BYTES,
    }


def head_over_limit(buffered: bytes, limit: int = MAX_HEAD_BYTES) -> bool:
    """Whether ``buffered`` (what a connection sent from the start of a request) begins with a head
    over ``limit`` bytes: it holds more than ``limit`` bytes and no empty line ends a head within
    them. (h11 bounds only a head still incomplete after a read; one that arrived whole in one read
    was taken at any size.)"""
    return len(buffered) > limit and _HEAD_END.search(buffered, 0, limit) is None


def announcing_server(config: uvicorn.Config, announce: Callable[[], None]) -> uvicorn.Server:
    """A ``uvicorn.Server`` for ``config`` that calls ``announce`` once its startup has finished,
    unless it is already stopping."""
    import uvicorn

    class _Announcing(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and not self.should_exit:
                announce()

    return _Announcing(config)


def head_deadline_protocol(
    timeout_s: float,
    *,
    max_connections: int | None = None,
    busy: ASGIApp | None = None,
    head_too_large: Refusal | None = None,
) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol, closing a connection that has not sent a whole request head
    (request line and headers) within ``timeout_s`` seconds of opening, or of its last answer;
    with ``max_connections``, a request on a connection past that many open ones is answered by
    ``busy`` (an ASGI app) instead of the server's app. (uvicorn's own ``limit_concurrency``
    answers a plain-text ``503`` that a client of the server's protocol cannot read.)

    uvicorn times a connection out only once it has answered on it (``timeout_keep_alive``), and
    any byte received stops that timer: a connection opened and left silent, or sent a header a
    byte at a time, was held for ever. A request under way (its head read, its answer not yet
    given: a long call, an event stream) is never cut by this deadline.

    With ``head_too_large``, a request head over the server's ``h11_max_incomplete_event_size`` is
    answered with it (``431``), whether it came in one read or many; the connection is read, and
    what it sends dropped, for ``LINGER_S`` more, then closed. Such refusals are logged at most once
    every ``REFUSALS_LOG_S`` seconds, with their count (``RefusalLog``), never a line each.
    """
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

    if TYPE_CHECKING:
        from uvicorn.server import ServerState

    class _BoundedHeads(h11.Connection):
        """h11's server side, refusing a head over ``limit`` however it arrived: h11 bounds only an
        event still incomplete after a read, so a head sent whole in one was parsed at any size."""

        def __init__(self, limit: int) -> None:
            super().__init__(h11.SERVER, max_incomplete_event_size=limit)
            self.limit = limit
            self.head_refused = False

        def head_too_large(self) -> bool:
            """IDLE: the next event is a request head, and the buffer starts with it (a pipelined
            request waits, PAUSED, until the answer before it is done, then is judged)."""
            return self.their_state is h11.IDLE and head_over_limit(self.trailing_data[0], self.limit)

        def next_event(self) -> Any:
            if self.head_too_large():
                self.head_refused = True
                raise h11.RemoteProtocolError("request head too large", error_status_hint=431)
            return super().next_event()

    refusals = None if head_too_large is None else RefusalLog(logging.getLogger("uvicorn.error"))

    class _HeadDeadline(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _linger: asyncio.TimerHandle | None = None  # a refused connection's close
        _waiting: RequestResponseCycle | None = None  # the request answered when the timer started
        _served: ASGIApp | None = None  # the server's app, while ``app`` may be ``busy``

        def __init__(
            self,
            config: uvicorn.Config,
            server_state: ServerState,
            app_state: dict[str, Any],
            _loop: asyncio.AbstractEventLoop | None = None,
        ) -> None:
            super().__init__(config, server_state, app_state, _loop)
            if head_too_large is not None:
                self.conn = _BoundedHeads(config.h11_max_incomplete_event_size or MAX_HEAD_BYTES)

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm()

        def data_received(self, data: bytes) -> None:
            if self._linger is None:  # after a refusal, what comes is dropped
                super().data_received(data)

        def send_400_response(self, msg: str) -> None:
            refused = isinstance(self.conn, _BoundedHeads) and self.conn.head_refused
            if head_too_large is None or not refused:
                super().send_400_response(msg)
                return
            self._refuse_head()

        def _refuse_head(self) -> None:
            """Answer ``head_too_large``, log it (or count it: ``refusals``), and linger."""
            assert head_too_large is not None and refusals is not None
            self._disarm()
            self.transport.write(head_too_large.response(431, "Request Header Fields Too Large"))
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self._linger = self.loop.call_later(LINGER_S, self.transport.close)
            refusals.refused(self.conn.limit if isinstance(self.conn, _BoundedHeads) else MAX_HEAD_BYTES)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def handle_events(self) -> None:
            # a head over the limit is refused here, before uvicorn's own handling logs a warning
            # for it ("Invalid HTTP request received.", a line per request)
            if isinstance(self.conn, _BoundedHeads) and self._linger is None and self.conn.head_too_large():
                self.conn.head_refused = True
                self._refuse_head()
                return
            if max_connections is not None and busy is not None:
                # the app a request head arriving now is given (``handle_events`` reads ``app``)
                if self._served is None:
                    self._served = self.app
                self.app = busy if len(self.connections) > max_connections else self._served
            super().handle_events()
            if self._head_timer is not None and self.cycle is not self._waiting:  # a head arrived
                self._head_timer.cancel()
                self._head_timer = None

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._linger is not None:
                self._linger.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            if not self.transport.is_closing():
                self._waiting = self.cycle
                self._head_timer = self.loop.call_later(timeout_s, self._late)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _late(self) -> None:
            self._head_timer = None
            answering = self.cycle is not None and not self.cycle.response_complete
            if self.cycle is self._waiting and not answering and not self.transport.is_closing():
                self.transport.close()

    return _HeadDeadline
