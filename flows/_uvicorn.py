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

import socket
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import uvicorn


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
