"""A loopback HTTP test server run on a thread for the length of a ``with`` block."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import ThreadingHTTPServer


@contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[str]:
    """Serve ``server`` until the block ends (then shut it down and close it); its URL."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
