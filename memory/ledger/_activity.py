"""The runner's activity log, ``<sail-dir>/activity.jsonl`` (SPEC R-A7).

The runner's own account of what it did with each dispatch: ``dispatch_submitted`` with the tx
hash as soon as the transaction is sent (with the calldata it sent, so reconcile can decode what
was asked for), then ``dispatch_executed`` or ``dispatch_reverted`` once the receipt is awaited.
The ledger reads intentions from nowhere else, and records nothing from them but what the chain
confirms. Events the runner may add later (permission resolution, denials) are kept as
``OtherActivity`` and ignored by reconcile.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

import orjson

from journal import LineDamaged, LineLog
from memory.ledger._errors import ActivityInvalidRecord

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{40}\Z")
_TX_HASH = re.compile(r"0x[0-9a-fA-F]{64}\Z")
_HEX = re.compile(r"0x([0-9a-fA-F]{2})*\Z")


@dataclass(frozen=True)
class DispatchSubmitted:
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

    def __post_init__(self) -> None:
        _need(type(self.ts) is int and self.ts >= 0, "ts", "must be unix seconds")
        _need(type(self.chain_id) is int and self.chain_id > 0, "chainId", "must be a positive int")
        _need(isinstance(self.tx_hash, str) and bool(_TX_HASH.match(self.tx_hash)), "txHash", "not a hash")
        _need(isinstance(self.sender, str) and bool(_ADDRESS.match(self.sender)), "from", "not an address")
        _need(isinstance(self.to, str) and bool(_ADDRESS.match(self.to)), "to", "not an address")
        _need(isinstance(self.data, str) and bool(_HEX.match(self.data)), "data", "not 0x-hex calldata")
        _need(isinstance(self.action, str) and bool(self.action), "action", "must be non-empty")
        _need(self.permission is None or isinstance(self.permission, str), "permission", "str or null")

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
class DispatchSettled:
    """The runner saw the receipt: ``dispatch_executed`` (status 1) or ``dispatch_reverted``."""

    ts: int
    event: Literal["dispatch_executed", "dispatch_reverted"]
    tx_hash: str
    block: int
    gas_used: int

    def __post_init__(self) -> None:
        _need(type(self.ts) is int and self.ts >= 0, "ts", "must be unix seconds")
        _need(self.event in ("dispatch_executed", "dispatch_reverted"), "event", "executed or reverted")
        _need(isinstance(self.tx_hash, str) and bool(_TX_HASH.match(self.tx_hash)), "txHash", "not a hash")
        _need(type(self.block) is int and self.block >= 0, "block", "must be a block number")
        _need(type(self.gas_used) is int and self.gas_used >= 0, "gasUsed", "must be an int")

    def to_wire(self) -> dict[str, Any]:
        """The JSON object the log stores (``gasUsed`` as a decimal string, as in the ledger)."""
        return {
            "ts": self.ts,
            "event": self.event,
            "txHash": self.tx_hash,
            "block": self.block,
            "gasUsed": str(self.gas_used),
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


ActivityRecord = DispatchSubmitted | DispatchSettled | OtherActivity


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
                ts=obj["ts"], event=event, tx_hash=obj["txHash"], block=obj["block"], gas_used=int(gas)
            )
    except KeyError as exc:
        raise ActivityInvalidRecord(str(exc.args[0]), "missing") from None
    ts = obj.get("ts")
    _need(type(ts) is int, "ts", "must be unix seconds")
    assert isinstance(ts, int) and isinstance(event, str)
    return OtherActivity(
        ts=ts, event=event, fields={k: v for k, v in obj.items() if k not in ("ts", "event")}
    )


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

    def append(self, record: ActivityRecord) -> None:
        """Append one record durably (its own lock, torn tail cut first).

        Raises:
            journal.JournalUnwritable: the line could not be made durable.
            journal.JournalCorrupt: the log is damaged mid-file.
        """
        with self._log.locked() as log:
            log.recover()
            log.append(record)

    def read(self) -> Sequence[ActivityRecord]:
        """Every record, oldest first (read-only: the line log's cache; a missing log reads as empty).

        Raises:
            journal.JournalCorrupt: a damaged line that is not a torn tail.
        """
        return self._log.read()

    def submitted(self) -> list[DispatchSubmitted]:
        """Every ``dispatch_submitted`` record, oldest first, one per tx hash."""
        seen: set[str] = set()
        out: list[DispatchSubmitted] = []
        for record in self.read():
            if isinstance(record, DispatchSubmitted) and record.tx_hash.lower() not in seen:
                seen.add(record.tx_hash.lower())
                out.append(record)
        return out
