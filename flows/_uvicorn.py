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
import socket
from collections.abc import Callable
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
"""The largest request head read; a larger one is answered ``400`` and the connection closed (h11's
``max_incomplete_event_size``)."""


def bounded_http(*, max_connections: int | None = None, busy: ASGIApp | None = None) -> dict[str, Any]:
    """The ``uvicorn.Config`` settings both servers (``flows serve``, ``flows mcp --http``) bound a
    client by: h11 always (its limits hold, httptools or not), the head deadline, keep-alive and
    head size above, no WebSocket; with ``max_connections``, ``busy`` answers past them."""
    return {
        "http": head_deadline_protocol(HEAD_TIMEOUT_S, max_connections=max_connections, busy=busy),
        "ws": "none",
        "timeout_keep_alive": KEEP_ALIVE_S,
        "h11_max_incomplete_event_size": MAX_HEAD_BYTES,
    }


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
    timeout_s: float, *, max_connections: int | None = None, busy: ASGIApp | None = None
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
    """
    from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

    class _HeadDeadline(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _waiting: RequestResponseCycle | None = None  # the request answered when the timer started
        _served: ASGIApp | None = None  # the server's app, while ``app`` may be ``busy``

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._arm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()

        def handle_events(self) -> None:
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
