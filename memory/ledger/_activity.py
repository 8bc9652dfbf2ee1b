"""The runner's activity log, ``<sail-dir>/activity.jsonl``.

The runner's own account of what it did with each dispatch, and of every tick:

* ``dispatch_signed`` — written ahead: the signed transaction (hash, nonce, sender, target,
  calldata), durable *before* it is sent, so no transaction can reach the chain unrecorded;
* ``dispatch_submitted`` — the node accepted it; ``dispatch_executed`` / ``dispatch_reverted``
  (with the decoded revert reason) once a receipt was read, by the runner or by reconcile;
* ``dispatch_unsent`` — reconcile's resolution of a signed dispatch that never reached a block (its
  nonce still unused past the timeout, or the node refused it); ``dispatch_dropped`` — its nonce
  was consumed by another transaction, so it never can. Neither is a trade;
* ``dispatch_mismatch`` — the chain's copy of a dispatch differs from this log's: an error, kept;
* ``dispatch_included`` — the block (number and hash) and status reconcile ledgered a mined dispatch
  from, written just before its ``acted`` line; ``chain_reorged`` — a tick found a recent ledgered
  act no longer there (gone, or in another block): no tick trades until ``reorg_acknowledged``;
* ``token_metadata`` — a token's decimals and symbol, read once, so an entry written while the
  chain is unreachable can still say its amount in human units;
* ``tick_started`` / ``tick_finished`` — every ``sail tick``: when, and its outcome (``skipped``,
  ``submitted`` or ``failed`` with the error's code).

The ledger reads intentions from nowhere else, and records nothing from them but what the chain
confirms. Events of other kinds are kept as ``OtherActivity`` and ignored.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, get_args

import orjson

from journal import JournalCorrupt, LineDamaged, LineLog
from memory.ledger._entries import text_refusal
from memory.ledger._errors import ActivityInvalidRecord
from memory.ledger._lines import LineFile, line_sha256, ready_to_append, require_regular
from memory.ledger._snapshot import OpenDispatch

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}\Z")
_TX_HASH = re.compile(r"0x[0-9a-fA-F]{64}\Z")
_HEX = re.compile(r"0x([0-9a-fA-F]{2})*\Z")
_BLOCK_HASH = _TX_HASH  # a block hash is 32 bytes of hex, as a transaction hash is


#: the largest integer a JSON line carries exactly (orjson's 64-bit bound)
MAX_U64 = 2**64 - 1


def _uint(value: object, *, bound: int = MAX_U64) -> bool:
    return type(value) is int and 0 <= value <= bound


def _positive(value: object) -> bool:
    return isinstance(value, int) and _uint(value) and value > 0


def _matching(pattern: re.Pattern[str]) -> Callable[[object], bool]:
    return lambda value: isinstance(value, str) and bool(pattern.match(value))


def _or_null(ok: Callable[[object], bool]) -> Callable[[object], bool]:
    return lambda value: value is None or ok(value)


def _one_of(*allowed: str) -> Callable[[object], bool]:
    return lambda value: value in allowed


def _text(value: object) -> bool:
    return isinstance(value, str)


def _non_empty(value: object) -> bool:
    return isinstance(value, str) and bool(value)


def _status(value: object) -> bool:
    return type(value) is int and value in (0, 1)


def _symbol(value: object) -> bool:
    return isinstance(value, str) and bool(value) and not any(c.isspace() for c in value)


@dataclass(frozen=True)
class _Rule:
    """One field's check: the record's attribute, the name an error gives it (its JSON key), the
    test its value must pass and the reason given when it does not."""

    attr: str
    name: str
    ok: Callable[[object], bool]
    reason: str


# the rules every record kind holding the field checks it by, so all of them refuse it alike
_TS = _Rule("ts", "ts", _uint, "must be unix seconds")
_CHAIN_ID = _Rule("chain_id", "chainId", _positive, "must be a positive int")
_TX = _Rule("tx_hash", "txHash", _matching(_TX_HASH), "not a hash")
_NONCE = _Rule("nonce", "nonce", _uint, "must be a non-negative int")
_BLOCK = _Rule("block", "block", _uint, "must be a block number")
_BLOCK_HASH_RULE = _Rule("block_hash", "blockHash", _matching(_BLOCK_HASH), "not a block hash")
_PID = _Rule("pid", "pid", _uint, "must be a process id")
_REASON = _Rule("reason", "reason", _non_empty, "must be non-empty")
"""The reason of a resolution or a reorganisation: it is what the record says."""
_CALL = (
    _Rule("sender", "from", _matching(_ADDRESS), "not an address"),
    _Rule("to", "to", _matching(_ADDRESS), "not an address"),
    _Rule("data", "data", _matching(_HEX), "not 0x-hex calldata"),
    _Rule("action", "action", _non_empty, "must be non-empty"),
    _Rule("permission", "permission", _or_null(_text), "str or null"),
)
"""A dispatch's call: who sent what to whom, and under which action and permission."""


def _optional_text(*names: str) -> tuple[_Rule, ...]:
    return tuple(_Rule(name, name, _or_null(_text), "str or null") for name in names)


class _Checked:
    """A record whose fields are checked as it is made, in the order of its ``rules`` table."""

    rules: ClassVar[tuple[_Rule, ...]] = ()

    def __post_init__(self) -> None:
        for rule in self.rules:
            if not rule.ok(getattr(self, rule.attr)):
                raise ActivityInvalidRecord(rule.name, rule.reason)


@dataclass(frozen=True)
class DispatchSigned(_Checked):
    """Written ahead of sending: a transaction the runner signed (hash, nonce, sender, target, calldata).

    Its line is durable before the transaction leaves the process, so a crash at any later point
    leaves a record that reconcile resolves from the chain.
    """

    ts: int
    chain_id: int
    tx_hash: str
    nonce: int
    sender: str
    to: str
    data: str
    action: str
    permission: str | None

    event: ClassVar[str] = "dispatch_signed"

    rules = (_TS, _CHAIN_ID, _TX, _NONCE, *_CALL)

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {
            "ts": self.ts,
            "event": self.event,
            "chainId": self.chain_id,
            "txHash": self.tx_hash,
            "nonce": self.nonce,
            "from": self.sender,
            "to": self.to,
            "data": self.data,
            "action": self.action,
            "permission": self.permission,
        }


@dataclass(frozen=True)
class DispatchSubmitted(_Checked):
    """A transaction the runner signed and sent: its hash, sender, target and calldata."""

    ts: int
    chain_id: int
    tx_hash: str
    sender: str
    to: str
    data: str
    action: str
    permission: str | None

    event: ClassVar[str] = "dispatch_submitted"

    rules = (_TS, _CHAIN_ID, _TX, *_CALL)

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {
            "ts": self.ts,
            "event": self.event,
            "chainId": self.chain_id,
            "txHash": self.tx_hash,
            "from": self.sender,
            "to": self.to,
            "data": self.data,
            "action": self.action,
            "permission": self.permission,
        }


@dataclass(frozen=True)
class DispatchSettled(_Checked):
    """A receipt was read: ``dispatch_executed`` (status 1) or ``dispatch_reverted``.

    ``reason`` is a reverted dispatch's decoded revert reason (``Error(string)``), or None when the
    contract gave none or it could not be read.
    """

    ts: int
    event: Literal["dispatch_executed", "dispatch_reverted"]
    tx_hash: str
    block: int
    gas_used: int
    reason: str | None = None

    rules = (
        _TS,
        _Rule("event", "event", _one_of("dispatch_executed", "dispatch_reverted"), "executed or reverted"),
        _TX,
        _BLOCK,
        _Rule("gas_used", "gasUsed", _uint, "must be an int"),
        *_optional_text("reason"),  # a revert need not say why
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores (``gasUsed`` as a decimal string, as in the ledger)."""
        wire: dict[str, Any] = {
            "ts": self.ts,
            "event": self.event,
            "txHash": self.tx_hash,
            "block": self.block,
            "gasUsed": str(self.gas_used),
        }
        if self.reason is not None:
            wire["reason"] = self.reason
        return wire


@dataclass(frozen=True)
class _Resolved(_Checked):
    """A signed dispatch resolved as never to be ledgered: the fields and line of both kinds."""

    ts: int
    tx_hash: str
    nonce: int
    reason: str

    event: ClassVar[str]

    rules = (_TS, _TX, _NONCE, _REASON)

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {
            "ts": self.ts,
            "event": self.event,
            "txHash": self.tx_hash,
            "nonce": self.nonce,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class DispatchUnsent(_Resolved):
    """A signed dispatch resolved as never having reached a block: not a trade, never ledgered.

    Written by reconcile when the dispatch's nonce is still unused past the configured timeout and
    no node knows its hash, or by the runner when the node refused it.
    """

    event: ClassVar[str] = "dispatch_unsent"


@dataclass(frozen=True)
class DispatchDropped(_Resolved):
    """A signed dispatch whose nonce another transaction consumed: it can never be mined."""

    event: ClassVar[str] = "dispatch_dropped"


@dataclass(frozen=True)
class DispatchMismatch(_Checked):
    """The chain's copy of a dispatch differs from this log's in ``field``: an error, kept.

    The ledger takes the chain's side; the log's copy was altered or damaged.
    """

    ts: int
    tx_hash: str
    field: str
    local: str
    chain: str

    event: ClassVar[str] = "dispatch_mismatch"

    rules = (
        _TS,
        _TX,
        *(_Rule(name, name, _text, "must be a string") for name in ("field", "local", "chain")),
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {
            "ts": self.ts,
            "event": self.event,
            "txHash": self.tx_hash,
            "field": self.field,
            "local": self.local,
            "chain": self.chain,
        }


@dataclass(frozen=True)
class DispatchIncluded(_Checked):
    """Where the chain (``chain_id``) held a mined dispatch when reconcile ledgered it: its
    ``block`` number, that block's hash and the receipt's ``status``. Written just before the
    ``acted`` line it backs, so a later tick can check that the chain still holds the swap there (a
    reorganisation deeper than ``confirmations`` would otherwise go unseen)."""

    ts: int
    chain_id: int
    tx_hash: str
    block: int
    block_hash: str
    status: int

    event: ClassVar[str] = "dispatch_included"

    rules = (
        _TS, _CHAIN_ID, _TX, _BLOCK, _BLOCK_HASH_RULE,
        _Rule("status", "status", _status, "must be 0 or 1"),
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {
            "ts": self.ts,
            "event": self.event,
            "chainId": self.chain_id,
            "txHash": self.tx_hash,
            "block": self.block,
            "blockHash": self.block_hash,
            "status": self.status,
        }


@dataclass(frozen=True)
class ReorgDetected(_Checked):
    """The chain no longer holds a recent ledgered act where it was ledgered (``chain_reorged``).

    ``block``/``block_hash`` are where it was ledgered; ``chain_block``, ``chain_block_hash`` and
    ``chain_status`` what the chain's receipt says now (all null: the chain has no receipt for it).
    Until a ``reorg_acknowledged`` line names the same transaction, no tick trades.
    """

    ts: int
    tx_hash: str
    block: int
    block_hash: str
    chain_block: int | None
    chain_block_hash: str | None
    chain_status: int | None
    reason: str

    event: ClassVar[str] = "chain_reorged"

    rules = (
        _TS,
        _TX,
        _BLOCK,
        _BLOCK_HASH_RULE,
        _Rule("chain_block", "chainBlock", _or_null(_uint), "a block number or null"),
        _Rule("chain_block_hash", "chainBlockHash", _or_null(_matching(_BLOCK_HASH)), "a block hash or null"),
        _Rule("chain_status", "chainStatus", _or_null(_status), "0, 1 or null"),
        _REASON,
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {
            "ts": self.ts,
            "event": self.event,
            "txHash": self.tx_hash,
            "block": self.block,
            "blockHash": self.block_hash,
            "chainBlock": self.chain_block,
            "chainBlockHash": self.chain_block_hash,
            "chainStatus": self.chain_status,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class ReorgAcknowledged(_Checked):
    """A person reviewed the ``chain_reorged`` line of ``tx_hash`` and let the agent trade again
    (``sail ack-reorg``): the ledger keeps its line for that act as written."""

    ts: int
    tx_hash: str

    event: ClassVar[str] = "reorg_acknowledged"

    rules = (_TS, _TX)

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {"ts": self.ts, "event": self.event, "txHash": self.tx_hash}


@dataclass(frozen=True)
class TokenMetadata(_Checked):
    """A token's ``decimals`` and ``symbol``, as read from the chain once."""

    ts: int
    token: str
    decimals: int
    symbol: str

    event: ClassVar[str] = "token_metadata"

    rules = (
        _TS,
        _Rule("token", "token", _matching(_ADDRESS), "not an address"),
        _Rule("decimals", "decimals", lambda v: _uint(v, bound=255), "must be an int in [0, 255]"),
        _Rule("symbol", "symbol", _symbol, "must be a non-empty string without spaces"),
    )

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {
            "ts": self.ts,
            "event": self.event,
            "token": self.token,
            "decimals": self.decimals,
            "symbol": self.symbol,
        }


@dataclass(frozen=True)
class TickStarted(_Checked):
    """A ``sail tick`` began (``pid`` is its process)."""

    ts: int
    pid: int

    event: ClassVar[str] = "tick_started"

    rules = (_TS, _PID)

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {"ts": self.ts, "event": self.event, "pid": self.pid}


TickOutcome = Literal["skipped", "submitted", "failed"]


@dataclass(frozen=True)
class TickFinished(_Checked):
    """A ``sail tick`` ended: ``skipped`` (with its reason), ``submitted`` (with the tx hash), or
    ``failed`` (with the error's ``code`` and message)."""

    ts: int
    pid: int
    outcome: TickOutcome
    reason: str | None = None
    tx_hash: str | None = None
    code: str | None = None
    message: str | None = None

    event: ClassVar[str] = "tick_finished"

    rules = (
        _TS,
        _PID,
        _Rule("outcome", "outcome", _one_of(*get_args(TickOutcome)), "skipped, submitted or failed"),
        *_optional_text("reason", "tx_hash", "code", "message"),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        _need((self.code is not None) == (self.outcome == "failed"), "code", "set exactly when failed")

    @property
    def ok(self) -> bool:
        """True for a tick that did not fail."""
        return self.outcome != "failed"

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {
            "ts": self.ts,
            "event": self.event,
            "pid": self.pid,
            "outcome": self.outcome,
            "reason": self.reason,
            "txHash": self.tx_hash,
            "code": self.code,
            "message": self.message,
        }


@dataclass(frozen=True)
class OtherActivity:
    """Any other runner event, kept as read."""

    ts: int
    event: str
    fields: Mapping[str, Any]

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores."""
        return {**self.fields, "ts": self.ts, "event": self.event}


ActivityRecord = (
    DispatchSigned
    | DispatchSubmitted
    | DispatchSettled
    | DispatchUnsent
    | DispatchDropped
    | DispatchMismatch
    | DispatchIncluded
    | ReorgDetected
    | ReorgAcknowledged
    | TokenMetadata
    | TickStarted
    | TickFinished
    | OtherActivity
)


def check_writable_record(record: ActivityRecord) -> None:
    """Refuse a record whose free text (a reason, a message, a code, a symbol, an action, a
    permission, a mismatch's field name) is longer than ``MAX_TEXT_CHARS``: checked when it is
    written, never when read. The copies a ``dispatch_mismatch`` compares are bounded too (reconcile
    cuts a longer one with ``fit_copy``, keeping its SHA-256); the calldata of a dispatch is not.

    Raises:
        ActivityInvalidRecord: a field too long (named).
    """
    fields: dict[str, str | None]
    if isinstance(record, DispatchSigned | DispatchSubmitted):
        fields = {"action": record.action, "permission": record.permission}
    elif isinstance(record, DispatchSettled | DispatchUnsent | DispatchDropped | ReorgDetected):
        fields = {"reason": record.reason}
    elif isinstance(record, DispatchMismatch):
        fields = {"field": record.field, "local": record.local, "chain": record.chain}
    elif isinstance(record, TokenMetadata):
        fields = {"symbol": record.symbol}
    elif isinstance(record, TickFinished):
        fields = {"reason": record.reason, "code": record.code, "message": record.message}
    else:
        fields = {}
    refused = text_refusal(fields)
    if refused is not None:
        raise ActivityInvalidRecord(*refused)


def _need(ok: bool, field: str, reason: str) -> None:
    if not ok:
        raise ActivityInvalidRecord(field, reason)


def activity_from_wire(obj: object) -> ActivityRecord:
    """Validate a decoded activity line and return its record.

    Raises:
        ActivityInvalidRecord: a known event with missing or ill-typed fields, or no event at all.
    """
    _need(isinstance(obj, dict), "(record)", "must be a JSON object")
    assert isinstance(obj, dict)
    event = obj.get("event")
    _need(isinstance(event, str) and bool(event), "event", "must be a non-empty string")
    try:
        known = _known(event, obj)
        if known is not None:
            return known
        if event == "dispatch_submitted":
            return DispatchSubmitted(
                ts=obj["ts"],
                chain_id=obj["chainId"],
                tx_hash=obj["txHash"],
                sender=obj["from"],
                to=obj["to"],
                data=obj["data"],
                action=obj["action"],
                permission=obj["permission"],
            )
        if event in ("dispatch_executed", "dispatch_reverted"):
            gas = obj["gasUsed"]
            _need(isinstance(gas, str) and gas.isdigit(), "gasUsed", "must be a decimal string")
            return DispatchSettled(
                ts=obj["ts"],
                event=event,
                tx_hash=obj["txHash"],
                block=obj["block"],
                gas_used=int(gas),
                reason=obj.get("reason"),
            )
    except KeyError as exc:
        raise ActivityInvalidRecord(str(exc.args[0]), "missing") from None
    ts = obj.get("ts")
    _need(type(ts) is int, "ts", "must be unix seconds")
    assert isinstance(ts, int) and isinstance(event, str)
    return OtherActivity(
        ts=ts, event=event, fields={k: v for k, v in obj.items() if k not in ("ts", "event")}
    )


def _signed(obj: dict[str, Any]) -> ActivityRecord:
    return DispatchSigned(
        ts=obj["ts"],
        chain_id=obj["chainId"],
        tx_hash=obj["txHash"],
        nonce=obj["nonce"],
        sender=obj["from"],
        to=obj["to"],
        data=obj["data"],
        action=obj["action"],
        permission=obj["permission"],
    )


def _tick_finished(obj: dict[str, Any]) -> ActivityRecord:
    return TickFinished(
        ts=obj["ts"],
        pid=obj["pid"],
        outcome=obj["outcome"],
        reason=obj["reason"],
        tx_hash=obj["txHash"],
        code=obj["code"],
        message=obj["message"],
    )


_KNOWN: dict[str, Callable[[dict[str, Any]], ActivityRecord]] = {
    "dispatch_signed": _signed,
    "dispatch_unsent": lambda o: DispatchUnsent(
        ts=o["ts"], tx_hash=o["txHash"], nonce=o["nonce"], reason=o["reason"]
    ),
    "dispatch_dropped": lambda o: DispatchDropped(
        ts=o["ts"], tx_hash=o["txHash"], nonce=o["nonce"], reason=o["reason"]
    ),
    "dispatch_mismatch": lambda o: DispatchMismatch(
        ts=o["ts"], tx_hash=o["txHash"], field=o["field"], local=o["local"], chain=o["chain"]
    ),
    "token_metadata": lambda o: TokenMetadata(
        ts=o["ts"], token=o["token"], decimals=o["decimals"], symbol=o["symbol"]
    ),
    "dispatch_included": lambda o: DispatchIncluded(
        ts=o["ts"],
        chain_id=o["chainId"],
        tx_hash=o["txHash"],
        block=o["block"],
        block_hash=o["blockHash"],
        status=o["status"],
    ),
    "chain_reorged": lambda o: ReorgDetected(
        ts=o["ts"],
        tx_hash=o["txHash"],
        block=o["block"],
        block_hash=o["blockHash"],
        chain_block=o["chainBlock"],
        chain_block_hash=o["chainBlockHash"],
        chain_status=o["chainStatus"],
        reason=o["reason"],
    ),
    "reorg_acknowledged": lambda o: ReorgAcknowledged(ts=o["ts"], tx_hash=o["txHash"]),
    "tick_started": lambda o: TickStarted(ts=o["ts"], pid=o["pid"]),
    "tick_finished": _tick_finished,
}
"""The records added with the write-ahead dispatch and the tick log (KeyError when incomplete)."""


def _known(event: object, obj: dict[str, Any]) -> ActivityRecord | None:
    build = _KNOWN.get(event) if isinstance(event, str) else None
    return None if build is None else build(obj)


class ActivityCodec:
    """One activity record per line, as JSON."""

    def encode(self, record: ActivityRecord, /) -> bytes:
        """Return the record as one JSON line."""
        return orjson.dumps(record.to_wire())

    def decode(self, line: bytes, /) -> ActivityRecord:
        """Return the record a line holds; raise ``LineDamaged`` if it is not one."""
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise LineDamaged(f"not JSON: {exc}") from None
        try:
            return activity_from_wire(obj)
        except ActivityInvalidRecord as exc:
            raise LineDamaged(f"not an activity record: {exc.field}: {exc.reason}", torn=False) from None


class ActivityLog:
    """The runner's append-only activity log of one agent (``<sail-dir>/activity.jsonl``)."""

    def __init__(self, sail_dir: str | os.PathLike[str]) -> None:
        self.path = Path(sail_dir) / "activity.jsonl"
        self._log: LineLog[ActivityRecord] = LineLog(self.path, ActivityCodec())
        self.lines: LineFile[ActivityRecord] = LineFile(self.path, ActivityCodec())

    def append(self, record: ActivityRecord) -> None:
        """Append one record durably (its own lock, torn tail cut first).

        Raises:
            journal.JournalUnwritable: the line could not be made durable.
            journal.JournalCorrupt: the log is damaged mid-file.
            LedgerNotAFile: the log or its lock is not a regular file.
            ActivityInvalidRecord: a text of the record is longer than ``MAX_TEXT_CHARS`` (nothing is
                written).
        """
        check_writable_record(record)
        require_regular(self.path, Path(f"{self.path}.lock"))
        with self._log.locked() as log:
            ready_to_append(log, self.lines)
            log.append(record)

    def read(self) -> Sequence[ActivityRecord]:
        """Every record, oldest first, judged as every reader judges the file (a missing log reads as empty).

        Raises:
            journal.JournalCorrupt: a damaged line that is not a torn tail.
            LedgerNotAFile: the log or its lock is not a regular file.
        """
        return self.lines.read_all()

    def iter_reverse(self) -> Iterator[ActivityRecord]:
        """Records newest first, read backwards (costs what is read, not the log's length).

        Raises:
            journal.JournalCorrupt: a damaged line among those read, or an acknowledged last line.
            LedgerNotAFile: the log or its lock is not a regular file.
        """
        fd = self.lines.open()
        if fd is None:
            return
        try:
            end = self.lines.readable_end(fd)
            for line in self.lines.iter_reverse(fd, end):
                yield line.record
        finally:
            os.close(fd)

    def scan(self, events: frozenset[str]) -> Iterator[ActivityRecord]:
        """The records whose ``event`` is in ``events``, oldest first, streamed (the others are
        parsed as JSON only; the log is never held in memory whole).

        Raises:
            journal.JournalCorrupt: a damaged line among those decoded, or an acknowledged last line.
            LedgerNotAFile: the log or its lock is not a regular file.
        """
        fd = self.lines.open()
        if fd is None:
            return
        try:
            end = self.lines.readable_end(fd)
            for offset, raw in self.lines.forward_raw(fd, 0, end):
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    obj = None
                if not isinstance(obj, dict) or obj.get("event") in events:
                    yield self.lines.decode(raw, offset, fd)
        finally:
            os.close(fd)

    def numbered(self, events: frozenset[str]) -> Iterator[tuple[int, str, ActivityRecord]]:
        """The records whose ``event`` is in ``events``, oldest first, each with its line number
        (from 1, counting every line) and its line's SHA-256 (as ``scan`` reads them).

        Raises:
            journal.JournalCorrupt: a damaged line among those decoded, or an acknowledged last line.
            LedgerNotAFile: the log or its lock is not a regular file.
        """
        fd = self.lines.open()
        if fd is None:
            return
        try:
            end = self.lines.readable_end(fd)
            for number, (offset, raw) in enumerate(self.lines.forward_raw(fd, 0, end), start=1):
                try:
                    obj = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    obj = None
                if not isinstance(obj, dict) or obj.get("event") in events:
                    yield number, line_sha256(raw), self.lines.decode(raw, offset, fd)
        finally:
            os.close(fd)

    def dispatch_at(self, dispatch: OpenDispatch) -> DispatchSigned | DispatchSubmitted:
        """The activity line an unresolved dispatch of the snapshot names, read back and checked.

        Raises:
            journal.JournalCorrupt: the line is no longer there, or no longer that dispatch's.
            LedgerNotAFile: the log is not a regular file.
        """
        fd = self.lines.open()
        try:
            line = None if fd is None else self.lines.line_at(fd, dispatch.line.offset, dispatch.line.sha256)
            record = None if line is None else line.record
            if isinstance(record, DispatchSigned | DispatchSubmitted) and record.tx_hash == dispatch.tx_hash:
                return record
            reason = f"the dispatch {dispatch.tx_hash} is no longer at offset {dispatch.line.offset}"
            raise JournalCorrupt(
                f"{self.path} changed under the ledger's lock ({reason}); inspect it with `flows check`",
                path=self.path,
                line=0,
                reason=reason,
            )
        finally:
            if fd is not None:
                os.close(fd)

    def submitted(self) -> list[DispatchSubmitted]:
        """Every ``dispatch_submitted`` record, oldest first, one per tx hash."""
        seen: set[str] = set()
        out: list[DispatchSubmitted] = []
        for record in self.read():
            if isinstance(record, DispatchSubmitted) and record.tx_hash.lower() not in seen:
                seen.add(record.tx_hash.lower())
                out.append(record)
        return out
