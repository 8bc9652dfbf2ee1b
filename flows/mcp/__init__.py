"""``flows mcp``: the memory as a Model Context Protocol server (see docs/MCP.md).

The MCP SDK (the ``mcp`` extra) is imported only when the command runs, so ``import flows``,
``import flows.mcp`` and every other ``flows`` command work without it. The public face: the
command's arguments and handler, and the server's errors (the tree is in ``flows.mcp._errors``).
"""

from flows.mcp._command import add_mcp_arguments, cmd_mcp
from flows.mcp._errors import (
    McpArgumentsInvalid,
    McpBusy,
    McpError,
    McpHeaderRepeated,
    McpHeadTooLarge,
    McpListenFailed,
    McpResourceUnknown,
    McpSessionEnded,
    McpSessionsFull,
    McpTokenRequired,
    McpToolFailed,
    McpToolUnknown,
    McpUnauthorized,
    McpUnavailable,
)

__all__ = [
    "McpArgumentsInvalid",
    "McpBusy",
    "McpError",
    "McpHeadTooLarge",
    "McpHeaderRepeated",
    "McpListenFailed",
    "McpResourceUnknown",
    "McpSessionEnded",
    "McpSessionsFull",
    "McpTokenRequired",
    "McpToolFailed",
    "McpToolUnknown",
    "McpUnauthorized",
    "McpUnavailable",
    "add_mcp_arguments",
    "cmd_mcp",
]
