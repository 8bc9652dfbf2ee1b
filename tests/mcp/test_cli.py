"""`flows mcp` as a command: what it imports, and how it fails before serving (one line each)."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import orjson
import pytest

import flows.mcp._errors as mcp_errors
from tests.conftest import ROOT, run_python
from tests.mcp.harness import START_TIMEOUT_S, mcp_argv, server_env

SDK_MODULES = ("mcp", "mcp_types", "uvicorn", "starlette", "jsonschema", "anyio", "httpx2", "pydantic")


def test_importing_flows_and_building_its_cli_does_not_import_the_mcp_sdk() -> None:
    code = (
        "import sys, flows, flows._cli, flows.mcp;"
        "flows._cli.build_parser();"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {SDK_MODULES!r}))"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_without_the_sdk_flows_mcp_says_how_to_install_it_and_other_commands_work(tmp_path: Path) -> None:
    db = str(tmp_path / "history.db")
    code = (
        "import sys\n"
        "for name in ('mcp', 'mcp_types', 'uvicorn'):\n"
        "    sys.modules[name] = None  # as if the extra were not installed\n"
        "from flows._cli import main\n"
        "print(main(['recall', '--db', sys.argv[1]]))\n"
        "sys.exit(main(['mcp', '--db', sys.argv[1]]))\n"
    )
    result = run_python(code, db)
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "0"
    [line] = result.stderr.splitlines()
    assert re.fullmatch(
        r"flows: error\[mcp_unavailable\]: `flows mcp` needs the MCP SDK \(\w+ is not installed\): "
        r"pip install 'flows-memory\[mcp\]'",
        line,
    ), line


def _start(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        mcp_argv(db, *args),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=server_env(),
        timeout=START_TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("http", [False, True])
def test_a_server_whose_history_db_is_damaged_exits_with_one_line(tmp_path: Path, http: bool) -> None:
    db = tmp_path / "history.db"
    db.write_bytes(b"this is not a database, it is a note\n" * 100)
    result = _start(db, *(["--http", "127.0.0.1:0"] if http else []))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"flows: error[memory_unreachable]: the history DB {db} is damaged (file is not a database,"
        " SQLITE_NOTADB): move it aside and run `flows sync`, which rebuilds it from the learned files"
        " and the journal\n"
    )


def test_a_server_whose_journal_cannot_be_reached_exits_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    result = _start(tmp_path / "history.db", "--journal", f"postgresql://nobody@127.0.0.1:{port}/x", "--json")
    assert result.returncode == 1
    assert result.stdout == ""
    error = orjson.loads(result.stderr)
    assert error["code"] == "journal_unavailable"
    assert error["runId"] is None


def test_an_address_in_use_exits_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _start(tmp_path / "history.db", "--http", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert result.stderr == (
        f"flows: error[mcp_listen_failed]: cannot listen on 127.0.0.1:{port}: Address already in use; "
        "choose another port or host\n"
    )


def test_every_code_of_the_mcp_server_has_its_row_in_the_surface_table() -> None:
    table = (ROOT / "docs" / "SURFACE.md").read_text()
    codes = {
        cls.code
        for cls in vars(mcp_errors).values()
        if isinstance(cls, type) and issubclass(cls, mcp_errors.McpError) and cls is not mcp_errors.McpError
    }
    assert len(codes) == 13
    assert sorted(c for c in codes if f"| `{c}` |" not in table) == []


def test_the_help_names_every_option() -> None:
    argv = [*mcp_argv(Path("x"))[:4], "--help"]
    result = subprocess.run(argv, capture_output=True, text=True, env=server_env(), timeout=60, check=False)
    assert result.returncode == 0
    options = ("--db", "--journal", "--scope", "--http", "--idle-timeout", "--max-sessions")
    options += ("$FLOWS_MCP_TOKEN",)
    for option in options:
        assert option in result.stdout
