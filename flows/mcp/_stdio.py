"""stdin and stdout for the stdio transport, on daemon threads.

The SDK's own stdio transport reads and writes on worker threads that a stopping server (SIGTERM,
Ctrl-C) and the interpreter's exit both wait for, and a read blocked on stdin cannot be interrupted:
a server told to stop would hang until its client closed the pipe. So the wire is served here by
daemon threads over private copies of descriptors 0 and 1, while descriptor 0 is pointed at the null
device and descriptor 1 at stderr: nothing else in the process (a stray print) reads or corrupts the
wire. Each side holds at most one line in flight, and at most ``MAX_IN_FLIGHT`` requests are handed to
the SDK unanswered, so a client cannot fill our memory faster than we serve it, and no Python file
object's lock is held when the interpreter exits.

Every line that asks for an answer gets one, even when the SDK would drop it: a line that is not JSON
is answered with a JSON-RPC parse error (id null), a message of the wrong shape with invalid request
or invalid params under its id when it has a usable one, and a line longer than ``MAX_REQUEST_BYTES``
with an invalid-request error (its id read from the line's start), its bytes skipped without being
kept. Reading is linear in the line's length.

The end of stdin ends the session only once every request read before it is answered (``Asked``): a
client may send its requests, close its end and then read the answers (``flows mcp < requests``),
and the SDK, told of the end, would cancel the calls still running and answer none of them. A
request the client cancelled (``notifications/cancelled``) is not waited for, as the SDK never
answers one; nor are answers that can no longer be written (the client closed stdout too). If no
answer comes for ``END_WAIT_S`` seconds while some are awaited, the session ends without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import select
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import orjson

from flows.mcp._sessions import END_WAIT_S
from flows.mcp._wire import MAX_REQUEST_BYTES, oversized_answer, unreadable_answer

CHUNK = 65536
_PIECE = select.PIPE_BUF
"""The most one write to stdout hands the pipe. A blocking write to a pipe returns only once all of
it is in, though a full pipe takes it a page (4 KiB on Linux) at a time as the client reads: writes
of 16 KiB left a client reading slowly, page after page, seen reading nothing until a whole one was in
(one reading under 16 KiB per ``END_WAIT_S`` was cut off mid-answer). One of at most ``PIPE_BUF``
bytes goes in whole as soon as there is room for it, so each return is a page the client read. Blocking
writes, rather than non-blocking ones: the O_NONBLOCK flag belongs to the open file, which stdout may
share with other processes (a terminal, a file the parent opened)."""

MAX_IN_FLIGHT = 32
"""The most requests handed to the SDK and not yet answered: past it stdin is not read until one is
answered (or none is for ``END_WAIT_S`` seconds). The SDK runs every request it reads at once, each
holding its line (up to ``MAX_REQUEST_BYTES``), so while calls were slow (a locked history DB) a
client writing without pause held 1.2 MB of the server's memory a request, without bound."""

_TOO_LONG = object()
"""Handed over in place of a line longer than the limit (with the line's first bytes)."""


def _claim(fd: int, replacement: int) -> int:
    """A private copy of ``fd``; ``fd`` itself then refers to what ``replacement`` refers to."""
    private = os.dup(fd)
    os.dup2(replacement, fd)
    return private


def _message(text: str) -> dict[str, Any] | None:
    """The JSON object ``text`` holds (integers past 64 bits read whole); None for anything else."""
    try:
        read = orjson.loads(text)
        if isinstance(read, dict) and isinstance(read.get("id"), float):
            read = json.loads(text)  # orjson reads an integer past 64 bits as a float
    except (orjson.JSONDecodeError, ValueError, RecursionError):
        try:
            read = json.loads(text)  # NaN, infinities, numbers past a double: the SDK reads them too
        except (ValueError, RecursionError):
            return None
    return read if isinstance(read, dict) else None


def _request_key(request_id: object) -> object:
    """A request id as the SDK correlates it: an integer, or a string that reads as one, is one id."""
    if isinstance(request_id, str):
        try:
            return int(request_id)
        except ValueError:
            return request_id
    return request_id


class Asked:
    """The requests handed to the SDK and not yet answered, by id (a count each: an id may be used
    twice), so the end of stdin can wait for their answers."""

    def __init__(self) -> None:
        self._open: Counter[object] = Counter()
        self._changed = asyncio.Event()
        self._broken = False
        # a wait for room ran out with no answer written: until one is, stdin is read without
        # waiting (a client that reads no answer would otherwise hold each further line, and the
        # end of stdin behind them, for a whole wait each)
        self._stalled = False
        # when the wire last took a byte (``StdoutWire`` sets it): a wait for answers runs out only
        # once nothing has moved for the wait, so a client reading a long answer slowly keeps it
        self.moved_at: Callable[[], float] = time.monotonic

    def read(self, text: str) -> None:
        """Note what the client's line ``text`` (one the SDK takes) asks for."""
        message = _message(text)
        if message is None:
            return
        method = message.get("method")
        if "id" in message and isinstance(method, str):
            request_id = message["id"]
            if isinstance(request_id, (str, int)) and not isinstance(request_id, bool):
                self._open[_request_key(request_id)] += 1
        elif method == "notifications/cancelled" and isinstance(message.get("params"), dict):
            self._settle(message["params"].get("requestId"))  # the SDK never answers it

    def wrote(self, text: str, delivered: bool) -> None:
        """Note the server's line ``text``, written when ``delivered`` (else the wire is gone)."""
        if not delivered:
            self._broken = True
        else:
            self._stalled = False
        message = _message(text)
        if message is not None and "method" not in message and ("result" in message or "error" in message):
            self._settle(message.get("id"))
        self._changed.set()

    def _settle(self, request_id: object) -> None:
        if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
            return
        key = _request_key(request_id)
        if self._open[key] > 1:
            self._open[key] -= 1
        else:
            self._open.pop(key, None)
        self._changed.set()

    async def room(self, limit: int, quiet_s: float | None = None) -> None:
        """Return once fewer than ``limit`` requests noted await their answers, the wire is gone, or
        no answer has come for ``quiet_s`` seconds (``END_WAIT_S``; a call that never ends must not
        stop the wire); at once while the last such wait ran out and no answer has been written
        since (``_stalled``)."""
        while sum(self._open.values()) >= limit and not self._broken and not self._stalled:
            if not await self._changed_within(END_WAIT_S if quiet_s is None else quiet_s):
                self._stalled = True
                return

    async def answered(self, quiet_s: float | None = None) -> None:
        """Return once every request noted is answered (or cancelled), the wire is gone, or no
        answer has come for ``quiet_s`` seconds (``END_WAIT_S``)."""
        while self._open and not self._broken:
            if not await self._changed_within(END_WAIT_S if quiet_s is None else quiet_s):
                return

    async def _changed_within(self, quiet_s: float) -> bool:
        """Wait for an answer (or a cancel) to be noted; False once none has been for ``quiet_s``
        seconds in which the wire took no byte either (an answer being written to a client that
        reads slowly is progress: one that took longer than the wait to go out would otherwise end
        the session, and the answers after it would never be written)."""
        while True:
            self._changed.clear()
            with anyio.move_on_after(quiet_s) as waited:
                await self._changed.wait()
            if not waited.cancelled_caught:
                return True
            if time.monotonic() - self.moved_at() >= quiet_s:
                return False


class StdinLines:
    """The lines of stdin, as an async iterator of text (what the SDK's transport reads).

    Lines the SDK would drop unanswered are answered here on ``wire`` and never reach it.
    """

    def __init__(self, wire: StdoutWire, limit: int = MAX_REQUEST_BYTES) -> None:
        self._loop = asyncio.get_running_loop()
        self._wire = wire
        self._asked = wire.asked
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
                self._wire.ended()
                await self._asked.answered()  # the requests read before the end are answered first
                raise StopAsyncIteration
            text = line.decode("utf-8", errors="replace")  # as the SDK's own stdio transport reads
            answer = unreadable_answer(text)
            if answer is None:
                await self._asked.room(MAX_IN_FLIGHT)  # stdin waits while too many calls run
                self._asked.read(text)
                return text
            await self._wire.write(answer)


class StdoutWire:
    """stdout, as the async text file the SDK's transport writes lines to."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.asked = Asked()
        self._fd = _claim(1, 2)
        self._ended_at: float | None = None  # when stdin ended (``time.monotonic``)
        self._moved_at = time.monotonic()  # when a byte was last written (by the writing thread)
        self.asked.moved_at = lambda: self._moved_at
        self._out: queue.SimpleQueue[tuple[bytes, asyncio.Future[None]]] = queue.SimpleQueue()
        threading.Thread(target=self._drain, name="flows-mcp-stdout", daemon=True).start()

    def _drain(self) -> None:
        while True:
            data, done = self._out.get()
            try:
                view = memoryview(data)
                while view:  # in pieces, so that a client reading slowly is seen reading (``_PIECE``)
                    view = view[os.write(self._fd, view[:_PIECE]) :]
                    self._moved_at = time.monotonic()
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

    def ended(self) -> None:
        """Note that stdin has ended: from now on a write that has not finished after ``END_WAIT_S``
        seconds in which no byte could be written is given up (``write``)."""
        if self._ended_at is None:
            self._ended_at = time.monotonic()

    async def write(self, text: str) -> None:
        """Write ``text`` whole; raises ``anyio.ClosedResourceError`` once the client is gone.

        Once stdin has ended, a client that does not read stdout (its pipe full, the write blocked)
        counts as gone after ``END_WAIT_S`` seconds in which no byte could be written: the write is
        given up, and the session ends. A client that reads, however slowly, gets every answer, as
        long as the pipe can take a byte within the wait: a full pipe takes bytes again once the
        client has read a whole page of it (Linux), so that is 4 KiB each ``END_WAIT_S`` (about 140
        bytes a second at 30 s).
        Before, the server never exited: the SDK's writer waited on the blocked write for good,
        after the session's root run had ended.

        An answer given up part-written stays so: its bytes cannot be taken back, and the pipe will
        take no more (not even a newline to close the line). It is the last thing on stdout, cut off
        with no newline, which under the newline-delimited framing is no message: a client's reader
        sees the wire end inside a line (the SDK's own client drops such a tail), never a line that
        reads as a different answer, nor a later answer glued onto it: answers go out one after
        another, each whole before the next begins, and the server exits."""
        done = self._loop.create_future()
        self._out.put((text.encode("utf-8"), done))
        try:
            while not done.done():
                await asyncio.wait({done}, timeout=1.0)
                ended = self._ended_at
                quiet = None if ended is None else time.monotonic() - max(ended, self._moved_at)
                if not done.done() and quiet is not None and quiet > END_WAIT_S:
                    raise BrokenPipeError("the client reads no answer since stdin ended")
            done.result()
        except OSError as exc:
            self.asked.wrote(text, delivered=False)
            raise anyio.ClosedResourceError from exc
        self.asked.wrote(text, delivered=True)

    async def flush(self) -> None:
        """Nothing to flush: every write is on the wire when it returns."""
