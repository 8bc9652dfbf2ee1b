"""The derived state snapshot, ``.sail/memory/state.json``: a cache that never outranks the ledger.

It lets a tick, ``sail status`` and ``sail why`` answer without reading the ledger or the activity
log from the start. It holds, for a prefix of each of the two files:

* the last confirmed act (``lastConfirmed``) and **where it came from**: the byte offset of its
  ledger line and that line's SHA-256;
* the dispatches the runner signed that are not yet resolved (``open``), those resolved as never
  sent whose nonce is still free (``unsent``), and those the activity log says were dropped
  (``dropped``: a claim the chain must bear out, so they stay watched), each with the offset and
  SHA-256 of its line in the activity log, whether the node accepted it, and whether the ledger
  already says ``unverified``;
* token metadata read earlier (``tokens``), for human amounts while the chain is unreachable;
* the prefixes it covers: ``size`` in bytes, ``lines`` (how many lines the prefix holds, so a reader
  of the tail knows each line's number) and the SHA-256 of the prefix's first and last 4 KiB;
* a SHA-256 of all of the above (``digest``).

Verification costs a few small reads, whatever the files' length: the digest (a hand-edited field
fails it), each covered prefix still at the start of its file, the line of ``lastConfirmed`` and of
each open dispatch still at its offset with its digest, decoding to what the snapshot says. Any
disagreement, and the snapshot is rebuilt from the files. It is written by stage-and-rename, so a
reader sees an old snapshot or a new one, never a part; a missing or malformed one is stale.

Version 3 added ``lines``; version 4 ``dropped`` (a version 2 or 3 snapshot folded a ``dispatch_dropped``
line by forgetting its dispatch, so it is stale: rebuilt once from the files, and written as version 4).
Version 5 added what the reorganisation check needs: ``anchor`` (the ``dispatch_included`` line of the
last confirmed act: the block hash it was ledgered in), ``included`` (such lines of dispatches not yet
ledgered), ``reorged`` (the ``chain_reorged`` line not yet acknowledged) and ``acknowledged`` (the
newest ``reorg_acknowledged`` line); a version 4 snapshot is stale, rebuilt once. Version 6 added
``anchors`` (the ``dispatch_included`` lines of the last ``RECENT_ACTS`` confirmed acts, in ledger order:
each tick checks those near the chain's head, not the newest alone) and ``acked`` (the
``reorg_acknowledged`` lines naming one of them); a version 5 snapshot is stale, rebuilt once.
Version 7 keeps reverted acts among the ``anchors`` too, each with the receipt's ``status`` it was
ledgered with (a reorganisation may mine a reverted swap again where it does not revert); a version
6 snapshot is stale, rebuilt once. Version 8 adds, to ``lastConfirmed``, the latest time a tick signed
a confirmed act (``signed``: that tick's clock) and where its ``dispatch_signed`` line is: the
cadence counts from the later of that and the last act's block time, so a chain whose clock runs behind
the agent's cannot make every tick look an interval past its last act; a version 7 snapshot is
stale, rebuilt once. Version 9 adds ``resolved``: the dispatches a final ledger line resolved, those
of the highest nonces (a tick about to swap holds while the chain has not used one's nonce: its final
line is then a claim, however the files back it), and ``lastConfirmed.backed`` (whether the activity
log backs that act's line: else ``sail status`` says it is a claim); a version 8 snapshot is stale,
rebuilt once.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from memory.ledger._lines import open_regular, pread
from staging import StagingError, ensure_dir, stage

VERSION = 9
#: the versions ``load`` reads (2 and 3 forgot dropped dispatches, 4 block hashes, 5 kept the newest
#: act's alone, 6 confirmed acts' alone, 7 its signing time, 8 the resolved dispatches: stale, rebuilt)
READABLE = frozenset({9})
#: how many confirmed or reverted acts' ``dispatch_included`` lines the snapshot keeps (``anchors``):
#: the most a tick checks against the chain (one receipt request each), whatever the ledger's length
RECENT_ACTS = 16
#: how many dispatches resolved by a final ledger line the snapshot keeps (``resolved``), those of the
#: highest nonces: a tick about to swap checks them against the account's nonce on the chain
RESOLVED_KEPT = 16
_EDGE = 4096


@dataclass(frozen=True)
class LastAct:
    """The agent's last confirmed act (the latest by block time): when (``ts``, its block's time),
    at which ``block``, by which ``tx_hash``; ``signed_ts`` is the latest time a tick signed any
    confirmed act (that tick's clock: its ``dispatch_signed`` line), None when the activity log
    holds no line of such a signing (acts ledgered before such lines, or a line found in the
    ledger's tail alone)."""

    ts: int
    block: int
    tx_hash: str
    signed_ts: int | None = None

    @property
    def since(self) -> int:
        """The time the cadence counts from: the later of the block's time and the signing time.

        The block's time alone let a chain whose clock runs behind the agent's (a dev chain started
        in the past) make every tick look an interval past the last act, and swap every tick."""
        return self.ts if self.signed_ts is None else max(self.ts, self.signed_ts)


@dataclass(frozen=True)
class LineRef:
    """Where a line is: its byte offset and the SHA-256 of its bytes (without the newline)."""

    offset: int
    sha256: str


@dataclass(frozen=True)
class Coverage:
    """A prefix of a file: its ``size``, the SHA-256 of its first and last 4 KiB, and how many
    ``lines`` it holds (None when a version 2 snapshot did not say)."""

    size: int
    head_sha256: str
    tail_sha256: str
    lines: int | None = None

    @classmethod
    def of(cls, fd: int | None, size: int, path: Path, lines: int | None = None) -> Coverage:
        """The coverage of the first ``size`` bytes of the file open at ``fd`` (``lines`` long)."""
        if fd is None or size == 0:
            empty = hashlib.sha256(b"").hexdigest()
            return cls(0, empty, empty, 0)
        head = pread(fd, min(size, _EDGE), 0, path)
        start = max(0, size - _EDGE)
        tail = pread(fd, size - start, start, path)
        return cls(size, hashlib.sha256(head).hexdigest(), hashlib.sha256(tail).hexdigest(), lines)

    def holds(self, fd: int | None, end: int, path: Path) -> bool:
        """Whether the file (readable up to ``end``) still starts with this prefix, on a line boundary."""
        if self.size > end:
            return False
        if self.size and (fd is None or pread(fd, 1, self.size - 1, path) != b"\n"):
            return False
        other = Coverage.of(fd, self.size, path)
        return (other.size, other.head_sha256, other.tail_sha256) == (
            self.size,
            self.head_sha256,
            self.tail_sha256,
        )


@dataclass(frozen=True)
class OpenDispatch:
    """A dispatch the runner signed (or, in older logs, submitted) and nothing has resolved yet.

    ``line`` is its ``dispatch_signed`` (else ``dispatch_submitted``) line in the activity log;
    ``broadcast`` says a node accepted it; ``unverified`` that the ledger already holds an
    ``unverified`` entry for it (written once); ``settled`` that the activity log already holds its
    receipt's outcome (so reconcile does not log it again).
    """

    tx_hash: str
    nonce: int | None
    ts: int
    line: LineRef
    broadcast: bool = False
    unverified: bool = False
    settled: bool = False


@dataclass(frozen=True)
class Included:
    """A ``dispatch_included`` line: where the chain held ``tx_hash`` when it was ledgered."""

    tx_hash: str
    block: int
    block_hash: str
    line: LineRef
    chain_id: int = 0
    status: int = 1  # the receipt's: 1 for a confirmed act, 0 for a reverted one


@dataclass(frozen=True)
class Marked:
    """A ``chain_reorged`` or ``reorg_acknowledged`` line, and the transaction it names."""

    tx_hash: str
    line: LineRef


@dataclass(frozen=True)
class Snapshot:
    """What the snapshot file holds (see the module docstring)."""

    ledger: Coverage
    activity: Coverage
    last_confirmed: LastAct | None = None
    last_line: LineRef | None = None
    last_signed: LineRef | None = None
    """The ``dispatch_signed`` (or ``dispatch_submitted``) line of the latest signing of a confirmed
    act, whose ``ts`` is ``last_confirmed.signed_ts``; None when ``signed_ts`` is."""
    last_backed: bool = True
    """Whether the activity log backs ``last_confirmed``'s line (a ``dispatch_included`` of its block
    and status 1, or the runner's receipt line of its dispatch); False: that line is a claim."""
    open: tuple[OpenDispatch, ...] = ()
    unsent: tuple[OpenDispatch, ...] = ()
    tokens: Mapping[str, tuple[int, str]] = field(default_factory=dict)
    dropped: tuple[OpenDispatch, ...] = ()
    anchor: Included | None = None
    """Where the last confirmed act was ledgered (its ``dispatch_included`` line); None for an act
    ledgered before such lines were written, or none yet."""
    included: tuple[Included, ...] = ()
    """``dispatch_included`` lines of dispatches whose ledger line is not folded yet."""
    reorged: Marked | None = None
    """The ``chain_reorged`` line no ``reorg_acknowledged`` line has answered: trading is held."""
    acknowledged: Marked | None = None
    """The newest ``reorg_acknowledged`` line: its act's place on the chain is no longer checked."""
    anchors: tuple[Included, ...] = ()
    """Where the last ``RECENT_ACTS`` confirmed or reverted acts ledgered with a ``dispatch_included``
    line were ledgered, and with which status, oldest first (in ledger order)."""
    acked: tuple[Marked, ...] = ()
    """The ``reorg_acknowledged`` lines that name an act of ``anchors`` (or ``anchor``): those acts'
    places are no longer checked."""
    resolved: tuple[OpenDispatch, ...] = ()
    """The dispatches a final ledger line resolved, the ``RESOLVED_KEPT`` of the highest nonces, in
    nonce order: one whose nonce the chain has not used was never mined, so that line is a claim."""

    def body(self) -> dict[str, Any]:
        """The JSON object, without its digest."""
        last = self.last_confirmed
        return {
            "version": VERSION,
            "ledger": _coverage_wire(self.ledger),
            "activity": _coverage_wire(self.activity),
            "lastConfirmed": None
            if last is None or self.last_line is None
            else {
                "ts": last.ts,
                "block": last.block,
                "txHash": last.tx_hash,
                "offset": self.last_line.offset,
                "lineSha256": self.last_line.sha256,
                "backed": self.last_backed,
                "signed": None
                if self.last_signed is None or last.signed_ts is None
                else {
                    "ts": last.signed_ts,
                    "offset": self.last_signed.offset,
                    "lineSha256": self.last_signed.sha256,
                },
            },
            "open": [_dispatch_wire(d) for d in self.open],
            "unsent": [_dispatch_wire(d) for d in self.unsent],
            "dropped": [_dispatch_wire(d) for d in self.dropped],
            "tokens": {t: {"decimals": d, "symbol": s} for t, (d, s) in sorted(self.tokens.items())},
            "anchor": None if self.anchor is None else _included_wire(self.anchor),
            "included": [_included_wire(i) for i in self.included],
            "reorged": None if self.reorged is None else _marked_wire(self.reorged),
            "acknowledged": None if self.acknowledged is None else _marked_wire(self.acknowledged),
            "anchors": [_included_wire(i) for i in self.anchors],
            "acked": [_marked_wire(m) for m in self.acked],
            "resolved": [_dispatch_wire(d) for d in self.resolved],
        }

    def to_bytes(self) -> bytes:
        """The file's canonical bytes: the body and its digest."""
        body = self.body()
        return orjson.dumps({**body, "digest": _digest(body)}, option=orjson.OPT_INDENT_2)


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def _coverage_wire(c: Coverage) -> dict[str, Any]:
    return {"size": c.size, "lines": c.lines, "headSha256": c.head_sha256, "tailSha256": c.tail_sha256}


def _dispatch_wire(d: OpenDispatch) -> dict[str, Any]:
    return {
        "txHash": d.tx_hash,
        "nonce": d.nonce,
        "ts": d.ts,
        "offset": d.line.offset,
        "lineSha256": d.line.sha256,
        "broadcast": d.broadcast,
        "unverified": d.unverified,
        "settled": d.settled,
    }


def _included_wire(i: Included) -> dict[str, Any]:
    return {
        "txHash": i.tx_hash,
        "block": i.block,
        "blockHash": i.block_hash,
        "chainId": i.chain_id,
        "status": i.status,
        "offset": i.line.offset,
        "lineSha256": i.line.sha256,
    }


def _marked_wire(m: Marked) -> dict[str, Any]:
    return {"txHash": m.tx_hash, "offset": m.line.offset, "lineSha256": m.line.sha256}


#: the largest snapshot file read; a larger one is stale (a real one holds a few dispatches and the
#: tokens the agent trades, a few KiB)
MAX_SNAPSHOT_BYTES = 16 * 2**20


def load(path: Path) -> Snapshot | None:
    """Read a snapshot file; ``None`` when it is missing, unreadable, malformed, larger than
    ``MAX_SNAPSHOT_BYTES`` or its digest fails.

    Raises:
        LedgerNotAFile: the path holds a directory, FIFO, link or device.
    """
    fd = open_regular(path)
    if fd is None:
        return None
    try:
        if os.fstat(fd).st_size > MAX_SNAPSHOT_BYTES:
            return None  # a file made larger (a sparse one costs nothing to make) is never read whole
        chunks: list[bytes] = []
        total = 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_SNAPSHOT_BYTES:  # it grew while read
                return None
        obj: Any = orjson.loads(b"".join(chunks))
        digest = obj.pop("digest")
        if obj.get("version") not in READABLE or digest != _digest(obj):
            return None
        return _from_wire(obj)
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    finally:
        os.close(fd)


def _from_wire(obj: dict[str, Any]) -> Snapshot:
    last = obj["lastConfirmed"]
    signed = None if last is None else last["signed"]
    tokens = {str(t): _token(v) for t, v in dict(obj["tokens"]).items()}
    return Snapshot(
        ledger=_coverage(obj["ledger"]),
        activity=_coverage(obj["activity"]),
        last_confirmed=None
        if last is None
        else LastAct(
            ts=_int(last["ts"]),
            block=_int(last["block"]),
            tx_hash=_str(last["txHash"]),
            signed_ts=None if signed is None else _int(signed["ts"]),
        ),
        last_line=None if last is None else LineRef(_int(last["offset"]), _str(last["lineSha256"])),
        last_signed=None if signed is None else LineRef(_int(signed["offset"]), _str(signed["lineSha256"])),
        last_backed=True if last is None else _bool(last["backed"]),
        open=tuple(_dispatch(d) for d in obj["open"]),
        unsent=tuple(_dispatch(d) for d in obj["unsent"]),
        tokens=tokens,
        dropped=tuple(_dispatch(d) for d in obj["dropped"]),
        anchor=None if obj["anchor"] is None else _included(obj["anchor"]),
        included=tuple(_included(i) for i in obj["included"]),
        reorged=None if obj["reorged"] is None else _marked(obj["reorged"]),
        acknowledged=None if obj["acknowledged"] is None else _marked(obj["acknowledged"]),
        anchors=tuple(_included(i) for i in obj["anchors"]),
        acked=tuple(_marked(m) for m in obj["acked"]),
        resolved=tuple(_dispatch(d) for d in obj["resolved"]),
    )


def _included(obj: dict[str, Any]) -> Included:
    return Included(
        tx_hash=_str(obj["txHash"]),
        block=_int(obj["block"]),
        block_hash=_str(obj["blockHash"]),
        line=LineRef(_int(obj["offset"]), _str(obj["lineSha256"])),
        chain_id=_int(obj["chainId"]),
        status=_int(obj["status"]),
    )


def _marked(obj: dict[str, Any]) -> Marked:
    return Marked(tx_hash=_str(obj["txHash"]), line=LineRef(_int(obj["offset"]), _str(obj["lineSha256"])))


def _coverage(obj: dict[str, Any]) -> Coverage:
    lines = obj.get("lines")  # version 2 did not have it
    return Coverage(
        _int(obj["size"]),
        _str(obj["headSha256"]),
        _str(obj["tailSha256"]),
        None if lines is None else _int(lines),
    )


def _dispatch(obj: dict[str, Any]) -> OpenDispatch:
    nonce = obj["nonce"]
    return OpenDispatch(
        tx_hash=_str(obj["txHash"]),
        nonce=None if nonce is None else _int(nonce),
        ts=_int(obj["ts"]),
        line=LineRef(_int(obj["offset"]), _str(obj["lineSha256"])),
        broadcast=_bool(obj["broadcast"]),
        unverified=_bool(obj["unverified"]),
        settled=_bool(obj["settled"]),
    )


def _token(obj: dict[str, Any]) -> tuple[int, str]:
    """A token's decimals and symbol, held to what ``token_metadata`` accepts: decimals beyond 255
    would make every amount rendered with them a number of that many digits (a hang)."""
    decimals, symbol = _int(obj["decimals"]), _str(obj["symbol"])
    if decimals > 255 or not symbol or any(c.isspace() for c in symbol):
        raise ValueError(obj)
    return decimals, symbol


def _int(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(value)
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(value)
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(value)
    return value


def save(path: Path, snap: Snapshot) -> None:
    """Write the snapshot atomically (stage in its directory, fsync, rename, fsync the directory).

    A failure to write the cache is not a failure of the ledger: it is swallowed, and the next
    reader rebuilds or catches up the snapshot from the files.
    """
    with contextlib.suppress(StagingError, OSError):
        ensure_dir(path.parent)
        stage(path.parent, snap.to_bytes(), hint=path.name).publish(path)
