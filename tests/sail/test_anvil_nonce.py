"""A dispatch resolved as never sent can come back: the next swap must take its nonce, never the next.

Reconcile resolves a dispatch as unsent (``dispatch_unsent``) on the nonce argument: no node knows
it and its nonce is unused, or the node refused it. The transaction's bytes still exist (a node that
dropped it from its pool may hear it again from a peer; a node that answered a send with an error
may hold it after all), so the next swap must be signed with that same nonce: then at most one of
the two can ever be mined. A swap signed with the node's *pending* count while the first sits in its
pool again takes the nonce after it, and both are mined — two swaps for one interval, the second
decided without knowing of the first. Every tick is a fresh ``python -m sail tick`` against anvil.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests

from memory.ledger import DispatchDropped, DispatchSigned, DispatchUnsent, Outcome
from sail._config import SailConfig, load_config, save_config
from sail._node import AnvilNode
from tests.sail.http_servers import serving
from tests.sail.test_anvil_dispatch import (
    AMOUNT,
    UNSENT_AFTER,
    Agent,
)

pytestmark = pytest.mark.slow


class _Recorder(BaseHTTPRequestHandler):
    """Forwards JSON-RPC to the node and keeps every raw transaction sent; with ``refuse`` set, it
    forwards the next send and then answers it with a refusal (a node that errs after accepting)."""

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request: Any = json.loads(body)
        answer = requests.post(
            self.server.upstream,
            data=body,
            headers={"Content-Type": "application/json"},
            timeout=30,  # type: ignore[attr-defined]
        )
        content = answer.content
        if isinstance(request, dict) and request.get("method") == "eth_sendRawTransaction":
            self.server.raw.append(request["params"][0])  # type: ignore[attr-defined]
            if self.server.refuse > 0:  # type: ignore[attr-defined]
                self.server.refuse -= 1  # type: ignore[attr-defined]
                refusal = {"code": -32000, "message": "nonce too low"}
                content = json.dumps({"jsonrpc": "2.0", "id": request["id"], "error": refusal}).encode()
        self.send_response(answer.status_code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def proxy(anvil: AnvilNode) -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    server.upstream = anvil.url  # type: ignore[attr-defined]
    server.raw = []  # type: ignore[attr-defined]
    server.refuse = 0  # type: ignore[attr-defined]
    with serving(server):
        yield server
    anvil.rpc("evm_setAutomine", True)


def _agent(node: AnvilNode, home: Path, proxy: ThreadingHTTPServer) -> Agent:
    agent = Agent(node, home, rpc_url=f"http://127.0.0.1:{proxy.server_address[1]}")
    config = load_config(home)
    save_config(home, SailConfig(**{**config.__dict__, "receipt_timeout_s": 0.5, "reconcile_wait_s": 0.5}))
    return agent


def _refused_as_underpriced(done: Any) -> None:
    """The next swap took the first one's nonce, and the node, which holds the first, refused it."""
    assert done.returncode == 1, done.stdout
    error = json.loads(done.stderr)
    assert error["code"] == "sail_submit_failed" and "replacement transaction underpriced" in error["message"]


def _settled_as_one_swap(agent: Agent, first: str, at: int) -> None:
    """The node mines what it holds: the first swap, alone; the next tick ledgers it and writes off
    the refused one as dropped (its nonce consumed by the first)."""
    anvil_mine(agent)
    assert agent.nonce() - agent.nonce0 == 1, "two swaps mined: the next swap took the nonce after the first"
    assert agent.usdc0 - agent.usdc() == AMOUNT
    done = agent.ok(at)
    assert [e["txHash"] for e in done["reconciled"]] == [first]
    assert done["skipped"].startswith("cadence: last acted ")
    assert agent.acted() == [(first, Outcome.CONFIRMED)]
    (signed_b,) = [s.tx_hash for s in agent.activity(DispatchSigned) if s.tx_hash != first]
    assert [d.tx_hash for d in agent.activity(DispatchDropped)] == [signed_b]


def anvil_mine(agent: Agent) -> None:
    agent.w3.provider.make_request("evm_mine", [])  # type: ignore[arg-type]
    agent.w3.provider.make_request("evm_setAutomine", [True])  # type: ignore[arg-type]


def test_a_dropped_dispatch_heard_again_after_it_was_resolved_unsent_is_never_mined_beside_the_next_swap(
    anvil: AnvilNode,
    tmp_path: Path,
    proxy: ThreadingHTTPServer,
) -> None:
    agent = _agent(anvil, tmp_path, proxy)
    anvil.rpc("evm_setAutomine", False)
    first = agent.ok(0)["submitted"]
    assert first is not None  # in the node's pool, not mined
    anvil.rpc("anvil_dropTransaction", first)  # the node forgets it; its bytes are still out there
    config = load_config(tmp_path)  # the owner raises the minimum for a while: the next tick skips
    save_config(tmp_path, SailConfig(**{**config.__dict__, "min_balance": 10**30}))
    assert agent.ok(UNSENT_AFTER + 100)["skipped"].startswith("balance ")
    assert [u.tx_hash for u in agent.activity(DispatchUnsent)] == [first]  # resolved as never mined
    save_config(tmp_path, config)
    gossip = {"jsonrpc": "2.0", "id": 1, "method": "eth_sendRawTransaction", "params": [proxy.raw[0]]}  # type: ignore[attr-defined]
    assert "result" in requests.post(anvil.url, json=gossip, timeout=10).json()  # a peer sends it again

    _refused_as_underpriced(agent.tick(UNSENT_AFTER + 160))
    _settled_as_one_swap(agent, first, UNSENT_AFTER + 220)


def test_a_send_the_node_answered_with_an_error_but_kept_is_never_mined_beside_the_next_swap(
    anvil: AnvilNode,
    tmp_path: Path,
    proxy: ThreadingHTTPServer,
) -> None:
    agent = _agent(anvil, tmp_path, proxy)
    anvil.rpc("evm_setAutomine", False)
    proxy.refuse = 1  # type: ignore[attr-defined]
    refused = agent.tick(0)
    assert refused.returncode == 1 and json.loads(refused.stderr)["code"] == "sail_submit_failed"
    (first,) = [s.tx_hash for s in agent.activity(DispatchSigned)]
    assert [u.tx_hash for u in agent.activity(DispatchUnsent)] == [first]  # on the node's word

    _refused_as_underpriced(agent.tick(60))  # the refusal held nothing; the node has the first
    _settled_as_one_swap(agent, first, 120)
