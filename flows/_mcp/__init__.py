"""``flows mcp``: the memory as a Model Context Protocol server (see docs/MCP.md).

The MCP SDK (the ``mcp`` extra) is imported only when the command runs, so ``import flows`` and every
other ``flows`` command work without it.
"""

from flows._mcp._command import add_mcp_arguments, cmd_mcp

__all__ = ["add_mcp_arguments", "cmd_mcp"]
