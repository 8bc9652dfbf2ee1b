"""The agent's files attacked where they lie: links, FIFOs and directories in their place, and values
the schema admits but no calendar holds. Every ``sail`` command either answers or fails with one
coded line on stderr, in bounded time: never a hang, never a traceback.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from memory.ledger import (
    Acted,
    ActivityLog,
    Amount,
    DispatchSubmitted,
    Ledger,
    Outcome,
    Skipped,
)
from sail._config import SailConfig, save_config
from tests.conftest import run_python

USDC, WETH, ROUTER, AGENT = ("0x" + c * 40 for c in "1234")
KEY = "0x" + "00" * 31 + "02"
MAX_U64 = 2**64 - 1

#: what each command reads (its files must be regular; the others it never opens): every command
#: reads the snapshot (``why`` and ``ledger`` for the token metadata their figures are shown in)
_EVERY_FILE = {
    "memory/ledger.jsonl",
    "memory/ledger.jsonl.lock",
    "activity.jsonl",
    "activity.jsonl.lock",
    "memory/state.json",
}
READS = {"ledger": _EVERY_FILE, "why": _EVERY_FILE, "status": _EVERY_FILE, "tick": _EVERY_FILE}
TARGETS = sorted(READS["tick"])

DRIVER = """
import contextlib, io, json, sys
from sail._cli import main
out = {}
for command in sys.argv[2:]:
    err, std = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
        try:
            code = main([command, "--home", sys.argv[1]])
        except SystemExit as exc:
            code = exc.code
    out[command] = [code, err.getvalue(), std.getvalue()]
print(json.dumps(out))
"""


def run_sail(home: Path, *commands: str) -> dict[str, list]:
    """Run ``sail <command> --home HOME`` for each command in one fresh process, bounded in time."""
    done = run_python(DRIVER, str(home), *commands, env={"SAIL_PRIVATE_KEY": KEY}, timeout=90)
    assert done.returncode == 0, done.stderr  # a traceback out of main would land here
    result: dict[str, list] = json.loads(done.stdout)
    return result


def agent_home(root: Path, *, interval: int = 3600) -> Path:
    """An agent home with a config (its node unreachable), a ledger, an activity log and a snapshot."""
    home = root / "home"
    save_config(
        home,
        SailConfig(
            rpc_url="http://127.0.0.1:9",
            router=ROUTER,
            token_in=USDC,
            token_out=WETH,
            amount_in=25_000_000,
            interval_s=interval,
            min_balance=0,
            lock_timeout_s=5.0,
        ),
    )
    sail = home / ".sail"
    ActivityLog(sail).append(
        DispatchSubmitted(
            ts=1, chain_id=1, tx_hash="0x" + "ab" * 32, sender=AGENT, to=ROUTER, data="0x", action="noop",
            permission=None,
        )
    )  # fmt: skip
    with Ledger(sail).writer() as w:
        w.append(Skipped(ts=1000, block=1, chain_id=1, reason="balance 1 < min 2"))
    assert Ledger(sail).snapshot_path.exists()
    return home


def replace_with(path: Path, kind: str, spare: Path) -> None:
    """Put a FIFO, a directory or a link (to a copy of the file) where ``path`` was."""
    if path.exists():
        shutil.copyfile(path, spare)
        path.unlink()
    else:
        spare.write_bytes(b"")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    else:
        path.symlink_to(spare)


@pytest.mark.parametrize("kind", ["fifo", "dir", "link"])
@pytest.mark.parametrize("target", TARGETS)
def test_a_non_regular_file_where_the_agent_keeps_one_is_a_coded_error_never_a_hang(
    tmp_path: Path, target: str, kind: str
) -> None:
    home = agent_home(tmp_path)
    replace_with(home / ".sail" / target, kind, tmp_path / "spare")
    results = run_sail(home, "ledger", "why", "status", "tick")
    for command, (status, err, _) in results.items():
        if target in READS[command]:
            assert status == 1, (command, err)
            assert err.count("\n") == 1 and err.startswith("sail: error[ledger_not_a_file]: "), (command, err)
            assert str(home / ".sail" / target) in err and "Traceback" not in err
        else:
            assert status == 0, (command, err)


@pytest.mark.parametrize("kind", ["fifo", "dir", "link"])
@pytest.mark.parametrize("target", ["anvil-state.json", "anvil.lock"])
def test_the_embedded_chain_neither_loads_nor_dumps_through_a_link_nor_blocks_on_a_fifo(
    tmp_path: Path, target: str, kind: str
) -> None:
    home = agent_home(tmp_path)
    config = home / ".sail" / "config.toml"
    config.write_text(config.read_text().replace('rpc_url = "http://127.0.0.1:9"', 'rpc_url = "embedded"'))
    chain = home / ".sail" / "chain"
    chain.mkdir()
    victim = tmp_path / "spare"
    replace_with(chain / target, kind, victim)
    if kind == "link":
        victim.write_bytes(b"a file outside the home")
    (status, err, _) = run_sail(home, "tick")["tick"]
    assert status == 1 and err.startswith("sail: error[ledger_not_a_file]: "), err
    assert str(chain / target) in err and err.count("\n") == 1
    if kind == "link":  # anvil never ran: it would have loaded the target and dumped the chain into it
        assert victim.read_bytes() == b"a file outside the home"
    assert not (chain / "anvil-state.json").is_file() or target == "anvil-state.json"


@pytest.mark.parametrize("kind", ["fifo", "dir", "link"])
def test_a_config_that_is_not_a_regular_file_is_invalid_never_a_hang(tmp_path: Path, kind: str) -> None:
    home = agent_home(tmp_path)
    replace_with(home / ".sail" / "config.toml", kind, tmp_path / "spare")
    for command, (status, err, _) in run_sail(home, "status", "tick").items():
        assert status == 1 and err.startswith("sail: error[sail_config_invalid]: "), (command, err)
        assert err.count("\n") == 1


def test_the_last_tick_failing_on_a_fifo_is_recorded_with_its_code(tmp_path: Path) -> None:
    home = agent_home(tmp_path)
    replace_with(home / ".sail" / "memory" / "state.json", "fifo", tmp_path / "spare")
    run_sail(home, "tick")
    (home / ".sail" / "memory" / "state.json").unlink()
    (status, err, out) = run_sail(home, "status")["status"]
    assert status == 0, err
    assert "failed [ledger_not_a_file]" in out and "failed ticks since the last successful one: 1" in out


def test_schema_valid_but_enormous_times_and_intervals_print_no_traceback(tmp_path: Path) -> None:
    home = agent_home(tmp_path, interval=2**63 - 1)
    sail = home / ".sail"
    huge = Acted(
        ts=MAX_U64, block=MAX_U64, chain_id=MAX_U64, action="swap", permission=None,
        outcome=Outcome.CONFIRMED,
        tx_hash="0x" + "cd" * 32, gas_used=MAX_U64, token_in=USDC, token_out=WETH,
        amount_in=Amount(MAX_U64, "1.0 USDC"), amount_out=Amount(0, "0.0 WETH"), balances_after={USDC: 0},
    )  # fmt: skip
    with Ledger(sail).writer() as w:
        w.append(huge)
        w.append(
            Skipped(ts=MAX_U64, block=None, chain_id=1, reason="cadence: last acted 0s ago, interval 1s")
        )
    results = run_sail(home, "ledger", "why", "status")
    for command, (status, err, out) in results.items():
        assert (status, err) == (0, ""), command
        expected = "a time beyond the calendar" if command == "status" else f"ts {MAX_U64}"
        assert expected in out, (command, out)
    assert "next trade: not within any calendar" in results["status"][2]
    done = run_python(
        DRIVER.replace('"--home"', '"--json", "--home"'), str(home), "status", "ledger", "why", "journal"
    )
    assert done.returncode == 0, done.stderr
    as_json = {command: json.loads(out) for command, (_, _, out) in json.loads(done.stdout).items()}
    assert as_json["status"]["nextEligibleMs"] is None
    assert as_json["status"]["lastConfirmed"]["tsMs"] is None and as_json["why"][0]["ts"] == MAX_U64
    told = [s for day in as_json["journal"]["days"] for s in day["sentences"]]
    # the sentences stamped beyond what 64-bit milliseconds hold: null, as status's times
    assert [s["tsMs"] for s in told if s["kind"] == "trade"] == [None] and told[-1]["tsMs"] is None


def test_numbers_beyond_what_the_files_hold_are_usage_or_config_errors(tmp_path: Path) -> None:
    home = agent_home(tmp_path)
    code = "import sys; from sail._cli import main; sys.exit(main(sys.argv[1:]))"
    for argv in (["tick", "--now", str(2**64)], ["ledger", "--since", "-1"], ["why", "--limit", "0"]):
        done = run_python(code, *argv, "--home", str(home), env={"SAIL_PRIVATE_KEY": KEY})
        assert done.returncode == 2 and "Traceback" not in done.stderr, (argv, done.stderr)
    config = home / ".sail" / "config.toml"
    config.write_text(config.read_text().replace("interval_s = 3600", f"interval_s = {2**64}"))
    done = run_python(code, "status", "--home", str(home))
    assert done.returncode == 1 and done.stderr.startswith("sail: error[sail_config_invalid]: ")
    assert done.stderr.count("\n") == 1


def test_what_the_ledger_says_reaches_the_terminal_escaped(tmp_path: Path) -> None:
    """A skip's reason, an act's amounts: the ledger's words carry what the chain said (a contract's
    revert reason, a token's symbol), and a terminal must never take them for instructions."""
    home = agent_home(tmp_path)
    hostile = "\x1b[31m\x1b]0;title\x07\x9b2J"
    with Ledger(home / ".sail").writer() as w:
        w.append(Skipped(ts=2000, block=2, chain_id=1, reason=f"reverted: {hostile}"))
    for command, (status, err, out) in run_sail(home, "ledger", "why", "status").items():
        assert status == 0, (command, err)
        assert "reverted" in out or command == "status", (command, out)
        for raw in ("\x1b", "\x07", "\x9b"):
            assert raw not in out and raw not in err, (command, raw, out)
