"""docs/MCP.md holds every tool's description and schemas as the server lists them, and the README's
client configuration starts a server a client can use."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import orjson
from mcp import ClientSession, StdioServerParameters, stdio_client

from flows.mcp._tools import TOOLS
from tests.conftest import ROOT
from tests.mcp.harness import CALL_TIMEOUT_S, call, init, mcp_runs, run, server_env


def _section(text: str, name: str) -> str:
    m = re.search(rf"^### `{name}`\n(.*?)(?=^### |\Z)", text, re.S | re.M)
    assert m, f"docs/MCP.md has no section for the tool {name}"
    return m.group(1)


def test_the_mcp_doc_holds_every_tools_description_and_schemas() -> None:
    text = (ROOT / "docs" / "MCP.md").read_text()
    for tool in TOOLS:
        section = _section(text, tool.name)
        blocks = re.findall(r"```json\n(.*?)```", section, re.S)
        assert [orjson.loads(b) for b in blocks] == [tool.input_schema, tool.output_schema], tool.name
        assert tool.description in section


def _readme_config() -> dict[str, Any]:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^## Use it from an AI agent\n(.*?)(?=^## )", text, re.S | re.M)
    assert m, "the README has no 'Use it from an AI agent' section"
    [block] = re.findall(r"```json\n(.*?)```", m.group(1), re.S)
    config: dict[str, Any] = orjson.loads(block)
    return config


def test_the_readme_client_configuration_starts_a_working_server(tmp_path: Path) -> None:
    [(name, entry)] = _readme_config()["mcpServers"].items()
    assert entry["command"] == "flows" and entry["args"][:1] == ["mcp"]
    args = list(entry["args"])
    db = tmp_path / "history.db"
    args[args.index("--db") + 1] = str(db)  # the example's path, moved into the test's store
    command = shutil.which("flows", path=str(Path(sys.executable).parent))
    assert command is not None, "the `flows` console script is not installed (pip install -e .)"
    params = StdioServerParameters(command=command, args=args, env=server_env())

    async def main() -> Any:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await init(session)
            with anyio.fail_after(CALL_TIMEOUT_S):
                tools = (await session.list_tools()).tools
            return tools, await call(session, "learn", text=f"configured as {name}")

    tools, learned = run(main)
    assert {t.name for t in tools} == {t.name for t in TOOLS}
    [root] = mcp_runs(db)
    assert learned["citation"]["runId"] == root.run_id
