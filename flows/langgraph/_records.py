"""The records the checkpointer writes to a thread's stream, and the index built back from them.

Every record is a JSON object in the thread run's ``checkpoints`` stream. Values are LangGraph's
own serialisation (``serde.dumps_typed``: a type name and bytes), carried as ``[type, base64]``:

* ``{"kind": "checkpoint", "ns", "id", "parent", "checkpoint", "metadata", "runId", "blobs"}``:
  one ``put``. ``checkpoint`` is the checkpoint without its channel values; ``blobs`` lists
  ``[channel, version, type, base64]`` for the channels ``put`` was told are new (the others are
  found by version in earlier records); ``runId`` is LangGraph's run id from the metadata, if any.
* ``{"kind": "writes", "ns", "checkpoint", "task", "path", "writes"}``: one ``put_writes`` call,
  ``writes`` as ``[idx, channel, type, base64]``.
* ``{"kind": "delete-thread"}``: a tombstone: everything before it is gone.
* ``{"kind": "delete-runs", "runIds": [...]}``: a tombstone for the checkpoints (and their writes)
  that those LangGraph runs made before it.
* ``{"kind": "compacted", "into": run_id}``: the thread moved to a new generation (prune); what
  is here is superseded by that run.

The index is rebuilt from these alone, so anything a reader sees is something the journal holds.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from flows.langgraph._errors import RecordInvalid
from journal import Record

STREAM = "checkpoints"
"""The stream of a thread run that holds its checkpoints, writes and tombstones."""

Typed = tuple[str, bytes]
Version = str | int | float


def pack(typed: Typed) -> list[str]:
    """``(type, bytes)`` as the JSON pair ``[type, base64]``."""
    return [typed[0], base64.b64encode(typed[1]).decode("ascii")]


def _unpack(value: Any, what: str) -> Typed:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], str)
    ):
        raise ValueError(f"{what} is not a [type, base64] pair")
    try:
        return value[0], base64.b64decode(value[1], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{what} is not valid base64") from None


def _version(value: Any, what: str) -> Version:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"{what} is not a string or a number")
    return value


def versions_ok(versions: Any) -> TypeGuard[dict[str, Any]]:
    """Whether ``versions`` is what a checkpoint's ``channel_versions`` must be to be read back: a
    dict of channel names to versions (strings or numbers, not booleans)."""
    return isinstance(versions, dict) and all(
        isinstance(c, str) and not isinstance(v, bool) and isinstance(v, str | int | float)
        for c, v in versions.items()
    )


def checkpoint_problem(checkpoint: Any, record_id: str) -> str | None:
    """Why LangGraph could not run on ``checkpoint`` (a decoded checkpoint without its values) as the
    one of the record ``record_id`` (None: it can). LangGraph indexes and does arithmetic on these
    fields without a check, so a crafted or foreign one would fail deep inside a graph run with a
    bare ``TypeError``, ``KeyError`` or ``binascii.Error``; the writer asks the same before appending.
    """
    if not isinstance(checkpoint, dict):
        return f"is a {type(checkpoint).__name__}, not a dict"
    if checkpoint.get("id") != record_id:
        return f"has the id {str(checkpoint.get('id'))[:80]!r}, not its record's {record_id[:80]!r}"
    v, seen = checkpoint.get("v", 1), checkpoint.get("versions_seen")
    updated, versions = checkpoint.get("updated_channels"), checkpoint.get("channel_versions")
    sends = checkpoint.get("pending_sends")
    checks = (
        (not isinstance(v, bool) and isinstance(v, int), "a format version v that is not an integer"),
        (isinstance(checkpoint.get("ts", ""), str), "a timestamp ts that is not a string"),
        (
            versions_ok(checkpoint.get("channel_versions")),
            "channel_versions that are not channel names to versions (strings or numbers)",
        ),
        (
            isinstance(seen, dict) and all(isinstance(n, str) and versions_ok(vs) for n, vs in seen.items()),
            "versions_seen that are not node names to channel versions",
        ),
        (
            updated is None
            or (isinstance(updated, list | tuple) and all(isinstance(c, str) for c in updated)),
            "updated_channels that are not a list of channel names",
        ),
        # LangGraph compares every version with the others (``max``, a node's seen version against
        # its channel's): a string beside a number is a TypeError in every step
        (_one_kind(versions, seen), "channel versions of two kinds (strings and numbers)"),
        # a checkpoint before format 4 has its pending sends moved into a channel whose version is
        # the greatest of the others (``max`` of none is a ValueError)
        (
            not isinstance(v, int) or v >= 4 or not sends or (isinstance(sends, list) and bool(versions)),
            "pending_sends (format before 4) that are not a list beside channel versions",
        ),
    )
    return next((f"has {problem}" for ok, problem in checks if not ok), None)


def _one_kind(versions: Any, seen: Any) -> bool:
    """Whether the versions in ``versions`` and in the maps of ``seen`` are all strings or all numbers
    (anything else is left to the checks of their shapes)."""
    maps = [versions, *(seen.values() if isinstance(seen, dict) else ())]
    return len({isinstance(v, str) for m in maps if isinstance(m, dict) for v in m.values()}) <= 1


def metadata_problem(metadata: Any) -> str | None:
    """Why LangGraph could not run on ``metadata`` (a checkpoint's decoded metadata); None: it can.
    ``step`` is added to, ``parents`` is merged into a config, ``source`` is compared as text."""
    if not isinstance(metadata, dict):
        return f"is a {type(metadata).__name__}, not a dict"
    step = metadata.get("step", -1)
    if isinstance(step, bool) or not isinstance(step, int):
        return "has a step that is not an integer"
    parents = metadata.get("parents", {})
    if not isinstance(parents, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in parents.items()
    ):
        return "has parents that are not namespaces to checkpoint ids"
    if not isinstance(metadata.get("source", ""), str):
        return "has a source that is not a string"
    return None


def payload_problem(payload: Mapping[str, Any]) -> str | None:
    """Why a reader would refuse ``payload`` as a record of the stream (None: it reads it).

    The writer asks before it appends: a record the readers refuse is never skipped, so one written
    from a bad argument (a checkpoint id that is not a string, a version that is None) would leave
    the thread unreadable for every process from then on.
    """
    try:
        ThreadIndex()._fold(payload, Record("", STREAM, 1, "", None, 0, payload))
    except (ValueError, TypeError, KeyError) as exc:
        return str(exc)
    return None


def _text(value: Any, what: str, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a string")
    return value


@dataclass(frozen=True)
class StoredCheckpoint:
    """One live checkpoint as the index holds it: still serialised, with the record it came from."""

    ns: str
    id: str
    parent: str | None
    checkpoint: Typed
    metadata: Typed
    run_id: str | None
    record: Record


@dataclass(frozen=True)
class StoredWrite:
    """One pending write: ``(task_id, channel, value)`` with the task's path and its index."""

    task_id: str
    channel: str
    value: Typed
    task_path: str
    idx: int
    record: Record | None = None


@dataclass
class ThreadIndex:
    """The live state of one thread generation, folded from its records in order.

    ``apply`` takes each record once, in stream order (``seen`` remembers how far each run was
    read); a record it cannot understand raises ``RecordInvalid`` naming it, and is never skipped.
    """

    checkpoints: dict[str, dict[str, StoredCheckpoint]] = field(default_factory=dict)
    writes: dict[tuple[str, str], dict[tuple[str, int], StoredWrite]] = field(default_factory=dict)
    blobs: dict[tuple[str, str, Version], Typed] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)
    compacted_into: str | None = None
    tombstone: str | None = None
    """``run:seq`` of the last tombstone applied: a record written after it must not share a key with
    one it dropped, or the journal would answer the new write with the dropped record."""
    _latest: dict[str, str] = field(default_factory=dict)  # per namespace, while it holds

    def apply_all(self, records: Sequence[Record]) -> None:
        """Apply the records of one run that come after the last one applied from that run."""
        if not records:
            return
        last = self.seen.get(records[0].run_id, 0)
        # A stream's sequence numbers count 1, 2, 3 … without gaps, so record ``last`` sits at
        # index ``last - 1``: start right after it rather than walk the whole stream.
        start = last if 0 < last <= len(records) and records[last - 1].seq == last else 0
        for rec in records[start:]:
            if rec.seq > last:
                self.apply(rec)

    def apply(self, rec: Record) -> bool:
        """Fold one record in; False when it was already applied (its run was read past it)."""
        if rec.seq <= self.seen.get(rec.run_id, 0):
            return False
        try:
            self._fold(rec.payload, rec)
        except (ValueError, TypeError, KeyError) as exc:
            raise RecordInvalid(
                f"record {rec.seq} of stream {rec.stream} in run {rec.run_id} is not a LangGraph "
                f"checkpointer record ({exc}); inspect it with `flows journal {rec.run_id} --stream "
                f"{rec.stream}`",
                run_id=rec.run_id,
                stream=rec.stream,
                seq=rec.seq,
            ) from None
        self.seen[rec.run_id] = rec.seq
        return True

    def _fold(self, p: Mapping[str, Any], rec: Record) -> None:
        kind = p["kind"]
        if kind == "checkpoint":
            self._fold_checkpoint(p, rec)
        elif kind == "writes":
            self._fold_writes(p, rec)
        elif kind == "delete-thread":
            self.tombstone = f"{rec.run_id}:{rec.seq}"
            self._latest.clear()
            self.checkpoints.clear()
            self.writes.clear()
            self.blobs.clear()
        elif kind == "delete-runs":
            run_ids = p["runIds"]
            if not isinstance(run_ids, list) or not all(isinstance(r, str) for r in run_ids):
                raise ValueError("runIds is not a list of strings")
            self.drop_runs(set(run_ids))
            self.tombstone = f"{rec.run_id}:{rec.seq}"
        elif kind == "compacted":
            self.compacted_into = _text(p["into"], "into")
        else:
            raise ValueError(f"unknown kind {kind!r}")

    def _fold_checkpoint(self, p: Mapping[str, Any], rec: Record) -> None:
        ns = _text(p["ns"], "ns")
        cid = _text(p["id"], "id")
        blobs = p["blobs"]
        if not isinstance(blobs, list):
            raise ValueError("blobs is not a list")
        for blob in blobs:
            if not isinstance(blob, list) or len(blob) != 4:
                raise ValueError("a blob is not [channel, version, type, base64]")
            channel = _text(blob[0], "a blob's channel")
            version = _version(blob[1], "a blob's version")
            self.blobs[(ns, channel, version)] = _unpack(blob[2:], "a blob")
        if ns in self._latest and cid > self._latest[ns]:
            self._latest[ns] = cid
        self.checkpoints.setdefault(ns, {})[cid] = StoredCheckpoint(
            ns=ns,
            id=cid,
            parent=_text(p["parent"], "parent", optional=True),
            checkpoint=_unpack(p["checkpoint"], "checkpoint"),
            metadata=_unpack(p["metadata"], "metadata"),
            run_id=_text(p.get("runId"), "runId", optional=True),
            record=rec,
        )

    def _fold_writes(self, p: Mapping[str, Any], rec: Record) -> None:
        ns = _text(p["ns"], "ns")
        cid = _text(p["checkpoint"], "checkpoint")
        task = _text(p["task"], "task")
        path = _text(p["path"], "path")
        writes = p["writes"]
        if not isinstance(writes, list):
            raise ValueError("writes is not a list")
        stored = self.writes.setdefault((ns, cid), {})
        for w in writes:
            if not isinstance(w, list) or len(w) != 4 or isinstance(w[0], bool) or not isinstance(w[0], int):
                raise ValueError("a write is not [idx, channel, type, base64]")
            idx = w[0]
            key = (task, idx)
            # A regular write (idx >= 0) is kept from its first record; a special one (an error, an
            # interrupt: negative idx) is replaced by the latest, as LangGraph's own savers do.
            if idx >= 0 and key in stored:
                continue
            channel = _text(w[1], "a write's channel")
            stored[key] = StoredWrite(task, channel, _unpack(w[2:], "a write"), path, idx, rec)

    def drop_runs(self, run_ids: set[str]) -> None:
        """Forget the checkpoints whose LangGraph run id is in ``run_ids``, and their writes."""
        self._latest.clear()
        for ns, by_id in self.checkpoints.items():
            for cid in [c for c, cp in by_id.items() if cp.run_id in run_ids]:
                del by_id[cid]
                self.writes.pop((ns, cid), None)

    def live(self) -> Iterable[StoredCheckpoint]:
        """Every live checkpoint, in no particular order."""
        for by_id in self.checkpoints.values():
            yield from by_id.values()

    def latest(self, ns: str) -> StoredCheckpoint | None:
        """The checkpoint of ``ns`` with the greatest id (ids sort by creation time)."""
        by_id = self.checkpoints.get(ns)
        if not by_id:
            return None
        latest = self._latest.get(ns)
        if latest is None or latest not in by_id:
            latest = self._latest[ns] = max(by_id)
        return by_id[latest]

    def get(self, ns: str, cid: str) -> StoredCheckpoint | None:
        """The live checkpoint ``cid`` of ``ns``, or None."""
        return self.checkpoints.get(ns, {}).get(cid)

    def pending(self, ns: str, cid: str) -> list[StoredWrite]:
        """The checkpoint's pending writes in LangGraph's replay order (task path, task id, idx)."""
        stored = self.writes.get((ns, cid))
        if not stored:
            return []
        return sorted(stored.values(), key=lambda w: (w.task_path, w.task_id, w.idx))

    def values(self, ns: str, versions: Mapping[str, Any]) -> dict[str, Typed]:
        """The serialised channel values at ``versions`` (channels stored empty are left out)."""
        out: dict[str, Typed] = {}
        for channel, version in versions.items():
            typed = self.blobs.get((ns, channel, version))
            if typed is not None and typed[0] != "empty":
                out[channel] = typed
        return out
