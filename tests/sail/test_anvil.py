"""Across process boundaries, over JSON-RPC on loopback: a real anvil node (npm @foundry-rs/anvil).

Every tick here is ``python -m sail tick`` in a fresh process: nothing survives in memory between
ticks, so what they remember comes from the ledger on disk and the chain.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from web3 import Web3

from memory.ledger import Acted, Ledger, Outcome, Skipped
from sail._deploy import Deployment, deploy_market
from sail._errors import SailNodeUnavailable
from sail._node import ANVIL_KEYS, AnvilNode, embedded_chain, find_anvil
from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def sail(
    home: Path, *argv: str, now: int | None = None, key: str = ANVIL_KEYS[1], failpoints: str = ""
) -> subprocess.Popen[str]:
    """Start ``python -m sail`` in a fresh process."""
    extra = [] if now is None else ["--now", str(now)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SAIL_PRIVATE_KEY": key, "FLOWS_FAILPOINTS": failpoints}
    return subprocess.Popen(
        [sys.executable, "-m", "sail", *argv, "--home", str(home), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> str:
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out


@pytest.fixture
def agent_home(anvil: AnvilNode, tmp_path: Path) -> tuple[Path, Deployment, Web3]:
    """A market deployed on the anvil, and an agent home initialised with ``sail init``."""
    w3 = Web3(Web3.HTTPProvider(anvil.url))
    owner, agent = w3.eth.accounts[0], w3.eth.accounts[1]
    market = deploy_market(w3, owner, agent)
    args = [
        "init", "--rpc", anvil.url, "--router", market.router, "--token-in", market.usdc,
        "--token-out", market.weth, "--amount", "25000000", "--interval", "3600",
        "--min-balance", "25000000", "--permission", "perm-1",
    ]  # fmt: skip
    finish(sail(tmp_path, *args))
    return tmp_path, market, w3


def test_fresh_processes_honour_cadence_and_ledger_each_dispatch_once_under_races_and_kills(
    anvil: AnvilNode, agent_home: tuple[Path, Deployment, Web3]
) -> None:
    home, market, w3 = agent_home
    now = int(w3.eth.get_block("latest")["timestamp"])
    submitted = json.loads(finish(sail(home, "tick", "--json", now=now)))["submitted"]
    assert (
        submitted is not None and Ledger(home / ".sail").entries() == []
    )  # nothing is ledgered on the submitting tick

    # Two ticks at once, each a fresh process: the ledger's lock serialises them; the dispatch is
    # ledgered once and both then skip on cadence, read from the ledger (no in-memory state).
    racers = [sail(home, "tick", "--json", now=now + 60) for _ in range(2)]
    outs = [json.loads(finish(p)) for p in racers]
    assert sorted(len(o["reconciled"]) for o in outs) == [0, 1]
    entries = Ledger(home / ".sail").entries()
    acted = [e for e in entries if isinstance(e, Acted)]
    assert [(e.tx_hash, e.outcome) for e in acted] == [(submitted, Outcome.CONFIRMED)]
    skips = [e.reason for e in entries if isinstance(e, Skipped)]
    assert len(skips) == 2 and all(r.startswith("cadence: last acted ") for r in skips)
    assert all(o["submitted"] is None for o in outs)

    agent = w3.eth.accounts[1]
    token = w3.eth.contract(address=market.weth, abi=_balance_abi())
    assert acted[0].balances_after is not None
    assert acted[0].balances_after[market.weth] == token.functions.balanceOf(agent).call()

    # One interval after the confirmed block, a fresh process acts again (its block at that time).
    anvil.rpc("evm_setNextBlockTimestamp", acted[0].ts + 3600)
    later = json.loads(finish(sail(home, "tick", "--json", now=acted[0].ts + 3600)))
    assert later["submitted"] is not None and later["skipped"] is None

    # A tick SIGKILLed right after the acted line is fsync'd (before the snapshot is updated, before
    # its skip is written): the rerun does not ledger that dispatch again.
    killed = sail(home, "tick", now=acted[0].ts + 3660, failpoints="ledger.reconcile_after_append=kill")
    killed.communicate(timeout=120)
    assert killed.returncode == -9
    last = Ledger(home / ".sail").entries()[-1]
    assert isinstance(last, Acted)
    assert (last.tx_hash, last.outcome) == (later["submitted"], Outcome.CONFIRMED)
    rerun = json.loads(finish(sail(home, "tick", "--json", now=acted[0].ts + 3720)))
    assert rerun["reconciled"] == [] and rerun["skipped"].startswith("cadence: last acted ")
    hashes = [e.tx_hash for e in Ledger(home / ".sail").entries() if isinstance(e, Acted)]
    assert hashes == [submitted, later["submitted"]]
    assert Ledger(home / ".sail").last_confirmed().tx_hash == later["submitted"]  # type: ignore[union-attr]


def test_an_embedded_agent_keeps_its_chain_and_its_memory_across_fresh_processes(tmp_path: Path) -> None:
    if find_anvil() is None and shutil.which("npm") is None:
        pytest.skip("anvil is not installed and npm is not on PATH, so it cannot be (npm ci installs it)")
    finish(sail(tmp_path, "init", "--embedded", "--interval", "3600", "--permission", "perm-e"))
    first = json.loads(finish(sail(tmp_path, "tick", "--json")))
    second = json.loads(finish(sail(tmp_path, "tick", "--json")))
    assert first["submitted"] is not None
    (entry,) = second["reconciled"]
    # the receipt, the block and balanceOf at that block were read from a chain restarted from disk
    assert (entry["txHash"], entry["outcome"], entry["permission"]) == (
        first["submitted"],
        "confirmed",
        "perm-e",
    )
    assert entry["amountOut"] == {"baseUnits": "10000000000000000", "human": "0.01 WETH"}
    assert entry["balancesAfter"][entry["tokenIn"]] == str(475 * 10**6)
    assert second["skipped"].startswith("cadence: last acted ")
    assert (tmp_path / ".sail" / "chain" / "anvil-state.json").exists()


def _nodes_of(home: Path) -> list[int]:
    """The pids of anvil processes serving ``home``'s embedded chain (zombies left out)."""
    out = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True, check=True)
    return [
        int(pid)
        for pid, state, *args in (line.split(maxsplit=2) for line in out.stdout.splitlines())
        if not state.startswith("Z") and "anvil" in " ".join(args) and str(home) in " ".join(args)
    ]


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_an_embedded_tick_killed_after_its_swap_was_mined_leaves_no_node_and_loses_no_block(
    tmp_path: Path, how: str
) -> None:
    """The embedded chain lives in a node the tick starts and dumps to disk when it stops it. A tick
    killed (cron's ``timeout``: SIGTERM, or SIGKILL) after its swap was mined left the node running
    on its own, its chain not dumped: the next tick loaded the chain without the swap (whose receipt
    the killed tick had seen), and the node, stopped later, dumped its older chain over the file."""
    if find_anvil() is None and shutil.which("npm") is None:
        pytest.skip("anvil is not installed and npm is not on PATH, so it cannot be (npm ci installs it)")
    finish(sail(tmp_path, "init", "--embedded", "--interval", "3600", "--permission", "perm-k"))
    try:
        _kill_a_tick_after_its_swap_was_mined(tmp_path, how)
    finally:
        for pid in _nodes_of(tmp_path):  # a node left running fails the test, and is stopped here
            os.kill(pid, signal.SIGKILL)


def _kill_a_tick_after_its_swap_was_mined(tmp_path: Path, how: str) -> None:
    if how == "SIGKILL":
        killed = sail(tmp_path, "tick", failpoints="sail.settled=kill")
        killed.communicate(timeout=120)
    else:  # stopped from outside, as ``timeout`` does, once the receipt is logged
        killed = sail(tmp_path, "tick", failpoints="sail.settled=sleep60000")
        log = tmp_path / ".sail" / "activity.jsonl"
        deadline = time.monotonic() + 100
        while "dispatch_executed" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and killed.poll() is None, "the tick never logged its receipt"
            time.sleep(0.1)
        killed.send_signal(signal.SIGTERM)
        killed.communicate(timeout=60)
    assert killed.returncode == -getattr(signal, how)
    executed = [
        json.loads(line)
        for line in (tmp_path / ".sail" / "activity.jsonl").read_text().splitlines()
        if '"dispatch_executed"' in line
    ]
    assert len(executed) == 1
    deadline = time.monotonic() + 60  # the node, told by the kernel, dumps its chain and exits
    while _nodes_of(tmp_path):
        assert time.monotonic() < deadline, f"the killed tick's node runs on: {_nodes_of(tmp_path)}"
        time.sleep(0.1)
    after = json.loads(finish(sail(tmp_path, "tick", "--json")))
    (entry,) = after["reconciled"]  # from the chain the next tick loaded: the swap is in it
    assert (entry["txHash"], entry["outcome"]) == (executed[0]["txHash"], "confirmed")
    assert after["submitted"] is None and after["skipped"].startswith("cadence: last acted ")
    assert _nodes_of(tmp_path) == []


def _need_anvil() -> Path:
    if find_anvil() is None and shutil.which("npm") is None:
        pytest.skip("anvil is not installed and npm is not on PATH, so it cannot be (npm ci installs it)")
    from sail._node import ensure_anvil

    return ensure_anvil()


def test_the_embedded_chain_starts_the_anvil_binary_itself_which_holds_the_lock(tmp_path: Path) -> None:
    """npm's ``node_modules/.bin/anvil`` is a Node.js script that spawns the binary: run through it,
    the process sail sent SIGTERM, waited for and handed the lock to was the script, not anvil."""
    binary = _need_anvil()
    with embedded_chain(tmp_path) as node:
        assert node._proc is not None
        pid = node._proc.pid
        assert os.readlink(f"/proc/{pid}/exe") == str(binary.resolve())
        assert binary.read_bytes()[:2] != b"#!"
        held = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        assert str(tmp_path / "chain" / "anvil.lock") in held
        # the node's own children: none (a wrapper's child would be the real node)
        ps = ["ps", "-o", "pid=", "--ppid", str(pid)]
        assert subprocess.run(ps, capture_output=True, text=True, check=False).stdout.split() == []
    assert _nodes_of(tmp_path) == []


def test_the_next_holder_of_the_embedded_chain_loads_every_block_the_last_one_mined(tmp_path: Path) -> None:
    """The lock is let go only once the node has dumped the chain. Through npm's wrapper the wait
    ended when the wrapper exited, at once, while anvil was still dumping (about a second for 1,000
    blocks with their states): the next holder loaded the chain as it was before, and its blocks were
    lost for good when the first node's dump landed over the file."""
    _need_anvil()
    try:
        with embedded_chain(tmp_path) as node:
            node.rpc("anvil_mine", hex(1000))
            first = int(str(node.rpc("eth_blockNumber")), 16)
            first_hash = _block_hash(node, first)
        with embedded_chain(tmp_path) as node:  # at once, as the next tick would
            loaded = int(str(node.rpc("eth_blockNumber")), 16)
            node.rpc("anvil_mine", hex(3))
            second_hash = _block_hash(node, loaded + 3)
        assert loaded == first == 1000
        with embedded_chain(tmp_path) as node:
            assert int(str(node.rpc("eth_blockNumber")), 16) == first + 3
            assert (_block_hash(node, first), _block_hash(node, first + 3)) == (first_hash, second_hash)
        assert _nodes_of(tmp_path) == []
    finally:
        for pid in _nodes_of(tmp_path):
            os.kill(pid, signal.SIGKILL)


def _block_hash(node: AnvilNode, number: int) -> str:
    block = node.rpc("eth_getBlockByNumber", hex(number), False)
    assert isinstance(block, dict)
    return str(block["hash"])


def test_find_anvil_follows_npms_wrapper_and_refuses_any_other_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = _need_anvil()
    wrapper = ROOT / "node_modules" / ".bin" / "anvil"
    if wrapper.exists():
        monkeypatch.setenv("SAIL_ANVIL", str(wrapper))
        assert find_anvil() == binary
    script = tmp_path / "anvil"
    script.write_text(f'#!/bin/sh\n{binary} "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("SAIL_ANVIL", str(script))
    with pytest.raises(SailNodeUnavailable, match="is a script, not the anvil binary"):
        find_anvil()
    monkeypatch.setenv("SAIL_ANVIL", str(binary))
    assert find_anvil() == binary
    with pytest.raises(SailNodeUnavailable, match="is a script, not the anvil binary"):
        AnvilNode(script).start()  # a binary given to the node is checked alike


def test_the_demo_produces_confirmed_reverted_cadence_and_balance_entries(tmp_path: Path) -> None:
    if find_anvil() is None and shutil.which("npm") is None:
        pytest.skip("anvil is not installed and npm is not on PATH, so it cannot be (npm ci installs it)")
    home = tmp_path / "demo"
    done = subprocess.run(
        [sys.executable, "-m", "sail", "demo", "--home", str(home)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    entries = Ledger(home / ".sail").entries()
    outcomes = [e.outcome.value if isinstance(e, Acted) else e.reason.split(" ")[0] for e in entries]
    assert outcomes == ["confirmed", "cadence:", "reverted", "confirmed", "cadence:", "balance"]
    assert entries[-1] == Skipped(entries[-1].ts, entries[-1].block, 31337, "balance 10000000 < min 25000000")
    # The home it leaves works: the tick it prints to try, run as printed (the shell's `sail`, the
    # machine's clock), starts the home's chain again and follows the ledger in order. The chain was
    # born in the past, so its clock ended the demo behind this machine's: the cadence has passed
    # and the balance, not a clock "ahead of this tick's", holds the next trade.
    tick_line = next(line.strip() for line in done.stdout.splitlines() if " sail tick --home " in line)
    runs = shlex.split(tick_line)
    key = runs[0].split("=", 1)[1]
    argv = [sys.executable, "-m", "sail", *runs[2:]] if shutil.which("sail") is None else runs[1:]
    after = subprocess.run(
        [*argv, "--json"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "SAIL_PRIVATE_KEY": key},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert after.returncode == 0, after.stderr
    told = json.loads(after.stdout)
    assert (told["skipped"], told["chainAheadS"]) == ("balance 10000000 < min 25000000", None)
    again = Ledger(home / ".sail").entries()
    assert again[:-1] == entries and len(again) == len(entries) + 1  # it decided, and ledgered why
    assert [e.ts for e in again] == sorted(e.ts for e in again)  # no row out of order
    for command in ("status", "ledger", "why"):
        shown = subprocess.run(
            [sys.executable, "-m", "sail", command, "--home", str(home)],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert shown.returncode == 0, shown.stderr
        assert "clock: " not in shown.stdout and "ahead of this" not in shown.stdout
    # the narrative of what the real chain's ledger holds, each sentence citing lines that check out
    told = subprocess.run(
        [sys.executable, "-m", "sail", "journal", "--json", "--home", str(home)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert told.returncode == 0, told.stderr
    sentences = [s for day in json.loads(told.stdout)["days"] for s in day["sentences"]]
    text = " ".join(s["text"] for s in sentences)
    assert text.count("Swapped 25.0 USDC for 0.01 WETH at 2500 USDC per WETH, confirmed in block ") == 2
    assert "Tried to swap 25.0 USDC for WETH; it reverted in block " in text and "(reason: " in text
    assert "Blocked on balance from " in text and "balance 10.0 USDC (10000000) < min 25.0 USDC" in text
    files = {
        "ledger": (home / ".sail" / "memory" / "ledger.jsonl").read_bytes().split(b"\n"),
        "activity": (home / ".sail" / "activity.jsonl").read_bytes().split(b"\n"),
    }
    for cite in (c for s in sentences for c in s["cites"]):
        assert hashlib.sha256(files[cite["file"]][cite["line"] - 1]).hexdigest() == cite["sha256"]


def _balance_abi() -> list[dict[str, object]]:
    from sail._contracts import abi

    return abi("TestToken")
