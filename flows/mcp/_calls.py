"""How many calls an HTTP server has in progress, and the refusal of one past the bound.

Over stdio the pipe holds a client back (``_stdio.MAX_IN_FLIGHT``); over HTTP every client has its own
connections, and the SDK runs every request it is handed at once, so many clients sending slow calls
(a ``why`` over a big store, a locked history DB) were all accepted and held, each with its request
and its answer, without bound. Here a call takes a slot before it is run and gives it back when it is
over; past ``MAX_CALLS`` a call is refused at once (``McpBusy``), never queued.

A slot is taken by the HTTP gate, before the endpoint sees the request, and held until both the HTTP
exchange is over and the tool (or resource read) it asked for has finished: a client that hangs up
leaves its call running in the server, and that call keeps its slot. Everything here runs on the
server's event loop, so the count needs no lock.
"""

from __future__ import annotations

from flows.mcp._errors import McpBusy
from flows.mcp._stdio import MAX_IN_FLIGHT

MAX_CALLS = MAX_IN_FLIGHT
"""The most calls (``tools/call``, ``resources/read``, ``resources/list``) an HTTP server has in
progress at once; the same bound as the requests awaiting answers over stdio."""

RETRY_AFTER_S = 1
"""What a refused call is told to wait before trying again (``Retry-After``, seconds)."""

COUNTED = frozenset({"tools/call", "resources/read", "resources/list"})
"""The methods that take a slot: those that read or write the store. The others (``initialize``,
``ping``, ``tools/list``) are answered at once from what the server holds."""

BUSY_CODE = -32010
"""The JSON-RPC error code of a refused call: one of the codes JSON-RPC leaves to servers (-32000 to
-32099) that neither it nor the MCP SDK gives a meaning; ``data.code`` is ``mcp_busy``."""

SCOPE_KEY = "flows.mcp.slot"
"""Where the gate leaves a request's slot in its ASGI scope, for the handler to hold."""


class Slot:
    """One call's place among the calls in progress: given back when its last holder lets go."""

    def __init__(self, calls: Calls) -> None:
        self._calls = calls
        self._holders = 1

    def hold(self) -> bool:
        """Hold the slot too (the handler, while it runs); False when it was already given back."""
        if self._holders == 0:
            return False
        self._holders += 1
        return True

    def release(self) -> None:
        """Let go; the last holder's release gives the slot back."""
        self._holders -= 1
        if self._holders == 0:
            self._calls.taken -= 1


class Calls:
    """The calls one HTTP server has in progress, at most ``limit``."""

    def __init__(self, limit: int = MAX_CALLS) -> None:
        self.limit = limit
        self.taken = 0

    def take(self) -> Slot | None:
        """A slot for one more call; None when ``limit`` calls are in progress."""
        if self.taken >= self.limit:
            return None
        self.taken += 1
        return Slot(self)

    def hold(self, slot: object) -> Slot:
        """The slot a handler holds while it runs: the gate's ``slot`` for its request, or (when the
        gate's was given back, its client gone before the call began) a new one.

        Raises:
            McpBusy: ``limit`` calls are in progress.
        """
        if isinstance(slot, Slot) and slot.hold():
            return slot
        taken = self.take()
        if taken is None:
            raise self.busy()
        return taken

    def busy(self) -> McpBusy:
        """The refusal of a call past the bound."""
        return McpBusy(
            f"the server already has {self.limit} calls in progress, the most it runs at once; this "
            f"call was not run: send it again in {RETRY_AFTER_S} s or more",
            limit=self.limit,
            retry_after_s=RETRY_AFTER_S,
        )
