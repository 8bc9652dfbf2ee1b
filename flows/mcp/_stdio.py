"""stdin and stdout for the stdio transport, on daemon threads.

The SDK's own stdio transport reads and writes on worker threads that a stopping server (SIGTERM,
Ctrl-C) and the interpreter's exit both wait for, and a read blocked on stdin cannot be interrupted:
a server told to stop would hang until its client closed the pipe. So the wire is served here by
daemon threads over private copies of descriptors 0 and 1, while descriptor 0 is pointed at the null
device and descriptor 1 at stderr: nothing else in the process (a stray print) reads or corrupts the
wire. Each side holds at most one line in flight, so a client cannot fill our memory faster than we
serve it, and no Python file object's lock is held when the interpreter exits.

Every line that asks for an answer gets one, even when the SDK would drop it: a line that is not JSON
is answered with a JSON-RPC parse error (id null), a message of the wrong shape with invalid request
or invalid params under its id when it has a usable one, and a line longer than ``MAX_REQUEST_BYTES``
with an invalid-request error (its id read from the line's start), its bytes skipped without being
kept. Reading is linear in the line's length.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading

import anyio

from flows.mcp._wire import MAX_REQUEST_BYTES, oversized_answer, unreadable_answer

CHUNK = 65536

_TOO_LONG = object()
"""Handed over in place of a line longer than the limit (with the line's first bytes)."""


def _claim(fd: int, replacement: int) -> int:
    """A private copy of ``fd``; ``fd`` itself then refers to what ``replacement`` refers to."""
    private = os.dup(fd)
    os.dup2(replacement, fd)
    return private


class StdinLines:
    """The lines of stdin, as an async iterator of text (what the SDK's transport reads).

    Lines the SDK would drop unanswered are answered here on ``wire`` and never reach it.
    """

    def __init__(self, wire: StdoutWire, limit: int = MAX_REQUEST_BYTES) -> None:
        self._loop = asyncio.get_running_loop()
        self._wire = wire
        self._limit = limit
        self._lines: asyncio.Queue[bytes | tuple[object, bytes]] = asyncio.Queue()
        self._room = threading.Semaphore(1)
        null = os.open(os.devnull, os.O_RDONLY)
        try:
            fd = _claim(0, null)
        finally:
            os.close(null)
        threading.Thread(target=self._pump, args=(fd,), name="flows-mcp-stdin", daemon=True).start()

    def _hand_over(self, line: bytes | tuple[object, bytes]) -> None:
        self._room.acquire()  # the previous line was taken
        self._loop.call_soon_threadsafe(self._lines.put_nowait, line)

    def _pump(self, fd: int) -> None:
        try:
            self._split(fd)
        except (RuntimeError, OSError):  # the loop is gone, or stdin failed: stop reading
            return

    def _split(self, fd: int) -> None:
        # Each byte is looked at once: a chunk is searched for newlines only from where the last
        # search stopped, and a line past the limit is dropped as it arrives (its first bytes kept
        # to name its id), so a huge line costs time in proportion to its size and no memory.
        pending = bytearray()
        skipping: bytes | None = None  # the start of a line past the limit, while its rest goes by
        while chunk := os.read(fd, CHUNK):
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                if skipping is not None:
                    self._hand_over((_TOO_LONG, skipping))
                    skipping = None
                elif len(pending) + end - start > self._limit:
                    self._hand_over((_TOO_LONG, bytes((pending + chunk[start:end])[:4096])))
                else:
                    self._hand_over(bytes(pending + chunk[start : end + 1]))
                pending.clear()
                start = end + 1
            if skipping is None:
                pending += chunk[start:]
                if len(pending) > self._limit:
                    skipping = bytes(pending[:4096])
                    pending.clear()
        if skipping is not None:
            self._hand_over((_TOO_LONG, skipping))
        elif pending:
            self._hand_over(bytes(pending))
        self._hand_over(b"")

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while True:
            line = await self._lines.get()
            self._room.release()
            if isinstance(line, tuple):
                await self._wire.write(oversized_answer(line[1], self._limit))
                continue
            if not line:
                raise StopAsyncIteration
            text = line.decode("utf-8", errors="replace")  # as the SDK's own stdio transport reads
            answer = unreadable_answer(text)
            if answer is None:
                return text
            await self._wire.write(answer)


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
