"""stdin and stdout for the stdio transport, on daemon threads.

The SDK's own stdio transport reads and writes on worker threads that a stopping server (SIGTERM,
Ctrl-C) and the interpreter's exit both wait for, and a read blocked on stdin cannot be interrupted:
a server told to stop would hang until its client closed the pipe. So the wire is served here by
daemon threads over private copies of descriptors 0 and 1, while descriptor 0 is pointed at the null
device and descriptor 1 at stderr: nothing else in the process (a stray print) reads or corrupts the
wire. Each side holds at most one line in flight, so a client cannot fill our memory faster than we
serve it, and no Python file object's lock is held when the interpreter exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading

import anyio

CHUNK = 65536


def _claim(fd: int, replacement: int) -> int:
    """A private copy of ``fd``; ``fd`` itself then refers to what ``replacement`` refers to."""
    private = os.dup(fd)
    os.dup2(replacement, fd)
    return private


class StdinLines:
    """The lines of stdin, as an async iterator of text (what the SDK's transport reads)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._lines: asyncio.Queue[bytes] = asyncio.Queue()
        self._room = threading.Semaphore(1)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            fd = _claim(0, null)
        finally:
            os.close(null)
        threading.Thread(target=self._pump, args=(fd,), name="flows-mcp-stdin", daemon=True).start()

    def _hand_over(self, line: bytes) -> None:
        self._room.acquire()  # the previous line was taken
        self._loop.call_soon_threadsafe(self._lines.put_nowait, line)

    def _pump(self, fd: int) -> None:
        pending = b""
        try:
            while chunk := os.read(fd, CHUNK):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    self._hand_over(line + b"\n")
            if pending:
                self._hand_over(pending)
            self._hand_over(b"")
        except (RuntimeError, OSError):  # the loop is gone, or stdin failed: stop reading
            return

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        line = await self._lines.get()
        self._room.release()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")


class StdoutWire:
    """stdout, as the async text file the SDK's transport writes lines to."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._fd = _claim(1, 2)
        self._out: queue.SimpleQueue[tuple[bytes, asyncio.Future[None]]] = queue.SimpleQueue()
        threading.Thread(target=self._drain, name="flows-mcp-stdout", daemon=True).start()

    def _drain(self) -> None:
        while True:
            data, done = self._out.get()
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(self._fd, view) :]
            except OSError as exc:  # the client closed its end
                self._settle(done, exc)
            else:
                self._settle(done, None)

    def _settle(self, done: asyncio.Future[None], error: OSError | None) -> None:
        def settle() -> None:
            if done.done():
                return
            if error is None:
                done.set_result(None)
            else:
                done.set_exception(error)

        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            self._loop.call_soon_threadsafe(settle)

    async def write(self, text: str) -> None:
        """Write ``text`` whole; raises ``anyio.ClosedResourceError`` once the client is gone."""
        done = self._loop.create_future()
        self._out.put((text.encode("utf-8"), done))
        try:
            await done
        except OSError as exc:
            raise anyio.ClosedResourceError from exc

    async def flush(self) -> None:
        """Nothing to flush: every write is on the wire when it returns."""
