"""Chain access through web3: the reads reconcile and the strategy need, and the router contract.

``Chain`` implements ``memory.ledger.ChainReader`` (receipts, blocks, calldata, tokens, balances
at a block) and ``ChainView`` for strategies (balance, allowance, quote at the head). Every web3,
transport or EVM failure of a read is translated here, in ``_reading``, into
``memory.ledger.ChainUnavailable``; a failing quote becomes ``QuoteUnavailable`` (a skip reason,
not an error). A node's URL often carries a credential (a key in its path or query, a password);
the transport's errors quote the URL, so every one is scrubbed of it (``_Provider``) before any
message, log or ledger line is made from it.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.parse
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import orjson
import requests
from eth_abi.abi import decode as abi_decode
from eth_abi.exceptions import DecodingError
from eth_typing import URI
from eth_utils.exceptions import ValidationError as EthValidationError
from hexbytes import HexBytes
from web3 import HTTPProvider, Web3
from web3.exceptions import (
    BadFunctionCallOutput,
    ContractLogicError,
    TimeExhausted,
    TransactionNotFound,
    Web3Exception,
)
from web3.exceptions import BlockNotFound as NoSuchBlock

from journal import scrubbed
from memory.ledger import (
    ActivityInvalidRecord,
    ChainTransaction,
    ChainUnavailable,
    LogRecord,
    Receipt,
    SwapCall,
    TokenInfo,
)
from sail._contracts import abi

try:  # the in-process EVM's own errors (a revert there is not a web3 ContractLogicError)
    from eth_tester.exceptions import (  # type: ignore[import-untyped]  # eth-tester ships no types
        BlockNotFound,
        TransactionFailed,
        ValidationError,
    )

    #: what the in-process EVM raises for a refused or reverted transaction (empty without it)
    TESTER_ERRORS: tuple[type[BaseException], ...] = (BlockNotFound, TransactionFailed, ValidationError)
except ImportError:  # pragma: no cover - eth-tester is part of the chain extra
    TESTER_ERRORS = ()

#: what a read may fail with, short of a bug in sail: mapped to ChainUnavailable
READ_ERRORS: tuple[type[BaseException], ...] = (
    Web3Exception,
    requests.RequestException,
    OSError,
    ValueError,  # web3 raises it for some malformed RPC answers
    EthValidationError,
    *TESTER_ERRORS,
)

#: what a call that reverted raises: over JSON-RPC, and in the in-process EVM
_REVERTS: tuple[type[BaseException], ...] = (ContractLogicError, *TESTER_ERRORS)

#: the largest answer read from a node (a receipt with many logs is well under a megabyte)
MAX_ANSWER_BYTES = 16 * 2**20

SWAP_FUNCTION = "swapExactTokensForTokens"
_ERROR_STRING = bytes.fromhex("08c379a0")  # the selector of Solidity's Error(string)
_REVERTED = "execution reverted"


def revert_text(exc: BaseException) -> str:
    """A failed call's reason as one readable line: the decoded revert text where the contract gave one.

    web3 raises ``ContractLogicError(message, data)`` for a revert over JSON-RPC, whose ``str`` is a
    tuple with raw hex; the in-process EVM raises its own error with the text. Either way the result
    reads ``execution reverted: <reason>`` (or the error's own message when it is not a revert).
    """
    if isinstance(exc, ContractLogicError):
        decoded = decode_error_string(exc.data)
        if decoded is not None:
            return f"{_REVERTED}: {decoded}"
        message = exc.message if isinstance(exc.message, str) else None
        return message or _REVERTED
    text = exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)
    return " ".join((text or type(exc).__name__).split())


def decode_error_string(data: object) -> str | None:
    """Decode revert data holding ``Error(string)``; None for anything else."""
    if isinstance(data, dict):
        data = data.get("data")
    if not isinstance(data, str | bytes):
        return None
    raw = bytes(HexBytes(data)) if isinstance(data, str) else data
    if raw[:4] != _ERROR_STRING:
        return None
    try:
        (text,) = abi_decode(["string"], raw[4:])
    except (DecodingError, ValueError, TypeError):
        return None
    return str(text)


def reason_of(text: str) -> str:
    """The reason part of ``execution reverted: <reason>`` (the whole text otherwise)."""
    return text.removeprefix(f"{_REVERTED}: ").strip() or text


def url_secrets(url: str) -> list[str]:
    """Every part of ``url`` that may be a credential, longest first: its password, its path and
    query (an API key sits in either, ``/v3/<key>``, ``?apikey=``), each query value and each
    path segment of 8 characters or more, as written and decoded."""
    try:
        parts = urllib.parse.urlsplit(url)
        password = parts.password
    except ValueError:
        return [url] if url else []
    found = [password or ""]
    tail = parts.path + (f"?{parts.query}" if parts.query else "")
    if tail not in ("", "/"):
        found += [tail, parts.query, *(v for _, v in urllib.parse.parse_qsl(parts.query))]
        found += [seg for seg in parts.path.split("/") if len(seg) >= 8]
    found += [urllib.parse.unquote(f) for f in found]
    return sorted({f for f in found if f}, key=len, reverse=True)


class _Provider(HTTPProvider):
    """web3's HTTP provider whose transport errors never quote the node's URL's credentials.

    requests writes the URL into its messages (``Max retries exceeded with url: /v3/<key>``,
    ``401 … for url: https://…``); a scrubbed error of the same kind is raised instead, without
    the original chained (a traceback would show it again).
    """

    def __init__(self, rpc_url: str, *, timeout: float = 10.0, max_bytes: int = MAX_ANSWER_BYTES) -> None:
        super().__init__(rpc_url, request_kwargs={"timeout": timeout})
        self._secrets = url_secrets(rpc_url)
        self._timeout = timeout
        self._max_bytes = max_bytes
        #: the ``time.monotonic()`` instant past which no request is made (the tick's bound), or None
        self.deadline: float | None = None

    def _make_request(self, method: Any, request_data: bytes) -> bytes:
        """POST one request and read its answer within ``timeout`` seconds in all and ``max_bytes``.

        requests' own timeout bounds each socket read, not the answer: a node that trickles a byte
        every few seconds, or streams a body without end, would hold the tick for ever (and fill
        memory). The body is read as it arrives, and given up past the deadline or the size.
        """
        limit = self._timeout
        if self.deadline is not None and method != "eth_sendRawTransaction":
            # a signed swap whose write-ahead line is durable is sent in any case: holding it back
            # would hold the next trade for unsent_after_s, and the send is one bounded request
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TickDeadlinePassed(f"the tick's time bound passed before {method}; it was not asked")
            limit = min(limit, left)
        deadline = time.monotonic() + limit
        url = str(self.endpoint_uri)
        session = self._request_session_manager.cache_and_return_session(
            URI(url), request_timeout=self._timeout
        )
        kwargs = {**self.get_request_kwargs(), "stream": True, "timeout": limit}
        with session.post(url, data=request_data, **kwargs) as response:
            response.raise_for_status()
            body = bytearray()
            while chunk := response.raw.read1(65536):
                body += chunk
                if len(body) > self._max_bytes:
                    raise requests.RequestException(
                        f"the node's answer to {method} is larger than {self._max_bytes} bytes; "
                        "nothing was read from it"
                    )
                if time.monotonic() > deadline:
                    raise requests.Timeout(
                        f"the node's answer to {method} took over {limit:g}s to arrive; "
                        "nothing was read from it"
                    )
            return bytes(body)

    def make_request(self, method: Any, params: Any) -> Any:
        """One request and its answer, which must name the request's own ``id``.

        JSON-RPC pairs an answer with its request by ``id`` alone: a proxy or node that hands one
        request the answer of another (a stale cache, a crossed connection) would otherwise be
        believed — a chain id read as the head, one transaction's count as another's. Such an answer
        is refused as ``AnswerMismatch``, a failure of the connection: a read is ``ChainUnavailable``
        and a send is uncertain (the transaction may have reached the node), never a refusal.
        """
        try:
            request_data = self.encode_rpc_request(method, params)
            sent_id = json.loads(request_data)["id"]
            response = _decoded(self._make_request(method, request_data), method)
            answered = response.get("id", None) if isinstance(response, dict) else None
            if not _same_id(answered, sent_id):
                raise AnswerMismatch(
                    f"the node's answer to {method} names request {str(answered)[:40]!r}, not {sent_id}: "
                    "it is the answer to another request, and nothing was read from it"
                )
            return response
        except requests.RequestException as exc:
            text = scrubbed(str(exc), self._secrets)
            try:
                clean = type(exc)(text)
            except TypeError:
                clean = requests.RequestException(text)
            raise clean from None


def _decoded(body: bytes, method: object) -> Any:
    """A node's answer parsed as JSON, once orjson has read it whole: at most 1,024 arrays and
    objects deep, numbers a double holds, UTF-8 text.

    web3 parses with the standard library's ``json``, whose decoder recurses in C once per level;
    web3 raises the interpreter's recursion limit to 100,000 on import (for py-evm), so an answer of
    a few tens of thousands of ``[`` — a few hundred kilobytes, well inside the size bound — overflows
    the C stack and kills the tick with SIGSEGV: no coded error, no outcome in the activity log.
    orjson refuses such nesting with an error; the answer is then parsed by ``json`` as before, so
    an integer keeps every digit (orjson reads one past 64 bits as a double).

    Raises:
        MalformedAnswer: the answer is not JSON this reads (a failure of the connection).
    """
    try:
        orjson.loads(body)
        return json.loads(body)
    except ValueError as exc:  # orjson's JSONDecodeError is one, as are json's and a bad encoding
        raise MalformedAnswer(
            f"the node's answer to {method} is not JSON that can be read ({str(exc)[:120]}); "
            "nothing was read from it"
        ) from None


class MalformedAnswer(requests.RequestException):
    """A node's answer is not JSON that can be read (see ``_decoded``): a failure of the connection,
    so a read is ``ChainUnavailable`` and a send is uncertain, never refused."""


class TickDeadlinePassed(requests.Timeout):
    """A request was not made: the tick's overall time bound had passed (see ``Chain.set_deadline``)."""


class AnswerMismatch(requests.RequestException):
    """A node's answer names another request's ``id`` than the one it answers (see ``_Provider``)."""


def _same_id(answered: object, sent: int) -> bool:
    """Whether an answer's ``id`` is the request's: the same integer (a boolean is not one), or its
    decimal text, as some proxies write it."""
    if isinstance(answered, bool):
        return False
    return (isinstance(answered, int) and answered == sent) or answered == str(sent)


class QuoteUnavailable(Exception):
    """The router would not quote (no route, reverted call, node error); the message says why."""


class ChainView(Protocol):
    """What a strategy may read from the chain, at the head."""

    def balance_of(self, token: str, owner: str, block: int | None = None) -> int:
        """``token.balanceOf(owner)``."""
        ...

    def allowance(self, token: str, owner: str, spender: str) -> int:
        """``token.allowance(owner, spender)``."""
        ...

    def quote(self, router: str, amount_in: int, path: Sequence[str]) -> int:
        """The router's ``getAmountsOut(amount_in, path)[-1]``; raises ``QuoteUnavailable``."""
        ...


#: what reading a node's answer of the wrong shape raises (a field missing, a list for an object)
SHAPE_ERRORS: tuple[type[BaseException], ...] = (KeyError, TypeError, AttributeError, IndexError)
#: bounds of the numbers a node names: blocks, times, nonces and chain ids fit 63 bits
INT63 = 2**63
UINT256 = 2**256


@contextlib.contextmanager
def _reading(what: str) -> Iterator[None]:
    """Translate a failed chain read into ``ChainUnavailable`` (the one place that does)."""
    try:
        yield
    except READ_ERRORS as exc:
        raise ChainUnavailable(
            f"cannot read {what} from the chain: {exc}; check that the node at the configured "
            "rpc_url is running and synced"
        ) from exc
    except SHAPE_ERRORS as exc:
        raise ChainUnavailable(
            f"cannot read {what} from the chain: the node's answer is malformed ({type(exc).__name__}: "
            f"{exc}); check that the configured rpc_url is an Ethereum JSON-RPC node"
        ) from exc


def quantity(value: object, field: str, bound: int = INT63) -> int:
    """``value`` as a node's quantity: an integer in ``[0, bound)`` (web3 has turned its hex into one).

    Raises:
        ValueError: anything else (a float, a boolean, a negative, a number past ``bound``, null).
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
        raise ValueError(f"the node's {field} is {str(value)[:80]!r}, not a quantity below {bound}")
    return value


def _hash32(value: object, field: str) -> str | None:
    """A 32-byte hash the node named, as lowercase 0x-hex; None when it named none.

    Raises:
        ValueError: anything else (another length, not hex).
    """
    if value is None:
        return None
    if not isinstance(value, str | bytes) or len(HexBytes(value)) != 32:
        raise ValueError(f"the node's {field} is {str(value)[:80]!r}, not a 32-byte hash")
    return Web3.to_hex(HexBytes(value)).lower()


def _same_hash(value: object, tx_hash: str, what: str) -> None:
    """Refuse an answer about another transaction than the one asked for."""
    answered = Web3.to_hex(HexBytes(value)) if isinstance(value, str | bytes) else repr(value)
    if answered.lower() != tx_hash.lower():
        raise ValueError(f"the node answered with the {what} of {answered[:80]}, not of {tx_hash}")


class Chain:
    """web3 access for one agent.

    Args:
        w3: a connected ``Web3`` (HTTP to a node, or the in-process ``EthereumTesterProvider``).
    """

    def __init__(self, w3: Web3) -> None:
        self.w3 = w3
        self._router_abi = w3.eth.contract(abi=abi("SwapRouter"))
        self._tokens: dict[str, TokenInfo] = {}
        self._chain_id: int | None = None

    @classmethod
    def connect(cls, rpc_url: str, *, timeout: float = 10.0) -> Chain:
        """A ``Chain`` over HTTP JSON-RPC at ``rpc_url`` (no request is made yet)."""
        provider = _Provider(rpc_url, timeout=timeout)
        return cls(Web3(provider))

    def set_deadline(self, deadline: float | None) -> None:
        """Make no request past the ``time.monotonic()`` instant ``deadline`` (None: no bound), and
        none that could end after it: each request's time is cut to what is left. A request refused
        so fails as a timeout does (``ChainUnavailable``). The send of a signed swap is exempt. Over
        a transport without such bounds (the in-process EVM) this does nothing.
        """
        provider = self.w3.provider
        if isinstance(provider, _Provider):
            provider.deadline = deadline

    # -- plain reads ------------------------------------------------------------------------------

    def chain_id(self) -> int:
        """The chain id (read once).

        Raises:
            ChainUnavailable: the node cannot be read.
        """
        if self._chain_id is None:
            with _reading("the chain id"):
                self._chain_id = quantity(self.w3.eth.chain_id, "chain id")
        return self._chain_id

    def head(self) -> int:
        """The latest block number.

        Raises:
            ChainUnavailable: the node cannot be read.
        """
        with _reading("the latest block number"):
            return quantity(self.w3.eth.block_number, "latest block number")

    def block_timestamp(self, block: int) -> int:
        """The timestamp of ``block`` (unix seconds).

        Raises:
            ChainUnavailable: the node cannot be read.
        """
        with _reading(f"block {block}"):
            raw: Any = self.w3.eth.get_block(block)
            number = quantity(raw["number"], f"block {block}'s number")
            if number != block:  # another block's time would stamp a swap (and the cadence) with it
                raise ValueError(f"the node answered with block {number}, not block {block}")
            return quantity(raw["timestamp"], f"block {block}'s timestamp")

    def receipt(self, tx_hash: str, timeout: float) -> Receipt | None:
        """The receipt of ``tx_hash``, waiting up to ``timeout`` s; None if not readable by then.

        Raises:
            ChainUnavailable: the node cannot be read at all.
        """
        with _reading(f"the receipt of {tx_hash}"):
            try:
                if timeout <= 0:
                    raw: Any = self.w3.eth.get_transaction_receipt(HexBytes(tx_hash))
                else:
                    raw = self.w3.eth.wait_for_transaction_receipt(
                        HexBytes(tx_hash), timeout=timeout, poll_latency=0.05
                    )
            except (TimeExhausted, TransactionNotFound):
                return None
            # a node's word is checked before it is believed: the receipt of the transaction asked
            # about, a status that is success or failure, a block, logs as a list
            _same_hash(raw["transactionHash"], tx_hash, "receipt")
            if type(raw["status"]) is not int or raw["status"] not in (0, 1):  # JSON true or 1.0: no
                raise ValueError(f"the receipt's status is {str(raw['status'])[:80]!r}, neither 0 nor 1")
            if not isinstance(raw["logs"], list | tuple):
                raise ValueError("the receipt's logs are not a list")
            logs = tuple(
                LogRecord(
                    address=str(log["address"]),
                    topics=tuple(Web3.to_hex(t) for t in log["topics"]),
                    data=bytes(log["data"]),
                )
                for log in raw["logs"]
            )
            return Receipt(
                status=int(raw["status"]),
                block=quantity(raw["blockNumber"], "receipt's block number"),
                gas_used=quantity(raw["gasUsed"], "receipt's gasUsed", UINT256),
                logs=logs,
                block_hash=_hash32(raw.get("blockHash"), "receipt's block hash"),
            )

    def block_hash(self, block: int) -> str | None:
        """The hash of the block at number ``block``; None when the chain has no such block.

        Raises:
            ChainUnavailable: the node cannot be read.
        """
        with _reading(f"block {block}"):
            try:
                raw: Any = self.w3.eth.get_block(block)
            except NoSuchBlock:
                return None
            if raw is None:
                return None
            number = quantity(raw["number"], f"block {block}'s number")
            if number != block:
                raise ValueError(f"the node answered with block {number}, not block {block}")
            found = _hash32(raw["hash"], f"block {block}'s hash")
            if found is None:
                raise ValueError(f"the node's block {block} has no hash")
            return found

    def transaction(self, tx_hash: str) -> ChainTransaction | None:
        """The transaction as the node holds it (``eth_getTransactionByHash``); None when unknown.

        Raises:
            ChainUnavailable: the node cannot be read.
        """
        with _reading(f"the transaction {tx_hash}"):
            try:
                raw: Any = self.w3.eth.get_transaction(HexBytes(tx_hash))
            except TransactionNotFound:
                return None
            if raw is None:
                return None
            _same_hash(raw["hash"], tx_hash, "transaction")
            block = raw.get("blockNumber")
            return ChainTransaction(
                sender=str(raw["from"]),
                to=None if raw.get("to") is None else str(raw["to"]),
                nonce=quantity(raw["nonce"], "transaction's nonce", 2**64),
                data=Web3.to_hex(HexBytes(raw["input"])),
                block=None if block is None else quantity(block, "transaction's block number"),
            )

    def nonce(self, account: str) -> int:
        """How many of ``account``'s transactions are mined: its next unused nonce at the head.

        Raises:
            ChainUnavailable: the node cannot be read.
        """
        with _reading(f"the nonce of {account}"):
            count = self.w3.eth.get_transaction_count(Web3.to_checksum_address(account), "latest")
            return quantity(count, f"transaction count of {account}", 2**64)

    def revert_reason(self, tx_hash: str) -> str | None:
        """Why a mined transaction reverted: its call replayed on the state before its block.

        Returns the decoded ``Error(string)`` (``"INSUFFICIENT_OUTPUT_AMOUNT"``), or None when the
        replay does not revert or the contract gave no reason.

        Raises:
            ChainUnavailable: the node cannot be read.
        """
        tx = self.transaction(tx_hash)
        if tx is None or tx.block is None or tx.to is None:
            return None
        call: Any = {"from": tx.sender, "to": tx.to, "data": tx.data}
        with _reading(f"the revert reason of {tx_hash}"):
            try:
                self.w3.eth.call(call, block_identifier=max(0, tx.block - 1))
            except _REVERTS as exc:
                text = revert_text(exc)
                return reason_of(text) if text != _REVERTED else None
        return None

    def decode_swap(self, to: str, data: str) -> SwapCall | None:
        """Decode ``data`` as the router's ``swapExactTokensForTokens``; None when it is not."""
        del to  # the calldata alone says what was asked; the router address may have changed since
        try:
            fn, args = self._router_abi.decode_function_input(data)
        except (ValueError, Web3Exception):
            return None
        path = list(args.get("path", []))
        if getattr(fn, "fn_name", None) != SWAP_FUNCTION or len(path) < 2:
            return None
        return SwapCall(token_in=str(path[0]), token_out=str(path[-1]), amount_in=int(args["amountIn"]))

    def token_info(self, token: str) -> TokenInfo:
        """The ERC-20's decimals and symbol (read once per token).

        Raises:
            ChainUnavailable: the token cannot be read (not a contract, node down).
        """
        key = token.lower()
        if key not in self._tokens:
            contract = self._token(token)
            with _reading(f"decimals and symbol of {token}"):
                decimals = int(contract.functions.decimals().call())
                try:
                    symbol: str | bytes = str(contract.functions.symbol().call())
                except BadFunctionCallOutput:  # not an ABI string: a bytes32, as MKR's is
                    symbol = bytes(self._token32(token).functions.symbol().call())
            self._tokens[key] = TokenInfo(decimals=decimals, symbol=_symbol_text(symbol, token))
        return self._tokens[key]

    def balance_of(self, token: str, owner: str, block: int | None = None) -> int:
        """``token.balanceOf(owner)`` at ``block`` (the head when None).

        Raises:
            ChainUnavailable: the balance cannot be read.
        """
        at: Any = "latest" if block is None else block
        with _reading(f"balanceOf({owner}) of {token}"):
            return int(self._token(token).functions.balanceOf(owner).call(block_identifier=at))

    def allowance(self, token: str, owner: str, spender: str) -> int:
        """``token.allowance(owner, spender)`` at the head.

        Raises:
            ChainUnavailable: the allowance cannot be read.
        """
        with _reading(f"allowance({owner}, {spender}) of {token}"):
            return int(self._token(token).functions.allowance(owner, spender).call())

    def quote(self, router: str, amount_in: int, path: Sequence[str]) -> int:
        """The router's quote for ``amount_in`` along ``path``.

        Raises:
            QuoteUnavailable: the router reverted or the node failed; the message says which.
        """
        contract = self.router(router)
        checksummed = [Web3.to_checksum_address(p) for p in path]
        try:
            amounts = contract.functions.getAmountsOut(amount_in, checksummed).call()
        except READ_ERRORS as exc:
            raise QuoteUnavailable(revert_text(exc)) from exc
        return int(amounts[-1])

    # -- contracts --------------------------------------------------------------------------------

    def router(self, address: str) -> Any:
        """The router contract at ``address`` (web3 ``Contract``)."""
        return self.w3.eth.contract(address=Web3.to_checksum_address(address), abi=abi("SwapRouter"))

    def _token(self, address: str) -> Any:
        return self.w3.eth.contract(address=Web3.to_checksum_address(address), abi=abi("TestToken"))

    def _token32(self, address: str) -> Any:
        """The token at ``address`` read as one whose ``symbol()`` returns bytes32."""
        return self.w3.eth.contract(address=Web3.to_checksum_address(address), abi=abi("Bytes32Token"))


def _symbol_text(symbol: str | bytes, token: str) -> str:
    """A token's symbol as text: a bytes32 one less its trailing NULs, which must be UTF-8 (the
    activity log's own rules for a symbol apply to the text either way)."""
    if isinstance(symbol, str):
        return symbol
    try:
        return symbol.rstrip(b"\0").decode("utf-8")
    except UnicodeDecodeError:
        raise ActivityInvalidRecord(
            "symbol",
            f"the bytes32 symbol() of token {token} is not UTF-8 text ({symbol.hex()}); choose another token",
        ) from None
