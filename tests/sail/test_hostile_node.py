"""The agent against a hostile or broken node: a real HTTP server speaking (or failing to speak)
JSON-RPC, in front of the in-process EVM or on its own.

What must hold whatever the node says: nothing the chain did not confirm reaches the ledger, every
failure is a coded error (never a traceback), and no answer holds a tick beyond the request bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hexbytes import HexBytes

from memory.ledger import (
    Acted,
    ActivityLog,
    ChainUnavailable,
    DispatchDropped,
    DispatchSigned,
    DispatchUnsent,
    Outcome,
    TickFinished,
    agent_state,
)
from sail._chain import Chain
from sail._errors import SailChainMismatch, SailSubmitUncertain, SailTickTimeout
from sail._runner import Runner
from sail._tick import tick
from tests.conftest import ROOT
from tests.sail.conftest import INTERVAL, World
from tests.sail.http_servers import serving
from tests.sail.test_dispatch import (
    _rebuilt_tx,
    _resolved_as_unsent,
    failpoints,  # noqa: F401 - the failpoints fixture
)

Answer = Callable[[dict[str, Any], Callable[[], Any]], Any]


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    if isinstance(value, int) and not isinstance(value, bool) and value >= 2**64:
        return hex(value)  # a node writes quantities in hex (the EVM here gives a block's bloom as one)
    if isinstance(value, dict):  # the EVM here names fields in snake_case; a node, in camelCase
        return {_camel(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


class _Node(BaseHTTPRequestHandler):
    """Answers each JSON-RPC request with what ``server.answer(request, honest)`` returns: bytes as
    the body, else an object sent as JSON; ``honest()`` is the in-process EVM's own answer."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        server: Any = self.server

        def honest() -> Any:
            method = request["method"]
            params = [  # a block number, as the EVM here takes it
                int(p, 16) if isinstance(p, str) and p.startswith("0x") and len(p) <= 18 else p
                for p in request["params"]
            ]
            if method in ("eth_call", "eth_estimateGas") and "from" not in params[0]:
                params = [{**params[0], "from": server.w3.eth.accounts[0]}, *params[1:]]  # the EVM wants one
            try:
                with server.lock:
                    got = _plain(dict(server.w3.provider.make_request(method, params)))
            except Exception as exc:  # the EVM's refusal, as a node says it
                return {"jsonrpc": "2.0", "error": {"code": -32000, "message": str(exc)}}
            result = got.get("result")
            if isinstance(result, dict) and "data" in result and "input" not in result:
                result["input"] = result["data"]  # a node names a transaction's calldata `input`
            return got

        body = server.answer(request, honest)
        if callable(body):  # the handler writes the answer itself (slowly, or without end)
            body(self)
            return
        data = body if isinstance(body, bytes) else json.dumps({**body, "id": request["id"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def node(world: World) -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Node)
    server.daemon_threads = True
    server.w3, server.lock = world.w3, threading.Lock()
    server.answer = lambda request, honest: honest()
    with serving(server) as url:
        server.url = url
        yield server


def _tick_over(world: World, url: str, *, timeout: float = 5.0) -> Any:
    chain = Chain.connect(url, timeout=timeout)
    runner = Runner(chain, world.agent, ActivityLog(world.sail_dir), clock=world.clock, receipt_timeout=2.0)
    return tick(
        world.sail_dir, strategy=world.strategy(), chain=chain, runner=runner, clock=world.clock,
        reconcile_wait_s=0.5,
    )


def _acted(world: World) -> list[Acted]:
    return [e for e in world.ledger().entries() if isinstance(e, Acted)]


def _receipt_lies(lie: Callable[[dict[str, Any]], dict[str, Any]]) -> Answer:
    def answer(request: dict[str, Any], honest: Callable[[], Any]) -> Any:
        got = honest()
        if request["method"] == "eth_getTransactionReceipt" and got.get("result"):
            got["result"] = lie(got["result"])
        return got

    return answer


@pytest.mark.parametrize(
    "lie",
    [
        pytest.param(lambda r: {**r, "transactionHash": "0x" + "ab" * 32}, id="another-transaction"),
        pytest.param(lambda r: {**r, "status": "0x7"}, id="status-neither-0-nor-1"),
        pytest.param(lambda r: {**r, "status": True}, id="status-a-boolean"),
        pytest.param(lambda r: {**r, "status": 1.0}, id="status-a-float"),
        pytest.param(lambda r: {**r, "blockNumber": hex(int(r["blockNumber"], 16) + 1)}, id="another-block"),
        pytest.param(lambda r: {**r, "blockNumber": None}, id="no-block"),
        pytest.param(lambda r: {k: v for k, v in r.items() if k != "logs"}, id="no-logs"),
        pytest.param(lambda r: {**r, "gasUsed": "-0x5"}, id="negative-gas"),
    ],
)
def test_a_receipt_that_contradicts_the_chain_is_never_ledgered(
    world: World, node: Any, lie: Callable[[dict[str, Any]], dict[str, Any]]
) -> None:
    sent = world.tick().dispatched  # the swap, sent and mined through the honest in-process node
    assert sent is not None
    node.answer = _receipt_lies(lie)
    world.clock.now += 60
    _tick_over(world, node.url)  # reconcile sees only the lying receipt
    assert [e.outcome for e in _acted(world)] == [Outcome.UNVERIFIED]  # never confirmed nor reverted
    world.clock.now += 60
    node.answer = lambda request, honest: honest()
    _tick_over(world, node.url)  # the node tells the truth again: the chain's outcome is ledgered
    last = _acted(world)[-1]
    mined = world.w3.eth.get_transaction_receipt(HexBytes(sent.tx_hash))
    assert (last.outcome, last.block, last.tx_hash) == (Outcome.CONFIRMED, mined["blockNumber"], sent.tx_hash)


def test_another_blocks_answer_for_the_receipts_block_never_stamps_the_swap(world: World, node: Any) -> None:
    """Asked for the receipt's block, a node answered with another block (its genesis): the swap was
    ledgered stamped with that block's time, and the cadence counted from it. The block's number
    must be the one asked for, else the read failed and nothing is ledgered."""
    sent = world.tick().dispatched
    assert sent is not None
    genesis = world.w3.eth.get_block(0)

    def another_block(request: dict[str, Any], honest: Callable[[], Any]) -> Any:
        got = honest()
        if request["method"] == "eth_getBlockByNumber" and got.get("result"):
            got["result"] = {**got["result"], "number": "0x0", "timestamp": hex(genesis["timestamp"])}
        return got

    node.answer = another_block
    world.clock.now += 60
    with pytest.raises(ChainUnavailable, match="not block"):
        _tick_over(world, node.url)
    assert _acted(world) == []
    node.answer = lambda request, honest: honest()
    world.clock.now += 60
    _tick_over(world, node.url)
    (entry,) = _acted(world)
    receipt = world.w3.eth.get_transaction_receipt(HexBytes(sent.tx_hash))
    mined = world.w3.eth.get_block(receipt["blockNumber"])
    assert (entry.outcome, entry.ts) == (Outcome.CONFIRMED, mined["timestamp"])


@pytest.mark.parametrize(
    "result",
    [1.5, "-0x5", -5, hex(2**300), None, {"a": 1}, [1], True, "0x12zz"],
    ids=["float", "negative-hex", "negative", "2^300", "null", "object", "list", "boolean", "junk"],
)
def test_a_block_number_or_chain_id_of_the_wrong_type_is_chain_unavailable(
    world: World, node: Any, result: Any
) -> None:
    node.answer = lambda request, honest: {"jsonrpc": "2.0", "result": result}
    for read in (lambda c: c.head(), lambda c: c.chain_id(), lambda c: c.nonce(world.agent.address)):
        with pytest.raises(ChainUnavailable):
            read(Chain.connect(node.url, timeout=2))


def _trickle(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "1000000")
    handler.end_headers()
    try:
        for _ in range(10_000):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.1)
    except OSError:
        return


def _flood(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(500 * 2**20))
    handler.end_headers()
    chunk = b" " * 2**20
    try:
        for _ in range(500):
            handler.wfile.write(chunk)
    except OSError:
        return


@pytest.mark.parametrize("writer", [_trickle, _flood], ids=["trickles-a-byte-at-a-time", "sends-500-MB"])
def test_an_answer_that_never_ends_is_given_up_within_the_request_bound(
    world: World, node: Any, writer: Callable[[BaseHTTPRequestHandler], None]
) -> None:
    node.answer = lambda request, honest: writer
    started = time.monotonic()
    with pytest.raises(ChainUnavailable, match=r"took over 2|larger than"):
        Chain.connect(node.url, timeout=2).head()
    assert time.monotonic() - started < 5


def _deep(request: dict[str, Any], honest: Callable[[], Any]) -> bytes:
    """An answer nested 200,000 arrays deep: 400 kB, well inside the size bound."""
    return b'{"jsonrpc": "2.0", "id": %d, "result": ' % request["id"] + b"[" * 200_000 + b"]" * 200_000 + b"}"


def _sail_tick(world: World, url: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``sail tick`` in a fresh process against ``url`` (a crash there cannot take the tests with it)."""
    world.save_config(rpc_url=url)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SAIL_PRIVATE_KEY": "0x" + "00" * 31 + "02"}
    done = subprocess.run(
        [sys.executable, "-m", "sail", "tick", "--json", "--home", str(world.sail_dir.parent)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, (done.returncode, done.stderr[-400:])
    error: dict[str, Any] = json.loads(done.stderr)
    (finished,) = [r for r in ActivityLog(world.sail_dir).read() if isinstance(r, TickFinished)]
    assert (finished.outcome, finished.code) == ("failed", error["code"])
    return done, error


def test_a_sail_tick_against_a_node_whose_answer_nests_without_end_fails_with_a_code_not_a_crash(
    world: World, node: Any
) -> None:
    """web3 raises the interpreter's recursion limit to 100,000 on import, and the standard
    library's JSON decoder recursed in C once per level: the tick died of SIGSEGV, its outcome never
    recorded."""
    node.answer = _deep
    _, error = _sail_tick(world, node.url)
    assert error["code"] == "chain_unavailable" and "not JSON that can be read" in error["message"]
    assert world.ledger().entries() == []


def test_a_send_answered_with_json_nested_without_end_is_uncertain_not_a_crash(
    world: World, node: Any
) -> None:
    sent: list[str] = []

    def deep_after_sending(request: dict[str, Any], honest: Callable[[], Any]) -> Any:
        got = honest()
        if request["method"] == "eth_sendRawTransaction":
            sent.append(got["result"])
            return _deep(request, honest)  # the node took it; its answer cannot be read
        return got

    node.answer = deep_after_sending
    _, error = _sail_tick(world, node.url)
    assert error["code"] == "sail_submit_uncertain"
    (signed,) = [r for r in ActivityLog(world.sail_dir).read() if isinstance(r, DispatchSigned)]
    assert sent == [signed.tx_hash]
    assert [r for r in ActivityLog(world.sail_dir).read() if isinstance(r, DispatchUnsent)] == []


def test_a_sail_tick_against_a_node_that_trickles_ends_within_its_bound_with_a_code(
    world: World, node: Any, tmp_path: Path
) -> None:
    node.answer = lambda request, honest: _trickle
    home = world.sail_dir.parent
    world.save_config(rpc_url=node.url, rpc_timeout_s=1.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SAIL_PRIVATE_KEY": "0x" + "00" * 31 + "02"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sail", "tick", "--json", "--home", str(home)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert time.monotonic() - started < 60
    assert done.returncode == 1 and json.loads(done.stderr)["code"] == "chain_unavailable", done.stderr
    assert "Traceback" not in done.stderr
    (finished,) = [r for r in ActivityLog(world.sail_dir).read() if isinstance(r, TickFinished)]
    assert (finished.outcome, finished.code) == ("failed", "chain_unavailable")
    assert world.ledger().entries() == []




def _answer_as(request_id: object, body: dict[str, Any]) -> bytes:
    """``body`` sent as the answer to the request numbered ``request_id`` (bytes: the id is not fixed)."""
    return json.dumps({**body, "id": request_id}).encode()


def test_an_answer_to_another_request_is_never_believed(world: World, node: Any) -> None:
    """A confused proxy hands each request the answer it kept from the one before (its id too)."""
    kept: list[dict[str, Any]] = []

    def stale(request: dict[str, Any], honest: Callable[[], Any]) -> Any:
        got = {**honest(), "id": request["id"]}
        previous = kept[-1] if kept else got
        kept.append(got)
        return _answer_as(previous["id"], previous)

    node.answer = stale
    chain = Chain.connect(node.url, timeout=2)
    chain.chain_id()  # the first answer is its own
    with pytest.raises(ChainUnavailable, match="another request"):
        chain.head()  # would read the chain id as the block number
    with pytest.raises(ChainUnavailable, match="another request"):
        chain.nonce(world.agent.address)


@pytest.mark.parametrize("answered_id", [None, "x", True, 10**6], ids=["null", "text", "boolean", "another"])
def test_an_answer_whose_id_is_not_the_requests_is_chain_unavailable(
    world: World, node: Any, answered_id: object
) -> None:
    node.answer = lambda request, honest: _answer_as(answered_id, {**honest(), "id": None})
    with pytest.raises(ChainUnavailable, match="another request"):
        Chain.connect(node.url, timeout=2).head()


def test_a_send_answered_with_another_requests_refusal_is_uncertain_not_unsent(
    world: World, node: Any
) -> None:
    """The node takes the swap, but its answer is another request's error: nobody knows it was refused."""

    def refusal_of_another(request: dict[str, Any], honest: Callable[[], Any]) -> Any:
        got = honest()
        if request["method"] != "eth_sendRawTransaction":
            return got
        assert "result" in got  # the transaction is in the chain
        refusal = {"jsonrpc": "2.0", "error": {"code": -32000, "message": "nonce too low"}}
        return _answer_as(request["id"] + 1, refusal)

    node.answer = refusal_of_another
    with pytest.raises(SailSubmitUncertain):
        _tick_over(world, node.url)
    assert not [r for r in ActivityLog(world.sail_dir).read() if isinstance(r, DispatchUnsent)]
    node.answer = lambda request, honest: honest()
    world.clock.now += 60
    _tick_over(world, node.url)
    (acted,) = _acted(world)
    assert acted.outcome == Outcome.CONFIRMED


def _slow(request: dict[str, Any], honest: Callable[[], Any]) -> Any:
    time.sleep(0.3)  # every answer in time for its request, but a tick asks for many
    return honest()


def test_a_tick_against_a_node_slow_on_every_request_ends_at_its_bound_with_nothing_signed(
    world: World, node: Any
) -> None:
    node.answer = _slow
    chain = Chain.connect(node.url, timeout=5)
    runner = Runner(chain, world.agent, ActivityLog(world.sail_dir), clock=world.clock, receipt_timeout=2.0)
    started = time.monotonic()
    with pytest.raises(SailTickTimeout) as info:
        tick(
            world.sail_dir, strategy=world.strategy(), chain=chain, runner=runner, clock=world.clock,
            reconcile_wait_s=0.5, deadline=started + 1.0,
        )  # fmt: skip
    assert info.value.code == "sail_tick_timeout"
    assert time.monotonic() - started < 1.0 + 5  # the bound, and at most what was left of it per request
    assert world.ledger().entries() == []
    assert not [r for r in ActivityLog(world.sail_dir).read() if isinstance(r, DispatchSigned)]


def test_sail_tick_over_its_tick_timeout_fails_with_a_code_recorded_as_the_ticks_outcome(
    world: World, node: Any
) -> None:
    node.answer = _slow
    home = world.sail_dir.parent
    world.save_config(rpc_url=node.url, rpc_timeout_s=5.0, tick_timeout_s=1.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SAIL_PRIVATE_KEY": "0x" + "00" * 31 + "02"}
    done = subprocess.run(
        [sys.executable, "-m", "sail", "tick", "--json", "--home", str(home)],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 1 and json.loads(done.stderr)["code"] == "sail_tick_timeout", done.stderr
    (finished,) = [r for r in ActivityLog(world.sail_dir).read() if isinstance(r, TickFinished)]
    assert (finished.outcome, finished.code) == ("failed", "sail_tick_timeout")
    assert world.ledger().entries() == []
    assert not [r for r in ActivityLog(world.sail_dir).read() if isinstance(r, DispatchSigned)]
    node.answer = lambda request, honest: honest()  # the node is quick again: the next tick trades
    world.clock.now += 60
    assert _tick_over(world, node.url).dispatched is not None


def test_a_node_of_another_chain_resolves_nothing_and_the_swap_is_ledgered_from_its_own(
    world: World, node: Any
) -> None:
    sent = world.tick().dispatched  # signed for the in-process chain, mined there
    assert sent is not None
    other = {  # another network: it never saw the hash, and the agent's account there has used 16 nonces
        "eth_chainId": "0x1",
        "eth_getTransactionByHash": None,
        "eth_getTransactionReceipt": None,
        "eth_getTransactionCount": "0x10",
    }

    def another_chain(request: dict[str, Any], honest: Callable[[], Any]) -> Any:
        if request["method"] in other:
            return {"jsonrpc": "2.0", "result": other[request["method"]]}
        return honest()

    node.answer = another_chain
    world.clock.now += 3 * 600  # well past unsent_after_s: a nonce argument would settle it now
    before = ActivityLog(world.sail_dir).read()
    with pytest.raises(SailChainMismatch, match="serves chain 1"):
        _tick_over(world, node.url)
    assert ActivityLog(world.sail_dir).read() == before  # not judged unsent nor dropped
    assert world.ledger().entries() == []
    node.answer = lambda request, honest: honest()  # rpc_url points at the swap's chain again
    world.clock.now += 60
    _tick_over(world, node.url)
    (acted,) = _acted(world)
    assert (acted.tx_hash, acted.outcome) == (sent.tx_hash, Outcome.CONFIRMED)


def _tick_in_process(world: World, *, confirmations: int) -> Any:
    chain = Chain(world.w3)
    runner = Runner(chain, world.agent, ActivityLog(world.sail_dir), clock=world.clock, receipt_timeout=2.0)
    return tick(
        world.sail_dir, strategy=world.strategy(), chain=chain, runner=runner, clock=world.clock,
        reconcile_wait_s=0.5, confirmations=confirmations,
    )


def test_a_swap_in_a_block_a_reorganisation_removes_is_never_ledgered_when_confirmations_are_asked(
    world: World,
) -> None:
    tester = world.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    before_swap = tester.take_snapshot()
    sent = _tick_in_process(world, confirmations=3).dispatched
    assert sent is not None
    world.clock.now += 60
    held = _tick_in_process(world, confirmations=3)  # mined, one block deep: not yet a fact
    assert held.skipped is not None and held.skipped.reason.startswith(f"unresolved dispatch {sent.tx_hash}")
    tester.revert_to_snapshot(before_swap)  # the chain is reorganised: the swap's block is gone
    tester.mine_blocks(4)
    for _ in range(2):
        world.clock.now += 700  # past unsent_after_s: the nonce argument settles it
        _tick_in_process(world, confirmations=3)
    assert [e for e in _acted(world) if e.tx_hash == sent.tx_hash] == []  # never ledgered as done
    assert any(
        isinstance(r, DispatchUnsent) and r.tx_hash == sent.tx_hash
        for r in ActivityLog(world.sail_dir).read()
    )


def test_a_swap_is_ledgered_once_its_block_has_the_confirmations_asked(world: World) -> None:
    sent = _tick_in_process(world, confirmations=3).dispatched
    assert sent is not None
    world.clock.now += 60
    _tick_in_process(world, confirmations=3)
    assert _acted(world) == []
    world.w3.provider.ethereum_tester.mine_blocks(2)  # type: ignore[attr-defined]
    world.clock.now += 60
    (acted,) = _tick_in_process(world, confirmations=3).reconciled
    assert (acted.tx_hash, acted.outcome) == (sent.tx_hash, Outcome.CONFIRMED)


def test_an_unsent_dispatch_mined_after_all_whose_receipt_the_node_fails_to_give_is_never_written_off(
    world: World,
    node: Any,
    failpoints: None,  # noqa: F811 - the fixture imported above
) -> None:
    """Its nonce is consumed: a receipt read that fails is no proof there is none. Judged absent, the
    swap was logged ``dispatch_dropped`` (never watched again, never ledgered) and the next swap was
    signed beside it; it must hold the next trade until a tick reads the receipt and ledgers it."""
    before = int(world.w3.eth.get_transaction_count(world.agent.address))
    signed = _resolved_as_unsent(world)
    raw = world.agent.sign_transaction(dict(_rebuilt_tx(world, signed)))
    world.w3.eth.send_raw_transaction(raw.raw_transaction)  # a node that kept its bytes mines it
    world.strategy_overrides.clear()  # the next tick would swap, were nothing holding it

    def no_receipt_for_it(request: dict[str, Any], honest: Callable[[], Any]) -> Any:
        if request["method"] == "eth_getTransactionReceipt" and request["params"][0] == signed.tx_hash:
            return {"jsonrpc": "2.0", "error": {"code": -32603, "message": "upstream timed out"}}
        return honest()

    node.answer = no_receipt_for_it
    world.clock.now += 60
    held = _tick_over(world, node.url)
    assert held.dispatched is None and held.reconciled == ()
    assert held.skipped is not None
    assert held.skipped.reason.startswith(f"unresolved dispatch {signed.tx_hash}")
    assert held.skipped.reason.endswith("(resolved as never sent; its nonce was consumed since)")
    assert [r for r in ActivityLog(world.sail_dir).read() if isinstance(r, DispatchDropped)] == []
    status = agent_state(world.sail_dir, interval_s=INTERVAL, clock=world.clock)  # what `sail status` says
    assert status["blockedBy"]["kind"] == "dispatch" and signed.tx_hash in status["blockedBy"]["reason"]
    assert status["openDispatches"] == [signed.tx_hash] and status["nextEligibleMs"] is None

    node.answer = lambda request, honest: honest()
    world.clock.now += 60
    (entry,) = _tick_over(world, node.url).reconciled
    assert (entry.tx_hash, entry.outcome) == (signed.tx_hash, Outcome.CONFIRMED)
    assert int(world.w3.eth.get_transaction_count(world.agent.address)) - before == 1  # one swap
