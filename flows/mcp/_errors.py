"""Errors of the MCP server.

The tree (all under ``FlowsError``, so the CLI prints them as one line like every other failure)::

    McpError                base: the server's own failures
    ├── McpUnavailable      mcp_unavailable: the `mcp` extra is not installed
    ├── McpTokenRequired    mcp_token_required: --http names a non-loopback host without a token
    ├── McpListenFailed     mcp_listen_failed: the --http address cannot be bound
    ├── McpArgumentsInvalid mcp_arguments_invalid: a tool call's arguments break the tool's schema
    ├── McpToolUnknown      mcp_tool_unknown: a call names no tool this server has
    ├── McpToolFailed       mcp_tool_failed: a tool raised an error that has no code of its own
    ├── McpSessionEnded     mcp_session_ended: a write reached a session that had already ended
    ├── McpUnauthorized     mcp_unauthorized: an HTTP request without the right bearer token
    ├── McpResourceUnknown  mcp_resource_unknown: a resource URI this server does not serve
    ├── McpBusy             mcp_busy: an HTTP server already has its most calls in progress
    ├── McpHeadTooLarge     mcp_head_too_large: an HTTP request head over 16 KiB (431)
    ├── McpHeaderRepeated   mcp_header_repeated: an HTTP request names a header the server reads twice
    └── McpSessionsFull     mcp_sessions_full: an HTTP server already holds its most sessions open

Memory and journal errors met by a tool keep their own codes; they reach the client as tool errors.
"""

from __future__ import annotations

from flows._errors import FlowsError


class McpError(FlowsError):
    """Base of the MCP server's errors."""

    code = "mcp_error"


class McpUnavailable(McpError):
    """The MCP SDK is not installed (the ``mcp`` extra)."""

    code = "mcp_unavailable"


class McpTokenRequired(McpError):
    """Serving HTTP beyond loopback needs a bearer token in ``$FLOWS_MCP_TOKEN``."""

    code = "mcp_token_required"


class McpListenFailed(McpError):
    """The HTTP server cannot listen on the address asked for."""

    code = "mcp_listen_failed"


class McpArgumentsInvalid(McpError):
    """A tool call's arguments do not match the tool's input schema; ``argument`` names the bad one."""

    code = "mcp_arguments_invalid"

    def __init__(self, message: str, *, tool: str, argument: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool
        self.argument = argument


class McpToolUnknown(McpError):
    """A call names a tool this server does not have."""

    code = "mcp_tool_unknown"


class McpToolFailed(McpError):
    """A tool raised an error without a code of its own (a bug); ``__cause__`` is that error."""

    code = "mcp_tool_failed"


class McpSessionEnded(McpError):
    """A write of a session arrived after the session ended (its root runs are finished)."""

    code = "mcp_session_ended"


class McpUnauthorized(McpError):
    """An HTTP request did not carry the server's bearer token."""

    code = "mcp_unauthorized"


class McpResourceUnknown(McpError):
    """A resource URI that names no scope of this server."""

    code = "mcp_resource_unknown"


class McpBusy(McpError):
    """A call that found the HTTP server with ``limit`` calls already in progress: it was not run."""

    code = "mcp_busy"

    def __init__(self, message: str, *, limit: int, retry_after_s: int) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after_s = retry_after_s


class McpHeadTooLarge(McpError):
    """An HTTP request's head (its request line and headers) is over ``limit`` bytes, the most the
    server reads; answered ``431`` before any MCP processing, and the connection closed."""

    code = "mcp_head_too_large"

    def __init__(self, message: str, *, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class McpHeaderRepeated(McpError):
    """An HTTP request carries ``header`` (one the server reads: the token, the session, the host, the
    origin, the length) ``count`` times: which one counts is ambiguous (the SDK reads the first, a
    dictionary of them the last), so the request is refused ``400`` before anything acts on it."""

    code = "mcp_header_repeated"

    def __init__(self, message: str, *, header: str, count: int) -> None:
        super().__init__(message)
        self.header = header
        self.count = count


class McpSessionsFull(McpError):
    """An ``initialize`` that found the HTTP server with ``limit`` sessions open (``--max-sessions``):
    no session was opened. Sessions idle for ``idle_timeout_s`` are ended, freeing their places."""

    code = "mcp_sessions_full"

    def __init__(self, message: str, *, limit: int, retry_after_s: int, idle_timeout_s: float) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.idle_timeout_s = idle_timeout_s
