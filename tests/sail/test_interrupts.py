"""Ctrl-C at any instant of a ``sail`` command: one diagnostic line (or JSON object), status 130,
never a traceback — while it imports its modules, in the middle of a tick, and as it returns.

Each SIGINT is sent by the process to itself at a known point (a stub module on ``PYTHONPATH`` that
the import chain loads, a failpoint), so nothing depends on timing. Mid-tick, what the ledger and
the activity log recorded stays, and the next ticks resolve the swap from the chain.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from memory.ledger import ActivityLog, DispatchSigned, TickFinished
from sail._node import AnvilNode
from tests._helpers.interrupts import one_line_130, run_cli, sigint_stubs
from tests.sail.test_anvil_dispatch import UNSENT_AFTER, Agent


def _sail(home: Path, *args: str, stubs: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    strip = ("FLOWS_", "SAIL_", "_ARGCOMPLETE")
    return run_cli("sail", *args, "--home", str(home), stubs=stubs, strip=strip, timeout=180, **env)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """An agent's home as ``sail init`` leaves it (a node that is never asked)."""
    folder = tmp_path / "home"
    init = _sail(
        folder, "init", "--rpc", "http://127.0.0.1:9", "--router", "0x" + "11" * 20, "--token-in",
        "0x" + "22" * 20, "--token-out", "0x" + "33" * 20, "--amount", "5", "--interval", "60",
        "--min-balance", "5",
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    return folder


@pytest.fixture
def stubs(tmp_path: Path) -> Iterator[Path]:
    """A folder whose ``orjson`` interrupts its own process as it is imported (``sail._cli`` imports
    it through ``memory.cli``, before the command line is there to catch a Ctrl-C)."""
    yield sigint_stubs(tmp_path / "stubs", "orjson")


@pytest.mark.parametrize("as_json", [False, True])
@pytest.mark.parametrize("command", ["status", "ledger", "tick"])
def test_ctrl_c_while_sail_imports_its_command_line_is_one_line_and_130(
    tmp_path: Path, stubs: Path, command: str, as_json: bool
) -> None:
    """Before: a traceback of the import, then the interpreter's own exit for a KeyboardInterrupt."""
    result = _sail(tmp_path, command, *(["--json"] if as_json else []), stubs=stubs)
    shown = one_line_130(result, "sail", as_json=as_json)
    assert result.stdout == ""
    assert "before the command began; nothing was read or written" in str(shown["message"])
    assert not (tmp_path / ".sail").exists()


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_as_sail_returns_is_one_line_and_130_after_its_output(home: Path, as_json: bool) -> None:
    result = _sail(
        home, "status", *(["--json"] if as_json else []), FLOWS_FAILPOINTS="sail.cli_returned=sigint"
    )
    shown = one_line_130(result, "sail", as_json=as_json)
    assert ("lastConfirmed" if as_json else "last confirmed") in result.stdout  # printed whole, before
    assert "as the command ended; what it recorded in the ledger and activity log stays" in str(
        shown["message"]
    )


def test_ctrl_c_while_a_tick_imports_web3_is_recorded_as_the_ticks_outcome(
    tmp_path: Path, home: Path
) -> None:
    """Inside the command (``sail tick`` imports web3 once it has read the config and the key): the
    command line reports it, with the agent's words, and the tick's outcome is on record."""
    folder = sigint_stubs(tmp_path / "stubs", "web3")
    result = _sail(home, "tick", stubs=folder, SAIL_PRIVATE_KEY="0x" + "44" * 32)
    shown = one_line_130(result, "sail", as_json=False)
    assert "what the ledger and activity log recorded stays as written" in str(shown["message"])
    (finished,) = [r for r in ActivityLog(home / ".sail").read() if isinstance(r, TickFinished)]
    assert (finished.outcome, finished.code) == ("failed", "interrupted")


@pytest.mark.slow
def test_ctrl_c_mid_tick_after_the_swap_was_written_ahead_leaves_one_swap_for_the_decision(
    anvil: AnvilNode, tmp_path: Path
) -> None:
    """SIGINT just after the write-ahead line (failpoint ``sail.logged``): the one line and 130, the
    tick's outcome recorded, and the ticks after it resolve the swap from the chain — exactly one."""
    agent = Agent(anvil, tmp_path)
    stopped = agent.tick(0, failpoints="sail.logged=sigint")
    assert stopped.returncode == 130, stopped.stderr
    assert "Traceback" not in stopped.stderr and len(stopped.stderr.splitlines()) == 1, stopped.stderr
    shown = orjson.loads(stopped.stderr)  # the agent ticks with --json
    assert shown["code"] == "interrupted" and "next `sail tick` resolves" in shown["message"], shown
    (signed,) = agent.activity(DispatchSigned)
    finished = agent.activity(TickFinished)
    assert [(f.outcome, f.code) for f in finished] == [("failed", "interrupted")]
    for at in (60, UNSENT_AFTER + 200, UNSENT_AFTER + 260):
        agent.ok(at)
    tx_hash = agent.assert_one_swap()
    assert tx_hash != signed.tx_hash  # never sent: resolved as unsent, and the decision taken again
