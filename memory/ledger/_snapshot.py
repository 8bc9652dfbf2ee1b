"""The derived state snapshot, ``.sail/memory/state.json`` (SPEC R-A8, the seed's "Stage 2").

The snapshot lets a tick find its last confirmed act in O(1) instead of rescanning the ledger. It
is a cache and never outranks the ledger:

* it names the ledger prefix it covers: its ``size`` in bytes and SHA-256 digests of that prefix's
  first and last 4 KiB (``headSha256``, ``tailSha256``). Hashing the whole prefix would cost as much
  as the rescan the snapshot exists to avoid; since the ledger is append-only, the bytes next to the
  covered end and the file's start are the ones a replaced, truncated or rewritten ledger changes.
* it is valid only while the ledger still starts with that prefix (size not shrunk, both digests
  equal, the prefix ends at a line boundary). A ledger that has grown past it is caught up by
  decoding only the new lines; anything else makes it stale, and it is rebuilt from the ledger's
  tail (read backwards) and rewritten.
* it is written by stage-and-rename, so a reader sees an old snapshot or a new one, never a part;
  a missing, unreadable or malformed snapshot is simply stale.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from staging import StagingError, ensure_dir, stage

VERSION = 1
_EDGE = 4096


@dataclass(frozen=True)
class LastAct:
    """The agent's last confirmed act: when (``ts``), at which ``block``, by which ``tx_hash``."""

    ts: int
    block: int
    tx_hash: str


@dataclass(frozen=True)
class Snapshot:
    """What the snapshot file holds: the covered ledger prefix and the last confirmed act in it."""

    size: int
    head_sha256: str
    tail_sha256: str
    last_confirmed: LastAct | None

    def to_bytes(self) -> bytes:
        """The file's canonical bytes."""
        last = self.last_confirmed
        return orjson.dumps(
            {
                "version": VERSION,
                "ledger": {"size": self.size, "headSha256": self.head_sha256, "tailSha256": self.tail_sha256},
                "lastConfirmed": None
                if last is None
                else {"ts": last.ts, "block": last.block, "txHash": last.tx_hash},
            },
            option=orjson.OPT_INDENT_2,
        )


def prefix_digests(fd: int, size: int) -> tuple[str, str]:
    """SHA-256 of the first and of the last 4 KiB of the file's first ``size`` bytes."""
    head = os.pread(fd, min(size, _EDGE), 0)
    start = max(0, size - _EDGE)
    tail = os.pread(fd, size - start, start)
    return hashlib.sha256(head).hexdigest(), hashlib.sha256(tail).hexdigest()


def load(path: Path) -> Snapshot | None:
    """Read a snapshot file; ``None`` when it is missing, unreadable or malformed (stale)."""
    try:
        obj: Any = orjson.loads(path.read_bytes())
        ledger, last = obj["ledger"], obj["lastConfirmed"]
        if obj["version"] != VERSION:
            return None
        snap = Snapshot(
            size=_int(ledger["size"]),
            head_sha256=str(ledger["headSha256"]),
            tail_sha256=str(ledger["tailSha256"]),
            last_confirmed=None
            if last is None
            else LastAct(ts=_int(last["ts"]), block=_int(last["block"]), tx_hash=str(last["txHash"])),
        )
    except (OSError, ValueError, TypeError, KeyError):
        return None
    return snap


def _int(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(value)
    return value


def covers(snap: Snapshot, fd: int) -> bool:
    """True when the file open at ``fd`` still starts with the prefix ``snap`` covers."""
    size = os.fstat(fd).st_size
    if snap.size > size:
        return False
    if snap.size and os.pread(fd, 1, snap.size - 1) != b"\n":
        return False
    return prefix_digests(fd, snap.size) == (snap.head_sha256, snap.tail_sha256)


def save(path: Path, snap: Snapshot) -> None:
    """Write the snapshot atomically (stage in its directory, fsync, rename, fsync the directory).

    A failure to write the cache is not a failure of the ledger: it is swallowed, and the next
    reader rebuilds the snapshot from the ledger.
    """
    with contextlib.suppress(StagingError, OSError):
        ensure_dir(path.parent)
        stage(path.parent, snap.to_bytes(), hint=path.name).publish(path)
