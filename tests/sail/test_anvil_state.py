"""One truth on every screen: ``sail status --json`` and the dashboard's API agree, field by field,
through every state a dispatch goes through, on a real node (anvil on loopback).

The agent is driven by fresh ``python -m sail tick`` processes, killed through their failpoints where
a state needs it: signed (killed after the write-ahead line, before the send), resolved as never sent
while a new swap is settled (its receipt read, not yet ledgered), the never-sent one dropped when the
new one took its nonce and that one ledgered confirmed, and submitted (killed after the node accepted
it, before its receipt was read). At each, the CLI (a fresh process) and the dashboard (the app over
the same home) answer, and the page says the same.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed")

from flows.web import ServeConfig
from memory.ledger import CLOCK_SLACK_S, DispatchDropped, DispatchUnsent
from sail._node import AnvilNode
from tests.conftest import ROOT
from tests.sail.test_anvil_dispatch import INTERVAL, UNSENT_AFTER, Agent
from tests.web.conftest import client_for

# each step runs fresh `sail` processes (web3 imported anew): minutes in all on a loaded machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def cli(home: Path, *argv: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "sail", *argv, "--json", "--home", str(home)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def clock_leads_agree(first: int | None, then: int | None, passed: int) -> bool:
    """Whether two leads of the newest stamp over this machine's clock, the first read ``passed``
    whole seconds or less before the other (on a clock that only moves forward), tell the same
    thing: the later one is smaller by those seconds at most, and none is said (null) only while
    the lead is within ``CLOCK_SLACK_S``."""
    if first is None:
        return then is None  # the lead only shrinks
    if then is None:
        return first - CLOCK_SLACK_S <= passed
    return 0 <= first - then <= passed


def agree(home: Path) -> dict[str, Any]:
    """``sail status --json`` and ``sail why --json`` against the dashboard's API: field by field
    (the clock's lead, measured against this machine's clock a moment apart: by the seconds that
    passed between the two, read around them). Returns the status."""
    before = int(time.time())
    with client_for(ServeConfig(sail_homes=(home,))) as client:
        api = client.get("/api/agents/0/status").json()
        api_why = client.get("/api/agents/0/why").json()
        page = client.get("/agents/0").text
        client.app.state.reader.close()  # type: ignore[attr-defined]
    status = cli(home, "status")
    passed = int(time.time()) - before
    assert sorted(api) == sorted(status)
    for key in status:
        if key != "clockAheadS":
            assert api[key] == status[key], key
    leads = (api["clockAheadS"], status["clockAheadS"], passed)
    assert clock_leads_agree(*leads), leads
    assert api_why == cli(home, "why")
    shown = re.search(r'<dd id="dispatches">(.*?)</dd>', page, re.S)
    assert shown is not None
    for dispatch in status["dispatches"]:
        assert f'title="{dispatch["txHash"]}"' in shown.group(1) and dispatch["state"] in shown.group(1)
    next_trade = re.search(r'<dd id="next">(.*?)</dd>', page, re.S)
    assert next_trade is not None
    assert ("blocked" in next_trade.group(1)) is (status["blockedBy"] is not None)
    return status


def states(status: dict[str, Any]) -> list[tuple[str, bool]]:
    return [(d["state"], d["holdsTrade"]) for d in status["dispatches"]]


def test_the_cli_and_the_dashboard_agree_through_every_dispatch_state(
    anvil: AnvilNode,
    tmp_path: Path,
) -> None:
    agent = Agent(anvil, tmp_path)
    home = agent.home

    killed = agent.tick(0, failpoints="sail.logged=kill")  # written ahead, never sent
    assert killed.returncode == -9, killed.stderr
    status = agree(home)
    assert states(status) == [("signed", True)]
    (signed,) = status["dispatches"]
    assert status["blockedBy"]["kind"] == "dispatch" and signed["txHash"] in status["blockedBy"]["reason"]
    assert status["openDispatches"] == [signed["txHash"]] and status["nextEligibleMs"] is None

    held = agent.ok(60)
    assert held["skipped"].startswith(f"unresolved dispatch {signed['txHash']}")
    assert states(agree(home)) == [("signed", True)]

    # past unsent_after_s: resolved as never sent (its nonce still free), and a new swap goes out,
    # its receipt read by the runner (settled) but not yet ledgered
    fresh = agent.ok(UNSENT_AFTER + 200)
    assert [u.tx_hash for u in agent.activity(DispatchUnsent)] == [signed["txHash"]]
    status = agree(home)
    assert states(status) == [("unsent", False), ("settled", True)]
    assert status["openDispatches"] == [fresh["submitted"]]
    assert status["blockedBy"]["kind"] == "dispatch" and fresh["submitted"] in status["blockedBy"]["reason"]

    # the next tick ledgers the new swap; the never-sent one, whose nonce it took, is dropped
    agent.ok(UNSENT_AFTER + 260)
    assert [d.tx_hash for d in agent.activity(DispatchDropped)] == [signed["txHash"]]
    status = agree(home)
    assert (states(status), status["blockedBy"], status["openDispatches"]) == ([], None, [])
    assert status["lastConfirmed"]["txHash"] == fresh["submitted"]
    last = status["lastConfirmed"]
    assert last["signedMs"] is not None  # the cadence counts from the later of its block and its signing
    assert status["nextEligibleMs"] == max(last["tsMs"], last["signedMs"]) + INTERVAL * 1000

    # a tick killed after the node accepted its swap, before the receipt was read: submitted
    later = status["nextEligibleMs"] // 1000 - agent.t0 + 60
    anvil.rpc("evm_setNextBlockTimestamp", agent.t0 + later)  # mined at the tick's time
    killed = agent.tick(later, failpoints="sail.submitted=kill")
    assert killed.returncode == -9, killed.stderr
    status = agree(home)
    assert states(status) == [("submitted", True)] and status["blockedBy"]["kind"] == "dispatch"
    assert status["lastTick"]["outcome"] == "running"  # began, never finished: killed

    agent.ok(later + 60)  # reconciled: nothing holds the trade but the clock
    status = agree(home)
    assert (states(status), status["blockedBy"]) == ([], None)
    assert status["tokens"] == {
        agent.market.usdc.lower(): {"decimals": 6, "symbol": "USDC"},
        agent.market.weth.lower(): {"decimals": 18, "symbol": "WETH"},
    }
